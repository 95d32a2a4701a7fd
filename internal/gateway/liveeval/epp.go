package liveeval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/epp"
	"github.com/ttft-dev/ttft/internal/gateway/epp/dataplane"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// EPPPrefix, in a run's policy "epp:POLICY", routes the run through the
// Endpoint Picker (package epp) instead of the gateway: the picker runs
// POLICY in-process on a loopback gRPC port over a static list of the
// fleet's backends, and package dataplane — the Envoy stand-in — serves
// the clients over HTTP in front of it, asking the picker per request and
// forwarding to the endpoint it names. Everything else is the gateway
// run's: the same fleet, seed, request sequence and SLO (set on every
// request as header x-ttft-slo-ms, as an Envoy header_mutation filter
// ahead of ext_proc would, where the gateway takes it from its route).
const EPPPrefix = "epp:"

// SplitEPP reports whether policy is routed through the picker, and the
// policy without the prefix.
func SplitEPP(policy string) (string, bool) { return strings.CutPrefix(policy, EPPPrefix) }

// CheckEPPPolicy refuses what the picker cannot run: admission and
// predictor modes are the gateway's (a policy with a suffix), and lighter
// models (admission fleets).
func CheckEPPPolicy(policy string) error {
	inner, ok := SplitEPP(policy)
	if !ok {
		return nil
	}
	_, adm, pred := SplitPolicy(inner)
	if adm != gateway.AdmitBestEffort || pred != sched.PredictorDefault {
		return fmt.Errorf("policy %q: the Endpoint Picker takes a scheduling policy alone (admission and predictor modes are the gateway's)", policy)
	}
	return nil
}

// startFront starts what routes a run: the gateway, or the picker behind
// the data plane for an "epp:" policy. It returns the scheduler deciding,
// the URL clients send to, and what stops it all.
func startFront(ctx context.Context, fleet Fleet, policy string, seed uint64, urls, liteURLs []string) (*sched.Scheduler, string, func(), error) {
	inner, viaEPP := SplitEPP(policy)
	if !viaEPP {
		g, u, stop, err := startGateway(ctx, fleet, policy, seed, urls, liteURLs)
		if err != nil {
			return nil, "", nil, err
		}
		return g.Scheduler(), u, stop, nil
	}
	if err := CheckEPPPolicy(policy); err != nil {
		return nil, "", nil, err
	}
	if len(liteURLs) > 0 {
		return nil, "", nil, fmt.Errorf("fleet %s has a lighter model's backends, which only the gateway's admission uses", fleet.Name)
	}
	return startEPP(ctx, fleet, urls, eppOptions(fleet, inner, seed))
}

// eppReadyTimeout bounds the wait for the picker's first scrape.
const eppReadyTimeout = 15 * time.Second

// eppScrapeInterval is how often the picker reads its endpoints' metrics
// and /health in the evaluation: as often as the gateway's run reads its
// backends' (startGateway's health interval; TestEPPReadsAsGateway
// checks they agree), so that both schedulers decide on the same
// information. The picker's deployment default (100 ms) is not a
// routing difference to measure here: the engine's prefix-cache hit rate
// counted over 100 ms windows, in place of 1 s ones, makes the scheduler
// learn other cache capacities (docs/routing-evaluation.md, "Endpoint
// Picker against the gateway").
const eppScrapeInterval = time.Second

// eppOptions are the picker's options for a run of policy on fleet:
// endpoints read as the gateway reads its backends. Backends already
// running (fleet.URLs: real engines) are not scraped, as the gateway's
// run does not scrape them.
func eppOptions(fleet Fleet, policy string, seed uint64) epp.Options {
	opts := epp.Options{Policy: policy, Seed: seed, ScrapeInterval: eppScrapeInterval}
	if len(fleet.URLs) > 0 {
		opts.ScrapeInterval, opts.HealthPath = -1, "-"
	}
	return opts
}

// startEPP serves a picker with opts over urls and the data plane in
// front of it, both on loopback ports, and waits until the picker has
// scraped its endpoints.
func startEPP(ctx context.Context, fleet Fleet, urls []string, opts epp.Options) (*sched.Scheduler, string, func(), error) {
	var eps []epp.Endpoint
	for _, u := range urls {
		addr, err := endpointAddr(ctx, u)
		if err != nil {
			return nil, "", nil, err
		}
		eps = append(eps, epp.Endpoint{Addr: addr})
	}
	p, err := epp.New(opts, eps)
	if err != nil {
		return nil, "", nil, err
	}
	var lc net.ListenConfig
	gln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("endpoint picker: %w", err)
	}
	hln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		gln.Close()
		return nil, "", nil, fmt.Errorf("data plane: %w", err)
	}
	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gln.Close()
		hln.Close()
		return nil, "", nil, fmt.Errorf("data plane: connecting to the endpoint picker: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	pdone, ddone := make(chan error, 1), make(chan error, 1)
	go func() { pdone <- p.Serve(sctx, gln, time.Second) }()
	dp := dataplane.New(conn, dataplane.Options{RequestHeaders: map[string]string{
		"x-ttft-slo-ms": strconv.FormatInt(fleet.SLO.Milliseconds(), 10)}})
	go func() { ddone <- dp.Serve(sctx, hln, time.Second) }()
	stop := func() {
		cancel()
		<-ddone
		conn.Close()
		<-pdone
	}
	deadline := time.Now().Add(eppReadyTimeout)
	for !p.Ready() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, "", nil, fmt.Errorf("endpoint picker not ready after %v: its endpoints' metrics cannot be read", eppReadyTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return p.Scheduler(), "http://" + hln.Addr().String(), stop, nil
}

// endpointAddr is a backend URL's ip:port, as the protocol names
// endpoints (a host name is resolved).
func endpointAddr(ctx context.Context, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("backend URL %q: %w", raw, err)
	}
	if u.Scheme != "http" || u.Port() == "" {
		return "", fmt.Errorf("backend URL %q: the data plane forwards plain http to an ip:port", raw)
	}
	host := u.Hostname()
	if net.ParseIP(host) == nil {
		ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
		if err != nil || len(ips) == 0 {
			return "", errors.Join(fmt.Errorf("backend URL %q: resolving %s", raw, host), err)
		}
		host = ips[0].String()
	}
	return net.JoinHostPort(host, u.Port()), nil
}

// EPPComparison is, on one fleet, a policy through the picker against the
// same policy through the gateway (medians across seeds), in two views:
// client-side (what bench measured through each front: routing and the
// path together) and backend-side (what the stand-ins measured: routing
// alone — which backend each request landed on, whether its prefix was
// cached there, how long it queued and prefilled).
type EPPComparison struct {
	Fleet, Policy string
	Gateway, EPP  Summary
	// Client-side: MeanRatio and P99Ratio are the picker's over the
	// gateway's (lower is better); AttainRatio the picker's SLO
	// attainment over the gateway's (higher is better); HitDiff the
	// picker's cache hit rate less the gateway's, in points of share (NaN
	// without stand-ins).
	MeanRatio, P99Ratio, AttainRatio, HitDiff float64
	// Within: the picker's client-side mean, P99 and attainment are each
	// within EPPTolerance of the gateway's, or better.
	Within bool
	// Backend-side ratios, as the client-side ones (NaN unless both
	// summaries have backend figures), and BackendWithin, issue 19's
	// target judged on them: the picker's routing quality.
	BackendMeanRatio, BackendP99Ratio, BackendAttainRatio float64
	BackendWithin                                         bool
}

// EPPTolerance is issue 19's target: the picker's routing quality within
// 5% of the gateway's own.
const EPPTolerance = 0.05

// CompareEPP pairs every "epp:POLICY" summary with POLICY's on the same
// fleet.
func CompareEPP(sums []Summary) []EPPComparison {
	var out []EPPComparison
	for _, e := range sums {
		inner, ok := SplitEPP(e.Policy)
		if !ok {
			continue
		}
		for _, g := range sums {
			if g.Fleet != e.Fleet || g.Policy != inner {
				continue
			}
			c := EPPComparison{Fleet: e.Fleet, Policy: inner, Gateway: g, EPP: e,
				MeanRatio: ratio(float64(e.Mean), float64(g.Mean)), P99Ratio: ratio(float64(e.P99), float64(g.P99)),
				AttainRatio: ratio(e.Attainment, g.Attainment), HitDiff: e.HitRate - g.HitRate,
				BackendMeanRatio: math.NaN(), BackendP99Ratio: math.NaN(), BackendAttainRatio: math.NaN()}
			c.Within = withinTolerance(c.MeanRatio, c.P99Ratio, c.AttainRatio)
			if e.Backend && g.Backend {
				c.BackendMeanRatio = ratio(float64(e.BackendMean), float64(g.BackendMean))
				c.BackendP99Ratio = ratio(float64(e.BackendP99), float64(g.BackendP99))
				c.BackendAttainRatio = ratio(e.BackendAttainment, g.BackendAttainment)
				c.BackendWithin = withinTolerance(c.BackendMeanRatio, c.BackendP99Ratio, c.BackendAttainRatio)
			}
			out = append(out, c)
		}
	}
	return out
}

// withinTolerance: mean and P99 no more than EPPTolerance over, and
// attainment no more than EPPTolerance under (a NaN is not within).
func withinTolerance(mean, p99, attain float64) bool {
	return mean <= 1+EPPTolerance && p99 <= 1+EPPTolerance && attain >= 1-EPPTolerance
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// EPPMedians are the medians of CompareEPP's ratios over its pairs (those
// with the figures, for the backend-side ones), and how many pairs met the
// target in each view.
type EPPMedians struct {
	Pairs, BackendPairs                                   int
	MeanRatio, P99Ratio, AttainRatio                      float64
	BackendMeanRatio, BackendP99Ratio, BackendAttainRatio float64
	Within, BackendWithin                                 int
}

// MedianEPP summarises cs.
func MedianEPP(cs []EPPComparison) EPPMedians {
	med := func(f func(EPPComparison) float64) float64 {
		var xs []float64
		for _, c := range cs {
			if x := f(c); !math.IsNaN(x) {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		slices.Sort(xs)
		n := len(xs)
		if n%2 == 1 {
			return xs[n/2]
		}
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	m := EPPMedians{Pairs: len(cs),
		MeanRatio:          med(func(c EPPComparison) float64 { return c.MeanRatio }),
		P99Ratio:           med(func(c EPPComparison) float64 { return c.P99Ratio }),
		AttainRatio:        med(func(c EPPComparison) float64 { return c.AttainRatio }),
		BackendMeanRatio:   med(func(c EPPComparison) float64 { return c.BackendMeanRatio }),
		BackendP99Ratio:    med(func(c EPPComparison) float64 { return c.BackendP99Ratio }),
		BackendAttainRatio: med(func(c EPPComparison) float64 { return c.BackendAttainRatio }),
	}
	for _, c := range cs {
		if c.Within {
			m.Within++
		}
		if !math.IsNaN(c.BackendMeanRatio) {
			m.BackendPairs++
			if c.BackendWithin {
				m.BackendWithin++
			}
		}
	}
	return m
}

// FormatEPP writes CompareEPP's pairs as Markdown tables: client-side
// (through each front), then backend-side (as the stand-ins measured, where
// they did), then the medians of the ratios.
func FormatEPP(w io.Writer, cs []EPPComparison) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "**no**"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t policy\t client mean ms gw / epp\t ratio\t client P99 ms gw / epp\t ratio\t client attain gw / epp\t ratio\t cache hit gw / epp\t within 5%%\t\n")
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 10))
	for _, c := range cs {
		hit := "–"
		if !math.IsNaN(c.HitDiff) {
			hit = fmt.Sprintf("%.0f%% / %.0f%%", 100*c.Gateway.HitRate, 100*c.EPP.HitRate)
		}
		fmt.Fprintf(tw, "| %s\t %s\t %.1f / %.1f\t %.2f\t %.1f / %.1f\t %.2f\t %.1f%% / %.1f%%\t %.3f\t %s\t %s\t\n",
			c.Fleet, c.Policy, ms(c.Gateway.Mean), ms(c.EPP.Mean), c.MeanRatio, ms(c.Gateway.P99), ms(c.EPP.P99), c.P99Ratio,
			100*c.Gateway.Attainment, 100*c.EPP.Attainment, c.AttainRatio, hit, yes(c.Within))
	}
	tw.Flush()
	m := MedianEPP(cs)
	if m.BackendPairs > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintf(tw, "| fleet\t policy\t backend mean ms gw / epp\t ratio\t backend P99 ms gw / epp\t ratio\t backend attain gw / epp\t ratio\t queued ms gw / epp\t within 5%%\t\n")
		fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 10))
		for _, c := range cs {
			if math.IsNaN(c.BackendMeanRatio) {
				continue
			}
			fmt.Fprintf(tw, "| %s\t %s\t %.1f / %.1f\t %.2f\t %.1f / %.1f\t %.2f\t %.1f%% / %.1f%%\t %.3f\t %.1f / %.1f\t %s\t\n",
				c.Fleet, c.Policy, ms(c.Gateway.BackendMean), ms(c.EPP.BackendMean), c.BackendMeanRatio,
				ms(c.Gateway.BackendP99), ms(c.EPP.BackendP99), c.BackendP99Ratio,
				100*c.Gateway.BackendAttainment, 100*c.EPP.BackendAttainment, c.BackendAttainRatio,
				ms(c.Gateway.BackendQueued), ms(c.EPP.BackendQueued), yes(c.BackendWithin))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nPicker over gateway, medians over %d pairs: client-side mean ×%.2f, P99 ×%.2f, attainment ×%.3f (%d within 5%%)",
		m.Pairs, m.MeanRatio, m.P99Ratio, m.AttainRatio, m.Within)
	if m.BackendPairs > 0 {
		fmt.Fprintf(w, "; backend-side (%d pairs) mean ×%.2f, P99 ×%.2f, attainment ×%.3f (%d within 5%%)",
			m.BackendPairs, m.BackendMeanRatio, m.BackendP99Ratio, m.BackendAttainRatio, m.BackendWithin)
	}
	fmt.Fprintln(w)
}

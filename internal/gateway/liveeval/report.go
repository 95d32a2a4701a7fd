package liveeval

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// Options select what Run evaluates.
type Options struct {
	Fleets   []Fleet
	Policies []string
	Seeds    []uint64
	// Progress, when set, hears each run's result as it finishes.
	Progress func(Result)
	// Ollama is the ollama binary that fleets of Ollama instances need.
	Ollama string
	// Store, when set, gets each run's result as soon as it finishes
	// (before Progress), with the run's times and the machine's load
	// around it; a run that cannot be stored stops the suite, since a
	// result not on disk would be lost with the next crash.
	Store *Store
	// Done are runs already made (a resumed suite's, ResumeStore): a
	// (fleet, policy, seed) among them is not run again, and its result
	// takes its place in Run's.
	Done []Result
}

// runKey names a run of a suite.
type runKey struct {
	fleet, policy string
	seed          uint64
}

// Run evaluates every policy on every fleet with every seed, one run at a
// time (runs share the machine, so concurrent runs would time each other).
func Run(ctx context.Context, opt Options) ([]Result, error) {
	var out []Result
	done := map[runKey]Result{}
	for _, r := range opt.Done {
		done[runKey{r.Fleet, r.Policy, r.Seed}] = r
	}
	for _, f := range opt.Fleets {
		// Real engines are started once for the fleet's runs (each run
		// resets them) and stopped before the next fleet's; not at all
		// when every run of the fleet is done.
		stop := func() {}
		if anyLeft(f.Name, opt, done) {
			var err error
			if f, stop, err = startEngines(ctx, f, opt.Ollama); err != nil {
				return out, fmt.Errorf("fleet %s: %w", f.Name, err)
			}
		}
		rs, err := runFleet(ctx, f, opt, done)
		stop()
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// anyLeft reports whether a run of the fleet is not done.
func anyLeft(fleet string, opt Options, done map[runKey]Result) bool {
	for _, seed := range opt.Seeds {
		for _, pol := range opt.Policies {
			if _, ok := done[runKey{fleet, pol, seed}]; !ok {
				return true
			}
		}
	}
	return false
}

// runFleet runs every policy with every seed on one fleet, but those done.
func runFleet(ctx context.Context, f Fleet, opt Options, done map[runKey]Result) ([]Result, error) {
	var out []Result
	for _, seed := range opt.Seeds {
		for _, pol := range opt.Policies {
			if r, ok := done[runKey{f.Name, pol, seed}]; ok {
				out = append(out, r)
				continue
			}
			if err := ctx.Err(); err != nil {
				return out, err
			}
			meta := RunMeta{Requests: f.Workload.Requests, Started: time.Now(), LoadStart: LoadAvg()}
			r, err := RunOne(ctx, f, pol, seed)
			if err == nil && opt.Store != nil {
				meta.Ended, meta.LoadEnd = time.Now(), LoadAvg()
				_, err = opt.Store.WriteRun(r, meta)
			}
			if err != nil {
				err = fmt.Errorf("fleet %s, policy %s, seed %d: %w", f.Name, pol, seed, err)
				if f.Engines != nil {
					err = fmt.Errorf("%w\n%s", err, f.Engines.Diagnose())
				}
				return out, err
			}
			if opt.Progress != nil {
				opt.Progress(r)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// Summary is one (fleet, policy) across seeds: the median of each figure
// and the range of P99.
type Summary struct {
	Fleet, Policy    string
	Seeds            int
	Mean, P95, P99   time.Duration
	P99Min, P99Max   time.Duration
	Attainment       float64
	Goodput, HitRate float64
	Failed           int
	// P99VsRR is this P99 over round-robin's on the same fleet (medians).
	P99VsRR float64
	// Admission figures (medians): the share of scored requests rejected
	// with 429, the SLO attainment of those admitted, requests degraded.
	RejectedShare, AdmittedAttainment float64
	Degraded                          int
	// Backend-side medians (Result's): Backend is false unless every
	// seed's run has them (stand-in fleets).
	Backend                                            bool
	BackendMean, BackendP95, BackendP99, BackendQueued time.Duration
	BackendAttainment                                  float64
	// PooledP99 is the P99 of every seed's served scored requests
	// together (0 when the results do not carry their requests).
	PooledP99 time.Duration
}

// Summarize groups results by fleet and policy, in the order first seen.
func Summarize(rs []Result) []Summary {
	type key struct{ f, p string }
	var order []key
	groups := map[key][]Result{}
	for _, r := range rs {
		k := key{r.Fleet, r.Policy}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []Summary
	for _, k := range order {
		g := groups[k]
		med := func(f func(Result) float64) float64 {
			xs := make([]float64, len(g))
			for i, r := range g {
				xs[i] = f(r)
			}
			slices.Sort(xs)
			n := len(xs)
			if n%2 == 1 {
				return xs[n/2]
			}
			return (xs[n/2-1] + xs[n/2]) / 2
		}
		d := func(f func(Result) time.Duration) time.Duration {
			return time.Duration(med(func(r Result) float64 { return float64(f(r)) }))
		}
		s := Summary{Fleet: k.f, Policy: k.p, Seeds: len(g),
			Mean: d(func(r Result) time.Duration { return r.Mean }), P95: d(func(r Result) time.Duration { return r.P95 }),
			P99:        d(func(r Result) time.Duration { return r.P99 }),
			Attainment: med(func(r Result) float64 { return r.Attainment }), Goodput: med(func(r Result) float64 { return r.Goodput }),
			HitRate: med(func(r Result) float64 { return r.HitRate }), P99VsRR: math.NaN(),
			RejectedShare:      med(func(r Result) float64 { return float64(r.Rejected) / float64(max(r.N, 1)) }),
			AdmittedAttainment: med(func(r Result) float64 { return r.AdmittedAttainment }),
			Degraded:           int(med(func(r Result) float64 { return float64(r.Degraded) })),
		}
		s.Backend = true
		for _, r := range g {
			s.Backend = s.Backend && r.BackendN > 0
		}
		if s.Backend {
			s.BackendMean, s.BackendP95 = d(func(r Result) time.Duration { return r.BackendMean }), d(func(r Result) time.Duration { return r.BackendP95 })
			s.BackendP99, s.BackendQueued = d(func(r Result) time.Duration { return r.BackendP99 }), d(func(r Result) time.Duration { return r.BackendQueued })
			s.BackendAttainment = med(func(r Result) float64 { return r.BackendAttainment })
		}
		if seeds := ttftsMs(g); len(seeds) > 0 {
			s.PooledP99 = msDur(PooledQuantile(seeds, 0.99))
		}
		s.P99Min, s.P99Max = g[0].P99, g[0].P99
		for _, r := range g {
			s.P99Min, s.P99Max = min(s.P99Min, r.P99), max(s.P99Max, r.P99)
			s.Failed += r.Failed
		}
		out = append(out, s)
	}
	for i := range out {
		for _, o := range out {
			if o.Fleet == out[i].Fleet && o.Policy == sched.RoundRobin && o.P99 > 0 {
				out[i].P99VsRR = float64(out[i].P99) / float64(o.P99)
			}
		}
	}
	return out
}

// Verdict is the check of the targets on one fleet.
type Verdict struct {
	Fleet string
	// Best is the better single-signal policy (prefix-affinity or
	// least-outstanding) by median P99.
	Best                 string
	Default, BestP99, RR time.Duration
	// VsBest is the default's P99 over Best's (target ≤ 1.1); VsRR over
	// round-robin's (target ≤ 1/3 where caching matters).
	VsBest, VsRR float64
	CacheMatters bool
	OK           bool
}

// Check judges policy (the default) on each fleet against the targets.
// Fleets without the needed policies are skipped.
func Check(sums []Summary, fleets []Fleet, policy string) []Verdict {
	get := func(f, p string) (Summary, bool) {
		for _, s := range sums {
			if s.Fleet == f && s.Policy == p {
				return s, true
			}
		}
		return Summary{}, false
	}
	var out []Verdict
	for _, f := range fleets {
		d, ok := get(f.Name, policy)
		if !ok {
			continue
		}
		v := Verdict{Fleet: f.Name, Default: d.P99, CacheMatters: f.CacheMatters, VsRR: math.NaN(), VsBest: math.NaN()}
		for _, p := range []string{sched.PrefixAffinity, sched.LeastOutstanding} {
			if s, ok := get(f.Name, p); ok && (v.Best == "" || s.P99 < v.BestP99) {
				v.Best, v.BestP99 = p, s.P99
			}
		}
		v.OK = true
		if v.Best != "" {
			v.VsBest = float64(d.P99) / float64(v.BestP99)
			v.OK = v.VsBest <= 1.1
		}
		rr, haveRR := get(f.Name, sched.RoundRobin)
		if haveRR {
			v.RR = rr.P99
			v.VsRR = float64(d.P99) / float64(rr.P99)
			if f.CacheMatters && v.VsRR > 1.0/3 {
				v.OK = false
			}
		}
		if v.Best == "" && !haveRR {
			continue // the default alone: nothing to judge it against
		}
		out = append(out, v)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Format writes the summaries as a Markdown table, one row per (fleet,
// policy): medians across seeds and P99's range as the client measured
// them, then the backend-side medians where the stand-ins recorded them
// ("–" elsewhere), then the P99 of all seeds' requests pooled (last, so
// that the columns before keep their places).
func Format(w io.Writer, sums []Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t policy\t seeds\t mean ms\t P95 ms\t P99 ms\t P99 range ms\t P99 / RR\t SLO attain\t goodput req/s\t cache hit\t failed\t backend mean / P95 / P99 ms\t backend attain\t pooled P99 ms\t\n")
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 15))
	for _, s := range sums {
		hit := "–"
		if !math.IsNaN(s.HitRate) {
			hit = fmt.Sprintf("%.0f%%", 100*s.HitRate)
		}
		be, ba := "–", "–"
		if s.Backend {
			be = fmt.Sprintf("%.1f / %.1f / %.1f", ms(s.BackendMean), ms(s.BackendP95), ms(s.BackendP99))
			ba = fmt.Sprintf("%.1f%%", 100*s.BackendAttainment)
		}
		pooled := "–"
		if s.PooledP99 > 0 {
			pooled = fmtMs(s.PooledP99)
		}
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %.1f\t %.1f\t %.1f\t %.1f–%.1f\t %.2f\t %.1f%%\t %.1f\t %s\t %d\t %s\t %s\t %s\t\n",
			s.Fleet, s.Policy, s.Seeds, ms(s.Mean), ms(s.P95), ms(s.P99), ms(s.P99Min), ms(s.P99Max), s.P99VsRR,
			100*s.Attainment, s.Goodput, hit, s.Failed, be, ba, pooled)
	}
	tw.Flush()
}

// FormatVerdicts writes Check's verdicts as a Markdown table.
func FormatVerdicts(w io.Writer, vs []Verdict, policy string) {
	if len(vs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t %s P99 ms\t best single-signal\t its P99 ms\t ratio (≤ 1.10)\t round-robin P99 ms\t ratio (≤ 0.33)\t met (medians)\t\n", policy)
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 8))
	for _, v := range vs {
		ok := "yes"
		if !v.OK {
			ok = "**no**"
		}
		fmt.Fprintf(tw, "| %s\t %.1f\t %s\t %.1f\t %.2f\t %.1f\t %.2f\t %s\t\n", v.Fleet, ms(v.Default), v.Best, ms(v.BestP99), v.VsBest, ms(v.RR), v.VsRR, ok)
	}
	tw.Flush()
}

// AdmissionPolicies are the runs of the admission comparison: round-robin
// and the default best-effort (everything admitted), each with admission
// reject, and the default degrading to the lighter model.
func AdmissionPolicies() []string {
	return []string{sched.RoundRobin, sched.SLOPredictive,
		sched.RoundRobin + "+reject", sched.SLOPredictive + "+reject", sched.SLOPredictive + "+degrade"}
}

// FormatAdmission writes the admission comparison as a Markdown table:
// medians across seeds of the share rejected (429), the requests degraded
// (whole run), SLO attainment of the admitted requests and of all,
// goodput and the served requests' P99.
func FormatAdmission(w io.Writer, sums []Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t policy+admission\t seeds\t rejected\t degraded\t attain (admitted)\t attain (all)\t goodput req/s\t P99 ms (served)\t\n")
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 9))
	for _, s := range sums {
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %.1f%%\t %d\t %.1f%%\t %.1f%%\t %.1f\t %.1f\t\n",
			s.Fleet, s.Policy, s.Seeds, 100*s.RejectedShare, s.Degraded, 100*s.AdmittedAttainment, 100*s.Attainment, s.Goodput, ms(s.P99))
	}
	tw.Flush()
}

// PredictorColumns are the models FormatMAPE compares, in its order: the
// default's regression (no residual correction), with the sliding residual
// correction, the queue-rate model, the trees, and whichever the
// switching predictor had in charge.
var PredictorColumns = []string{sched.JointPlainLinear, sched.PredictorLinear, sched.PredictorQueue, sched.PredictorGBT, sched.JointActive}

// FormatMAPE writes, per fleet, each model's MAPE on the same requests
// (the switching runs' side-by-side figures), the median across seeds.
func FormatMAPE(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t seeds\t requests\t")
	for _, c := range PredictorColumns {
		fmt.Fprintf(tw, " %s\t", c)
	}
	fmt.Fprintf(tw, " in charge at the end\t\n|%s\n", strings.Repeat("---\t", 4+len(PredictorColumns)))
	var order []string
	by := map[string][]Result{}
	for _, r := range rs {
		if r.MAPEN == 0 {
			continue
		}
		if _, ok := by[r.Fleet]; !ok {
			order = append(order, r.Fleet)
		}
		by[r.Fleet] = append(by[r.Fleet], r)
	}
	for _, f := range order {
		g := by[f]
		n := 0
		active := map[string]int{}
		for _, r := range g {
			n += r.MAPEN
			for k, v := range r.Active {
				active[k] += v
			}
		}
		fmt.Fprintf(tw, "| %s\t %d\t %d\t", f, len(g), n)
		for _, c := range PredictorColumns {
			xs := make([]float64, 0, len(g))
			for _, r := range g {
				xs = append(xs, r.MAPE[c])
			}
			slices.Sort(xs)
			fmt.Fprintf(tw, " %.1f%%\t", 100*xs[len(xs)/2])
		}
		var keys []string
		for k := range active {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, active[k]))
		}
		fmt.Fprintf(tw, " %s\t\n", strings.Join(parts, ", "))
	}
	tw.Flush()
}

// LateThreshold is how much later than its own latency model a stand-in
// may write a first token before the request counts as one the host
// stalled (Result.HostLate). Timer and scheduling slack on an idle 2-core
// machine: P99 2.5 ms, one request of 25,600 over 10 ms (13.7 ms; 4
// fleets × 2 policies × 8 seeds, 2026-12-03); the stalls seen hold
// requests 50–70 ms.
const LateThreshold = 10 * time.Millisecond

// FormatHostLate lists the runs in which stand-ins served scored
// requests more than LateThreshold late against their own latency model,
// and writes nothing when none did: a stall of the machine running the
// suite lands on whatever policy is running then, so such a run's tail
// is partly the host's. Rerunning the suite (or those runs, with
// --resume after removing their files) tells the two apart.
func FormatHostLate(w io.Writer, rs []Result) {
	n := 0
	for _, r := range rs {
		if r.HostLate == 0 {
			continue
		}
		if n == 0 {
			fmt.Fprintf(w, "Runs with requests the host served late (more than %v after the stand-in's own latency model; the machine stalled, not the policy):\n", LateThreshold)
		}
		n++
		fmt.Fprintf(w, "- %s, %s, seed %d: %d of %d scored requests\n", r.Fleet, r.Policy, r.Seed, r.HostLate, r.N)
	}
}

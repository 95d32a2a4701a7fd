package liveeval

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/wire"
)

// Result is one (fleet, policy, seed) run's scored requests.
type Result struct {
	Fleet, Policy string
	Seed          uint64
	N, Failed     int
	Mean, P50     time.Duration
	P95, P99      time.Duration
	// Attainment is the share of scored requests whose TTFT met the SLO
	// (a failed request did not); Goodput those per second of the scored
	// phase.
	Attainment float64
	Goodput    float64
	// HitRate is the share of prompt characters the stand-ins served
	// from their caches over the whole run, or of prompt tokens real
	// engines took from theirs (Engines.HitRate; NaN for simulator
	// fleets).
	HitRate float64
	// Learned is each backend's cache capacity as the scheduler learnt
	// it at the end of the run, in its index blocks (0: the whole index).
	Learned []int
	// Reasons counts the gateway's decisions by reason (its
	// ttft_gateway_decisions_total), warm-up included.
	Reasons map[string]int
	Wall    time.Duration
	// Admission runs (a policy "name+reject" or "name+degrade"):
	// Rejected is how many scored requests the gateway answered 429
	// (counted in Failed too); Admitted the scored requests it did not
	// reject and AdmittedAttainment the share of those that met the SLO
	// (a failure other than a 429 counts as a miss). Degraded is how many
	// requests the lighter model's backends served, warm-up included.
	Rejected, Admitted int
	AdmittedAttainment float64
	Degraded           int
	// MAPE (switching predictor runs): each model's mean absolute
	// percentage error on the requests every model predicted, pooled
	// over the backends (sched.PredictorStats.JointMAPE), over MAPEN
	// requests, warm-up included; Active counts the backends by the model
	// in charge at the end.
	MAPE   map[string]float64
	MAPEN  int
	Active map[string]int
	// Backend-side figures (stand-in fleets; BackendN is 0 elsewhere):
	// the scored requests' TTFT as the stand-ins measured it, from
	// arrival to the first token written — queueing for a slot, prefill
	// of what was not cached, overhead. That is what routing decides;
	// the client-side figures above add the path in front (the gateway's
	// proxy, or the picker's Envoy stand-in and its ext_proc exchanges)
	// and the client's own timing. BackendN is how many scored requests a
	// stand-in recorded (matched by X-Request-Id); BackendAttainment the
	// share of all N scored requests whose backend-side TTFT met the SLO
	// (one no stand-in recorded did not); BackendQueued the mean wait for
	// a slot.
	BackendN                            int
	BackendMean, BackendP95, BackendP99 time.Duration
	BackendQueued                       time.Duration
	BackendAttainment                   float64
	// HostLate counts the scored requests a stand-in served more than
	// LateThreshold after its own latency model's time (Scored.
	// BackendLate): the machine running the suite stalled under them. A
	// run with some has a tail that is partly the host's, whatever the
	// policy; the tables name such runs (FormatHostLate).
	HostLate int
	// Requests are the scored requests one by one, in the order they
	// finished (bench's records): what the figures above summarise,
	// kept so that a report can pool seeds (and be recomputed from
	// disk). The run file stores them in a format of its own (store.go),
	// not by this tag.
	Requests []Scored `json:"-"`
}

// Scored is one scored request of a run.
type Scored struct {
	// ID is the request's X-Request-Id ("le-INDEX").
	ID string
	// TTFT is the client-side TTFT as judged (bench's JudgedTTFTMs); 0
	// when the request failed.
	TTFT time.Duration
	// Status is the HTTP status the client got (0: no response).
	Status int
	// BackendTTFT is the stand-in's own measure of the request (0: no
	// stand-in recorded it; real engines and the simulator record none).
	BackendTTFT time.Duration
	// Where a stand-in served it: its name, the wait for one of its
	// slots, and how many of the prompt's characters its cache held —
	// what a tail is made of (a queue, or a miss, and where).
	Backend               string
	BackendQueued         time.Duration
	PromptChars, HitChars int
	// BackendLate is how much later than its latency model the stand-in
	// wrote the first token (standin.Served.Late).
	BackendLate time.Duration
	// Group is the request's prompt group (its shared prefix).
	Group string
}

// SplitPolicy splits a run's policy "name[+admission][+predictor]"
// (admission reject or degrade, predictor switching) into the
// scheduler's policy, the route's admission (best-effort when not given)
// and the predictor mode (the default when not given). An unknown suffix
// comes back as the admission, for the caller to refuse.
func SplitPolicy(p string) (policy, admission, predictor string) {
	parts := strings.Split(p, "+")
	policy, admission, predictor = parts[0], gateway.AdmitBestEffort, sched.PredictorDefault
	for _, x := range parts[1:] {
		if slices.Contains(sched.PredictorModes(), x) {
			predictor = x
		} else {
			admission = x
		}
	}
	return policy, admission, predictor
}

// RunOne starts fleet's backends and a gateway running policy in front of
// them, sends the workload through it with bench's runner and scores the
// requests after the warm-up.
func RunOne(ctx context.Context, fleet Fleet, policy string, seed uint64) (Result, error) {
	t0 := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var urls []string
	var standins []*standin.Server
	var lite []*standin.Server
	if len(fleet.Lite) > 0 {
		ss, err := standin.StartFleet(ctx, fleet.Lite)
		if err != nil {
			return Result{}, err
		}
		defer func() {
			for _, s := range ss {
				_ = s.Close()
			}
		}()
		lite = ss
	}
	if fleet.Engines != nil {
		// Real engines outlive the run: clear what the last run left.
		us, err := fleet.Engines.Reset(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("fleet %s: %w", fleet.Name, err)
		}
		fleet.URLs = us
	}
	switch {
	case len(fleet.StandIns) > 0:
		ss, err := standin.StartFleet(ctx, fleet.StandIns)
		if err != nil {
			return Result{}, err
		}
		defer func() {
			for _, s := range ss {
				_ = s.Close()
			}
		}()
		standins = ss
		for _, s := range ss {
			urls = append(urls, s.URL())
		}
	case len(fleet.Sim) > 0:
		cfgs := slices.Clone(fleet.Sim)
		for i := range cfgs {
			cfgs[i].Seed = int64(seed)*16 + int64(i) + 1
		}
		ss, err := serve.StartFleet(ctx, cfgs)
		if err != nil {
			return Result{}, fmt.Errorf("fleet %s: %w", fleet.Name, err)
		}
		defer func() {
			for _, s := range ss {
				_ = s.Close()
			}
		}()
		for _, s := range ss {
			urls = append(urls, s.URL())
		}
	case len(fleet.URLs) > 0:
		urls = fleet.URLs
	default:
		return Result{}, fmt.Errorf("fleet %s has no backends", fleet.Name)
	}
	var liteURLs []string
	for _, s := range lite {
		liteURLs = append(liteURLs, s.URL())
	}
	sc, gwURL, stop, err := startFront(ctx, fleet, policy, seed, urls, liteURLs)
	if err != nil {
		return Result{}, fmt.Errorf("fleet %s, policy %s: %w", fleet.Name, policy, err)
	}
	defer stop()
	w := fleet.Workload
	opt := bench.Options{
		API: wire.OpenAIChat, BaseURL: gwURL, Request: wire.RequestOptions{Model: fleet.Model()},
		Requests: w.Requests, Warmup: w.Warmup, Seed: int64(seed),
		// Each request carries X-Request-Id "le-INDEX", which the gateway
		// and the data plane forward, so that the stand-ins' records of
		// the scored requests can be told from the warm-up's.
		RunID:   "le",
		Timeout: time.Minute, TTFTTimeout: 30 * time.Second,
	}
	if w.Rate > 0 {
		opt.Rate, opt.Arrival, opt.Burstiness, opt.MaxConcurrency = w.Rate, w.Arrival, w.Burstiness, w.Concurrency
		// bench warms up in a closed loop of Concurrency workers.
		opt.Concurrency = min(w.Concurrency, 12)
	} else {
		opt.Concurrency = w.Concurrency
	}
	r, err := bench.New(opt)
	if err != nil {
		return Result{}, err
	}
	res, err := r.Run(ctx, newSource(w, seed))
	if err != nil {
		return Result{}, fmt.Errorf("fleet %s, policy %s: %w", fleet.Name, policy, err)
	}
	out := score(res, fleet.SLO)
	for _, s := range lite {
		out.Degraded += int(s.Stats().Requests)
	}
	if _, viaEPP := SplitEPP(policy); !viaEPP {
		out.Reasons = reasons(ctx, gwURL)
	}
	for _, b := range sc.Backends() {
		out.Learned = append(out.Learned, b.CacheCapacity())
		st := b.PredictorStats()
		if st.JointN == 0 {
			continue
		}
		if out.MAPE == nil {
			out.MAPE, out.Active = map[string]float64{}, map[string]int{}
		}
		for k, v := range st.JointMAPE {
			out.MAPE[k] += v * float64(st.JointN)
		}
		out.MAPEN += st.JointN
		out.Active[st.Active]++
	}
	for k := range out.MAPE {
		out.MAPE[k] /= float64(out.MAPEN)
	}
	out.Fleet, out.Policy, out.Seed = fleet.Name, policy, seed
	out.HitRate = nan()
	if len(standins) > 0 {
		var q, h int64
		for _, s := range standins {
			st := s.Stats()
			q, h = q+st.QueriedChars, h+st.HitChars
		}
		out.HitRate = float64(h) / float64(max(q, 1))
	}
	if fleet.Engines != nil {
		out.HitRate = fleet.Engines.HitRate()
	}
	if len(standins) > 0 {
		var served []standin.Served
		for _, s := range append(slices.Clone(standins), lite...) {
			served = append(served, s.Served()...)
		}
		scoreBackend(&out, res, served, fleet.SLO)
	}
	out.Wall = time.Since(t0)
	if out.N == 0 {
		return out, errors.New("no scored request")
	}
	return out, nil
}

// startGateway serves a gateway for the fleet on a loopback port: policy,
// one backend per URL (named b0, b1, …; the gateway is told nothing of
// their speed or cache), their /metrics scraped with the health checks,
// and the fleet's SLO as the model's route.
func startGateway(ctx context.Context, fleet Fleet, policy string, seed uint64, urls, liteURLs []string) (*gateway.Gateway, string, func(), error) {
	off := false
	pol, admission, predictor := SplitPolicy(policy)
	route := gateway.Route{Model: fleet.Model(), SLOMs: int(fleet.SLO.Milliseconds()), Admission: admission}
	if admission == gateway.AdmitDegrade {
		if len(liteURLs) == 0 {
			return nil, "", nil, fmt.Errorf("admission degrade: fleet %s has no lighter model", fleet.Name)
		}
		route.DegradeTo = LiteModel
	}
	health := "/health"
	if len(fleet.URLs) > 0 {
		health = fleet.HealthPath
	}
	cfg := gateway.Config{
		Listen: "127.0.0.1:0", Policy: pol, AccessLog: &off, Predictor: predictor,
		Health: gateway.Health{Interval: gateway.Duration(time.Second), Path: health},
		Routes: []gateway.Route{route},
	}
	// Backends are told their model only beside a lighter model's.
	var models []string
	if len(liteURLs) > 0 {
		models = []string{fleet.Model()}
	}
	for i, u := range urls {
		bc := gateway.BackendConfig{Name: fmt.Sprintf("b%d", i), URL: u, API: "openai", Models: models}
		if len(fleet.URLs) == 0 {
			bc.MetricsURL = u + "/metrics"
		}
		cfg.Backends = append(cfg.Backends, bc)
	}
	for i, u := range liteURLs {
		// The lighter model's backends serve only it, so they take
		// degraded requests and nothing else.
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{
			Name: fmt.Sprintf("lite%d", i), URL: u, API: "openai", MetricsURL: u + "/metrics",
			Models: []string{LiteModel},
		})
	}
	if len(liteURLs) > 0 {
		cfg.Routes = append(cfg.Routes, gateway.Route{Model: LiteModel, SLOMs: route.SLOMs})
	}
	g, err := gateway.New(cfg, gateway.Options{Seed: seed})
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.Close()
		return nil, "", nil, fmt.Errorf("gateway: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(sctx, ln)
	}()
	stop := func() {
		cancel()
		<-done
		g.Close()
	}
	return g, "http://" + ln.Addr().String(), stop, nil
}

func nan() float64 { var z float64; return z / z }

// score computes a Result's figures from a run's scored records.
func score(res bench.Result, slo time.Duration) Result {
	var out Result
	var xs []float64
	met := 0
	var first, last time.Time
	for i := range res.Records {
		rec := &res.Records[i]
		if rec.Warmup {
			continue
		}
		out.N++
		st := rec.Intended
		if st.IsZero() {
			st = rec.Sent
		}
		if first.IsZero() || st.Before(first) {
			first = st
		}
		if rec.End.After(last) {
			last = rec.End
		}
		if !rec.OK() || rec.FirstToken.IsZero() {
			out.Failed++
			if rec.Status == http.StatusTooManyRequests {
				out.Rejected++
			}
			out.Requests = append(out.Requests, Scored{ID: rec.ID, Status: rec.Status})
			continue
		}
		ms := rec.JudgedTTFTMs()
		xs = append(xs, ms/1000)
		out.Requests = append(out.Requests, Scored{ID: rec.ID, Status: rec.Status, TTFT: time.Duration(ms * float64(time.Millisecond))})
		if time.Duration(ms*float64(time.Millisecond)) <= slo {
			met++
		}
	}
	out.Admitted = out.N - out.Rejected
	if out.Admitted > 0 {
		out.AdmittedAttainment = float64(met) / float64(out.Admitted)
	}
	if len(xs) == 0 {
		return out
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	out.Mean = sec(sum / float64(len(xs)))
	out.P50, out.P95, out.P99 = sec(stats.Quantile(xs, 0.5)), sec(stats.Quantile(xs, 0.95)), sec(stats.Quantile(xs, 0.99))
	out.Attainment = float64(met) / float64(out.N)
	if d := last.Sub(first).Seconds(); d > 0 {
		out.Goodput = float64(met) / d
	}
	return out
}

// scoreBackend sets r's backend-side figures from the stand-ins' records
// of res's scored requests.
func scoreBackend(r *Result, res bench.Result, served []standin.Served, slo time.Duration) {
	by := make(map[string]standin.Served, len(served))
	for _, s := range served {
		if s.ID == "" {
			continue
		}
		// A request served twice (a retry after its first token) is
		// judged by the answer whose first token came first, the one the
		// client read.
		if o, dup := by[s.ID]; !dup || s.Arrived.Add(s.TTFT).Before(o.Arrived.Add(o.TTFT)) {
			by[s.ID] = s
		}
	}
	at := make(map[string]int, len(r.Requests))
	for j, q := range r.Requests {
		at[q.ID] = j
	}
	var xs []float64
	var queued time.Duration
	met := 0
	for i := range res.Records {
		rec := &res.Records[i]
		if rec.Warmup || rec.ID == "" {
			continue
		}
		s, ok := by[rec.ID]
		if !ok {
			continue
		}
		if j, ok := at[rec.ID]; ok {
			q := &r.Requests[j]
			q.BackendTTFT, q.Backend, q.BackendQueued = s.TTFT, s.Backend, s.Queued
			q.PromptChars, q.HitChars, q.Group = s.PromptChars, s.HitChars, rec.Group
			q.BackendLate = s.Late
			if s.Late > LateThreshold {
				r.HostLate++
			}
		}
		xs = append(xs, s.TTFT.Seconds())
		queued += s.Queued
		if s.TTFT <= slo {
			met++
		}
	}
	r.BackendN = len(xs)
	if len(xs) == 0 {
		return
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	r.BackendMean, r.BackendP95, r.BackendP99 = sec(sum/float64(len(xs))), sec(stats.Quantile(xs, 0.95)), sec(stats.Quantile(xs, 0.99))
	r.BackendQueued = queued / time.Duration(len(xs))
	if r.N > 0 {
		r.BackendAttainment = float64(met) / float64(r.N)
	}
}

// reasons reads the gateway's decision counts by reason from its /metrics.
func reasons(ctx context.Context, gwURL string) map[string]int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gwURL+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ttft_gateway_decisions_total{") {
			continue
		}
		i := strings.Index(line, `reason="`)
		sp := strings.LastIndexByte(line, ' ')
		if i < 0 || sp < 0 {
			continue
		}
		r := line[i+8:]
		r = r[:strings.IndexByte(r, '"')]
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err == nil {
			out[r] += int(v)
		}
	}
	return out
}

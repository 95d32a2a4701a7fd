package liveeval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/wire"
)

// TestEPPAgainstGateway is issue 19's comparison, short, for CI: the
// Endpoint Picker behind the Envoy stand-in (package dataplane) and the
// gateway, both running the default policy, on the two fleet (two
// stand-ins, one 2× faster, caches smaller than the working set), same
// seeds and request sequences, with the gateway's round-robin for
// reference.
//
// The 5% target (mean, P99 and SLO attainment within 5% of the gateway's)
// is logged with the figures, not asserted: on a shared 2-core machine the
// P99 of 250 requests moves by more than that between two runs of the
// same gateway, and the picker's path (the data plane's extra HTTP hop and
// the ext_proc messages, in the same process) costs it more under CPU
// contention (four 5-seed suites on a loaded machine: the client-side
// mean ratio on this fleet ranged 1.0–1.9; docs/routing-evaluation.md,
// "Endpoint Picker against the gateway", has the quiet-machine suites and
// the backend-side view). What is asserted holds with margin and fails
// when the picker routes badly or the data path stalls, medians over the
// seeds: the picker keeps prompts where they are cached (its cache hit
// rate within 10 points of the gateway's, and 15 points over
// round-robin's, which a picker routing without the prefix gets: about
// 54% against 74–83%), its mean TTFT is within 2.5× the gateway's, and no
// request fails.
func TestEPPAgainstGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs take seconds")
	}
	var fleet Fleet
	for _, f := range Fleets() {
		if f.Name == "two" {
			fleet = f
		}
	}
	if fleet.Name == "" {
		t.Fatalf("suite lacks fleet two: %v", FleetNames())
	}
	fleet.Workload.Requests = 250
	viaEPP := EPPPrefix + sched.SLOPredictive
	pols := []string{sched.SLOPredictive, viaEPP, sched.RoundRobin}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := Run(ctx, Options{Fleets: []Fleet{fleet}, Policies: pols, Seeds: []uint64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.N != 250 || r.Failed > 0 || r.P50 > r.P95 || r.P95 > r.P99 || math.IsNaN(r.HitRate) {
			t.Errorf("inconsistent run %+v", r)
		}
	}
	sums := Summarize(rs)
	cs := CompareEPP(sums)
	var buf bytes.Buffer
	Format(&buf, sums)
	buf.WriteString("\n")
	FormatEPP(&buf, cs)
	t.Logf("\n%s", buf.String())
	if len(cs) != 1 {
		t.Fatalf("%d comparisons, want 1", len(cs))
	}
	c := cs[0]
	t.Logf("issue 19's target (mean, P99, attainment within 5%% of the gateway's) met: %v (mean ×%.2f, P99 ×%.2f, attainment ×%.3f, cache hit %+.1f points)",
		c.Within, c.MeanRatio, c.P99Ratio, c.AttainRatio, 100*c.HitDiff)
	t.Logf("backend-side (the stand-ins' own TTFT, routing without the path): met: %v (mean ×%.2f, P99 ×%.2f, attainment ×%.3f)",
		c.BackendWithin, c.BackendMeanRatio, c.BackendP99Ratio, c.BackendAttainRatio)
	var rr Summary
	for _, s := range sums {
		if s.Policy == sched.RoundRobin {
			rr = s
		}
	}
	if c.HitDiff < -0.10 {
		t.Errorf("picker's cache hit rate %.0f%%, the gateway's %.0f%%: prompts are not kept where they are cached", 100*c.EPP.HitRate, 100*c.Gateway.HitRate)
	}
	if c.EPP.HitRate < rr.HitRate+0.15 {
		t.Errorf("picker's cache hit rate %.0f%%, round-robin's %.0f%%: the picker does not route by prefix", 100*c.EPP.HitRate, 100*rr.HitRate)
	}
	if c.MeanRatio > 2.5 {
		t.Errorf("picker's mean TTFT %v is over 2.5× the gateway's %v", c.EPP.Mean, c.Gateway.Mean)
	}
}

func TestCheckEPPPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		ok     bool
	}{
		{sched.SLOPredictive, true},
		{EPPPrefix + sched.SLOPredictive, true},
		{EPPPrefix + sched.RoundRobin, true},
		{sched.SLOPredictive + "+reject", true}, // the gateway's to judge
		{EPPPrefix + sched.SLOPredictive + "+reject", false},
		{EPPPrefix + sched.SLOPredictive + "+" + sched.PredictorSwitching, false},
	} {
		if err := CheckEPPPolicy(c.policy); (err == nil) != c.ok {
			t.Errorf("%q: error %v, want ok %v", c.policy, err, c.ok)
		}
	}
}

func TestEndpointAddr(t *testing.T) {
	for _, c := range []struct {
		url, want string
		ok        bool
	}{
		{"http://127.0.0.1:8000", "127.0.0.1:8000", true},
		{"http://[::1]:9000", "[::1]:9000", true},
		{"http://localhost:8000/", "", true}, // resolved: any loopback address
		{"https://127.0.0.1:8000", "", false},
		{"http://127.0.0.1", "", false},
		{"::nope", "", false},
	} {
		got, err := endpointAddr(context.Background(), c.url)
		if (err == nil) != c.ok || (c.want != "" && got != c.want) {
			t.Errorf("%q: %q, %v; want %q (ok %v)", c.url, got, err, c.want, c.ok)
		}
	}
}

func TestCompareEPP(t *testing.T) {
	ms := time.Millisecond
	sums := []Summary{
		{Fleet: "f", Policy: sched.SLOPredictive, Mean: 10 * ms, P99: 40 * ms, Attainment: 0.90, HitRate: 0.80},
		{Fleet: "f", Policy: EPPPrefix + sched.SLOPredictive, Mean: 10400 * time.Microsecond, P99: 41 * ms, Attainment: 0.87, HitRate: 0.78},
		{Fleet: "g", Policy: sched.SLOPredictive, Mean: 10 * ms, P99: 40 * ms, Attainment: 0.90, HitRate: 0.80},
		{Fleet: "g", Policy: EPPPrefix + sched.SLOPredictive, Mean: 11 * ms, P99: 39 * ms, Attainment: 0.95, HitRate: 0.80},
		{Fleet: "h", Policy: EPPPrefix + sched.RoundRobin}, // no gateway run to compare with
	}
	cs := CompareEPP(sums)
	if len(cs) != 2 {
		t.Fatalf("%d comparisons, want 2: %+v", len(cs), cs)
	}
	if c := cs[0]; !c.Within || math.Abs(c.MeanRatio-1.04) > 1e-9 || math.Abs(c.HitDiff+0.02) > 1e-9 {
		t.Errorf("f: %+v; want within 5%% (mean ×1.04, attainment ×0.967)", c)
	}
	if c := cs[1]; c.Within || math.Abs(c.MeanRatio-1.1) > 1e-9 {
		t.Errorf("g: %+v; want a mean ×1.10 outside 5%%", c)
	}
	var buf bytes.Buffer
	FormatEPP(&buf, cs)
	if !bytes.Contains(buf.Bytes(), []byte("**no**")) || !bytes.Contains(buf.Bytes(), []byte("| f ")) {
		t.Errorf("table:\n%s", buf.String())
	}
}

// TestEPPFeedsSchedulerAsGateway is the decision-equivalence check behind
// issue 19's comparison: the same request and response events, driven
// through the gateway's wiring (HTTP proxy) and the picker's (data plane,
// ext_proc, picker), each over real loopback sockets to backends of its
// own, must leave the two schedulers in the same state after every event
// and make the same picks. It runs each front as the live evaluation
// does (startFront), on scripted backends that answer only when told:
// a request arrives (the pick), its first token is sent (the request
// leaves the backend's prefill queue), its stream ends (it leaves the
// backend). After each event, both fronts must have done their
// bookkeeping (polled for, with a deadline), and then for every backend
// the requests in flight, the uncached prompt tokens awaiting a first
// token (which also check the prompt's length and the prefix matched at
// the pick) and how much of each prompt group the prefix index holds
// must be equal.
//
// No timing enters: the policies here decide on the prefix index and
// the load (prefix-affinity, cache-aware, least-outstanding), which are
// what the fronts feed. slo-predictive runs the same filters and prefix
// scorer on the same state and adds what depends on timing or chance —
// predictors fitted to the TTFTs each front observes (TestEPPLearnt
// measures how those differ) and its picker's rotation start, drawn
// per process — so its picks are compared by the live suite instead.
func TestEPPFeedsSchedulerAsGateway(t *testing.T) {
	const nBackends, nGroups = 3, 4
	script := eventScript(40, nGroups, 6)
	for _, policy := range []string{sched.PrefixAffinity, sched.CacheAware, sched.LeastOutstanding} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			gw := startScripted(ctx, t, policy, nBackends)
			ep := startScripted(ctx, t, EPPPrefix+policy, nBackends)
			var blocks [][]uint64
			for g := range nGroups {
				blocks = append(blocks, promptBlocks(t, scriptBody(g, -1)))
			}
			picked, busy := map[int]bool{}, 0
			for k, ev := range script {
				a, b := gw.apply(ctx, t, ev), ep.apply(ctx, t, ev)
				if a != b {
					t.Fatalf("event %d (%s): the gateway picked backend %d, the picker %d", k, ev, a, b)
				}
				if sa, sb := gw.state(blocks), ep.state(blocks); sa != sb {
					t.Fatalf("event %d (%s): scheduler state differs:\n gateway %s\n picker  %s", k, ev, sa, sb)
				}
				if ev.kind == 's' {
					picked[a] = true
					if len(gw.open) > 2 {
						busy++
					}
				}
			}
			// The script exercised what it is for: picks over the
			// fleet, with requests queued and streaming beside them.
			if len(picked) < 2 || busy < 5 {
				t.Errorf("picks went to %d backends, %d of them with 2 or more requests in flight: the script exercises too little", len(picked), busy)
			}
		})
	}
}

// scriptEvent is one event of the script: request req is sent (kind
// 's', its prompt group group), gets its first token ('f') or ends ('e').
type scriptEvent struct {
	kind       byte
	req, group int
}

func (e scriptEvent) String() string {
	return fmt.Sprintf("%c r%d g%d", e.kind, e.req, e.group)
}

// eventScript is a fixed pseudo-random sequence of n sends and the first
// tokens and ends of the requests sent, at most maxOpen in flight, so
// that picks see requests queued and streaming on the backends.
func eventScript(n, groups, maxOpen int) []scriptEvent {
	rng := rand.New(rand.NewPCG(19, 19))
	var out []scriptEvent
	var queued, streaming []scriptEvent
	sent := 0
	take := func(s *[]scriptEvent) scriptEvent {
		i := rng.IntN(len(*s))
		e := (*s)[i]
		*s = append((*s)[:i], (*s)[i+1:]...)
		return e
	}
	for sent < n || len(queued)+len(streaming) > 0 {
		open := len(queued) + len(streaming)
		switch r := rng.IntN(3); {
		case sent < n && open < maxOpen && (r == 0 || open == 0):
			e := scriptEvent{kind: 's', req: sent, group: rng.IntN(groups)}
			sent++
			out = append(out, e)
			queued = append(queued, e)
		case len(queued) > 0 && (r == 1 || len(streaming) == 0):
			e := take(&queued)
			e.kind = 'f'
			out = append(out, e)
			streaming = append(streaming, e)
		case len(streaming) > 0:
			e := take(&streaming)
			e.kind = 'e'
			out = append(out, e)
		}
	}
	return out
}

// scriptBody is request req's body: its group's shared 2 KiB system
// prompt and a user message of its own (req < 0: the group's prompt
// alone).
func scriptBody(group, req int) []byte {
	rng := rand.New(rand.NewPCG(uint64(group), 7))
	msgs := []map[string]string{{"role": "system", "content": words(rng, 2048)}}
	if req >= 0 {
		msgs = append(msgs, map[string]string{"role": "user", "content": words(rand.New(rand.NewPCG(uint64(req), 8)), 300+req%5*100)})
	}
	b, _ := json.Marshal(map[string]any{"model": "scripted", "stream": true, "max_tokens": 4, "messages": msgs})
	return b
}

// promptBlocks are a body's prefix blocks as the fronts hash them.
func promptBlocks(t *testing.T, body []byte) []uint64 {
	r, err := llmreq.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	h := sched.NewBlockHasher(sched.DefaultBlockBytes)
	r.Hash(h)
	return slices.Clone(h.Hashes())
}

// scripted is one front (the gateway, or the picker behind the data
// plane) over backends of its own that answer when the script says.
type scripted struct {
	sc       *sched.Scheduler
	url      string
	arrivals chan scriptArrival
	open     map[int]*scriptOpen
}

type scriptArrival struct {
	id      string
	backend int
	cmd     chan byte
}

type scriptOpen struct {
	scriptArrival
	done chan error // the client's whole answer read
}

func startScripted(ctx context.Context, t *testing.T, policy string, n int) *scripted {
	s := &scripted{arrivals: make(chan scriptArrival, 16), open: map[int]*scriptOpen{}}
	var urls []string
	for i := range n {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			a := scriptArrival{id: r.Header.Get("X-Request-Id"), backend: i, cmd: make(chan byte)}
			select {
			case s.arrivals <- a:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fl := w.(http.Flusher)
			fl.Flush()
			for {
				select {
				case c := <-a.cmd:
					if c == 'e' {
						io.WriteString(w, "data: [DONE]\n\n")
						return
					}
					io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")
					fl.Flush()
				case <-r.Context().Done():
					return
				}
			}
		})
		mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[]}`)
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	fleet := Fleet{Name: "scripted", URLs: urls, ModelName: "scripted", HealthPath: "/health", SLO: time.Second}
	sc, u, stop, err := startFront(ctx, fleet, policy, 1, urls, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s.sc, s.url = sc, u
	return s
}

// apply runs one event and waits until the front has done its
// bookkeeping; for a send it returns the backend the request went to.
func (s *scripted) apply(ctx context.Context, t *testing.T, ev scriptEvent) int {
	t.Helper()
	switch ev.kind {
	case 's':
		id := fmt.Sprintf("r%d", ev.req)
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(scriptBody(ev.group, ev.req)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", id)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte("[DONE]"))) {
					err = fmt.Errorf("status %d, answer %q", resp.StatusCode, b)
				}
			}
			done <- err
		}()
		select {
		case a := <-s.arrivals:
			if a.id != id {
				t.Fatalf("request %q arrived, want %q", a.id, id)
			}
			s.open[ev.req] = &scriptOpen{scriptArrival: a, done: done}
			return a.backend
		case err := <-done:
			t.Fatalf("%s: answered before reaching a backend: %v", id, err)
		case <-ctx.Done():
			t.Fatalf("%s: no backend got it", id)
		}
	case 'f':
		o := s.open[ev.req]
		b := s.sc.Backends()[o.backend]
		before := b.QueuedTokens()
		o.cmd <- 'f'
		waitFor(ctx, t, fmt.Sprintf("r%d's first token counted", ev.req), func() bool { return b.QueuedTokens() < before })
	case 'e':
		o := s.open[ev.req]
		b := s.sc.Backends()[o.backend]
		before := b.InFlight()
		o.cmd <- 'e'
		if err := <-o.done; err != nil {
			t.Fatalf("r%d: %v", ev.req, err)
		}
		waitFor(ctx, t, fmt.Sprintf("r%d's end counted", ev.req), func() bool { return b.InFlight() < before })
		delete(s.open, ev.req)
	}
	return -1
}

// state is every backend's scheduling state: requests in flight,
// uncached tokens awaiting a first token, and the blocks of each group's
// prompt its prefix index holds.
func (s *scripted) state(groups [][]uint64) string {
	var sb strings.Builder
	for i, b := range s.sc.Backends() {
		fmt.Fprintf(&sb, "[%d: in flight %d, queued tokens %d, prefix", i, b.InFlight(), b.QueuedTokens())
		for _, g := range groups {
			fmt.Fprintf(&sb, " %d", b.Prefix().Match(g))
		}
		sb.WriteString("] ")
	}
	return sb.String()
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEPPReadsAsGateway: in the evaluation the picker reads its
// endpoints' metrics as often as the gateway's run reads its backends',
// and neither reads real engines' (fleet.URLs).
func TestEPPReadsAsGateway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	for _, fleet := range []Fleet{{Name: "stand-ins"}, {Name: "engines", URLs: []string{srv.URL}, HealthPath: "/health"}} {
		g, _, stop, err := startGateway(ctx, fleet, sched.SLOPredictive, 1, []string{srv.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := g.Config()
		stop()
		o := eppOptions(fleet, sched.SLOPredictive, 1)
		scraped := cfg.Backends[0].MetricsURL != ""
		switch {
		case scraped && o.ScrapeInterval != cfg.Health.Interval.Std():
			t.Errorf("%s: the picker reads metrics every %v, the gateway every %v", fleet.Name, o.ScrapeInterval, cfg.Health.Interval.Std())
		case !scraped && o.ScrapeInterval >= 0:
			t.Errorf("%s: the gateway does not scrape the backends, the picker does every %v", fleet.Name, o.ScrapeInterval)
		}
	}
}

// TestEPPLearnt measures what each front's scheduler learns on the same
// fleet, seeds and requests: the cache capacity of each backend
// (Backend.CacheCapacity) and the TTFTs. The picker learns TTFTs from
// its pick to the first token event passing it (histogram
// ttft_epp_time_to_first_token_seconds), the gateway from a request's
// arrival to its first token read (ttft_gateway_ttft_seconds); each is
// compared with the stand-ins' own TTFT of the same requests (arrival to
// first token flushed): means over every request of a run, warm-up
// included. The picker's includes the data plane's hop both ways
// (header mutation and body echo received before the request is sent
// on; the first token relayed over ext_proc). A measurement, logged;
// asserted only that each front's TTFT contains the backends' (it starts
// before and ends after). Run with TTFT_EPP_LEARNT=FLEET[,FLEET]
// (TTFT_EPP_SEEDS seeds, default 3; TTFT_EPP_SCRAPE: the picker's
// metrics interval, default the evaluation's).
func TestEPPLearnt(t *testing.T) {
	names := os.Getenv("TTFT_EPP_LEARNT")
	if names == "" {
		t.Skip("a measurement: set TTFT_EPP_LEARNT=FLEET[,FLEET]")
	}
	seeds := 3
	if v := os.Getenv("TTFT_EPP_SEEDS"); v != "" {
		var err error
		if seeds, err = strconv.Atoi(v); err != nil || seeds < 1 {
			t.Fatalf("TTFT_EPP_SEEDS=%q", v)
		}
	}
	var scrape time.Duration
	if v := os.Getenv("TTFT_EPP_SCRAPE"); v != "" {
		var err error
		if scrape, err = time.ParseDuration(v); err != nil || scrape <= 0 {
			t.Fatalf("TTFT_EPP_SCRAPE=%q", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, name := range strings.Split(names, ",") {
		var fleet Fleet
		for _, f := range Fleets() {
			if f.Name == name && len(f.StandIns) > 0 {
				fleet = f
			}
		}
		if fleet.Name == "" {
			t.Fatalf("no stand-in fleet %q", name)
		}
		caps := map[string]map[int]int{}
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			for _, policy := range []string{sched.SLOPredictive, EPPPrefix + sched.SLOPredictive} {
				l := learn(ctx, t, fleet, policy, seed, scrape)
				if l.front <= l.backend {
					t.Errorf("%s %s seed %d: the front learnt a mean TTFT of %v, the backends took %v", fleet.Name, policy, seed, l.front, l.backend)
				}
				if caps[policy] == nil {
					caps[policy] = map[int]int{}
				}
				for _, c := range l.caps {
					caps[policy][c]++
				}
				t.Logf("%s %-20s seed %d: learnt TTFT mean %6.2f ms, backends' %6.2f ms: +%.2f ms; cache capacities %v",
					fleet.Name, policy, seed, ms(l.front), ms(l.backend), ms(l.front-l.backend), l.caps)
			}
		}
		for _, policy := range []string{sched.SLOPredictive, EPPPrefix + sched.SLOPredictive} {
			t.Logf("%s %-20s: backends by learnt cache capacity (blocks: count) %v", fleet.Name, policy, caps[policy])
		}
	}
}

// learnt is what a front's scheduler learnt in one run.
type learnt struct {
	front, backend time.Duration // mean TTFTs: the scheduler's, the stand-ins'
	caps           []int         // each backend's learnt cache capacity
}

// learn runs policy on fleet once (the picker reading metrics every
// scrape, if not 0) and returns what the front's scheduler learnt.
func learn(ctx context.Context, t *testing.T, fleet Fleet, policy string, seed uint64, scrape time.Duration) learnt {
	t.Helper()
	ss, err := standin.StartFleet(ctx, fleet.StandIns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range ss {
			s.Close()
		}
	}()
	var urls []string
	for _, s := range ss {
		urls = append(urls, s.URL())
	}
	reg := prometheus.NewRegistry()
	var sc *sched.Scheduler
	var u string
	var stop func()
	if inner, viaEPP := SplitEPP(policy); viaEPP {
		opts := eppOptions(fleet, inner, seed)
		opts.Registerer = reg
		if scrape > 0 {
			opts.ScrapeInterval = scrape
		}
		sc, u, stop, err = startEPP(ctx, fleet, urls, opts)
	} else {
		var g *gateway.Gateway
		g, u, stop, err = startGateway(ctx, fleet, policy, seed, urls, nil)
		if err == nil {
			sc = g.Scheduler()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w := fleet.Workload
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: u, Request: wire.RequestOptions{Model: fleet.Model()},
		Requests: w.Requests, Warmup: w.Warmup, Seed: int64(seed), Concurrency: w.Concurrency, Timeout: time.Minute, TTFTTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, newSource(w, seed)); err != nil {
		t.Fatal(err)
	}
	// The TTFT histogram: the picker's in reg, the gateway's on its
	// /metrics.
	var sum float64
	var n uint64
	gather := prometheus.Gatherer(reg)
	metric := "ttft_epp_time_to_first_token_seconds"
	if _, viaEPP := SplitEPP(policy); !viaEPP {
		gather, metric = httpGatherer(ctx, t, u+"/metrics"), "ttft_gateway_ttft_seconds"
	}
	mfs, err := gather.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metric {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	var l learnt
	for _, b := range sc.Backends() {
		l.caps = append(l.caps, b.CacheCapacity())
	}
	stop()
	var bsum time.Duration
	var bn int
	for _, s := range ss {
		for _, sv := range s.Served() {
			bsum += sv.TTFT
			bn++
		}
	}
	if n == 0 || bn == 0 || int(n) != bn {
		t.Fatalf("%s: the front learnt %d TTFTs, the backends served %d requests", policy, n, bn)
	}
	l.front, l.backend = time.Duration(sum/float64(n)*float64(time.Second)), bsum/time.Duration(bn)
	return l
}

// httpGatherer reads a Prometheus text exposition once.
func httpGatherer(ctx context.Context, t *testing.T, url string) prometheus.Gatherer {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var out []*dto.MetricFamily
		for _, f := range fams {
			out = append(out, f)
		}
		return out, nil
	})
}

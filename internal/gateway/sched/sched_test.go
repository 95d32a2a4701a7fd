package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeClock is a manual clock for deterministic tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func backends(names ...string) []*Backend {
	var bs []*Backend
	for _, n := range names {
		bs = append(bs, NewBackend(BackendSpec{Name: n, APIs: []string{"openai"}, Models: []string{"m"}}))
	}
	return bs
}

func mustNew(t *testing.T, policy string, clk *fakeClock, bs []*Backend) *Scheduler {
	t.Helper()
	s, err := New(Options{Policy: policy, Now: clk.now, Seed: 7, Explore: -1}, bs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUnknownPolicy(t *testing.T) {
	_, err := New(Options{Policy: "fastest"}, nil)
	if err == nil || !strings.Contains(err.Error(), `"fastest"`) || !strings.Contains(err.Error(), SLOPredictive) {
		t.Fatalf("want an error naming the policy and the choices, got %v", err)
	}
}

func TestClassSLO(t *testing.T) {
	for _, tc := range []struct {
		class string
		want  time.Duration
		ok    bool
	}{{"code", 120 * time.Millisecond, true}, {"Chat", 320 * time.Millisecond, true}, {"summary", 650 * time.Millisecond, true}, {"batch", 0, false}} {
		got, ok := ClassSLO(tc.class)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ClassSLO(%q) = %v,%v want %v,%v", tc.class, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRoundRobinRotatesByWeight(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b", "c")
	bs[2].Spec.Weight = 2
	s := mustNew(t, RoundRobin, clk, bs)
	counts := map[string]int{}
	for range 400 {
		tk, err := s.Pick(&Request{Model: "m", API: "openai"})
		if err != nil {
			t.Fatal(err)
		}
		counts[tk.Backend.Name()]++
		tk.End(OutcomeOK)
	}
	if counts["a"] != 100 || counts["b"] != 100 || counts["c"] != 200 {
		t.Fatalf("weighted rotation: got %v, want a=100 b=100 c=200", counts)
	}
}

func TestFilters(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b", "c", "d")
	bs[0].SetHealthy(false)
	bs[1].Spec.MaxConcurrency = 1
	bs[2].Spec.Models = []string{"other"}
	bs[3].Spec.APIs = []string{"anthropic"}
	s := mustNew(t, LeastOutstanding, clk, bs)
	t1, err := s.Pick(&Request{Model: "m", API: "openai"})
	if err != nil || t1.Backend.Name() != "b" {
		t.Fatalf("want b (only eligible), got %v %v", t1, err)
	}
	if _, err := s.Pick(&Request{Model: "m", API: "openai"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("b at capacity: want ErrUnavailable, got %v", err)
	}
	if _, err := s.Pick(&Request{Model: "nope", API: "openai"}); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("unknown model: want ErrNoBackend, got %v", err)
	}
	tk, err := s.Pick(&Request{Model: "m", API: "anthropic"})
	if err != nil || tk.Backend.Name() != "d" {
		t.Fatalf("anthropic: want d, got %v %v", tk, err)
	}
	t1.End(OutcomeOK)
	if _, err := s.Pick(&Request{Model: "m", API: "openai", Exclude: []string{"b"}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("excluded b: want ErrUnavailable, got %v", err)
	}
}

// TestPickInvariants is a property test: over random sequences of picks,
// ends, health flips and exclusions, a pick never returns an excluded,
// unhealthy or full backend, and in-flight/queued counters return to zero.
func TestPickInvariants(t *testing.T) {
	for _, pol := range Policies() {
		t.Run(pol, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			clk := newClock()
			bs := backends("a", "b", "c", "d")
			for _, b := range bs {
				b.Spec.MaxConcurrency = 3
			}
			s := mustNew(t, pol, clk, bs)
			var open []*Ticket
			for step := range 3000 {
				clk.add(time.Duration(rng.IntN(5)) * time.Millisecond)
				switch rng.IntN(4) {
				case 0, 1:
					var excl []string
					if rng.IntN(3) == 0 {
						excl = []string{bs[rng.IntN(4)].Name()}
					}
					h := NewBlockHasher(16)
					h.Text(strings.Repeat("x", rng.IntN(200)) + string(rune('a'+rng.IntN(5))))
					req := &Request{Model: "m", API: "openai", PromptTokens: rng.IntN(500), Blocks: h.Hashes(), SLO: 50 * time.Millisecond, Exclude: excl}
					tk, err := s.Pick(req)
					if err != nil {
						if !errors.Is(err, ErrUnavailable) {
							t.Fatalf("step %d: %v", step, err)
						}
						continue
					}
					b := tk.Backend
					if slices.Contains(excl, b.Name()) || !b.Healthy() || b.InFlight() > 3 {
						t.Fatalf("step %d: picked %s (excluded %v healthy %v inflight %d)", step, b.Name(), excl, b.Healthy(), b.InFlight())
					}
					open = append(open, tk)
				case 2:
					if len(open) > 0 {
						k := rng.IntN(len(open))
						if rng.IntN(2) == 0 {
							open[k].FirstToken()
						}
						open[k].End(Outcome(rng.IntN(3)))
						open = slices.Delete(open, k, k+1)
					}
				case 3:
					bs[rng.IntN(4)].SetHealthy(rng.IntN(4) != 0)
				}
			}
			for _, tk := range open {
				tk.End(OutcomeOK)
			}
			for _, b := range bs {
				if b.InFlight() != 0 || b.QueuedTokens() != 0 {
					t.Fatalf("%s: in-flight %d queued %d after all ended", b.Name(), b.InFlight(), b.QueuedTokens())
				}
			}
		})
	}
}

func TestLeastOutstandingAndP2C(t *testing.T) {
	for _, pol := range []string{LeastOutstanding, PowerOfTwo} {
		clk := newClock()
		bs := backends("a", "b")
		s := mustNew(t, pol, clk, bs)
		// Load a with 5 requests by excluding b.
		for range 5 {
			if _, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}}); err != nil {
				t.Fatal(err)
			}
		}
		for range 4 {
			tk, _ := s.Pick(&Request{Model: "m"})
			if tk.Backend.Name() != "b" {
				t.Fatalf("%s: want the less loaded b, got %s", pol, tk.Backend.Name())
			}
		}
	}
}

func blocksOf(text string) []uint64 {
	h := NewBlockHasher(64)
	h.Text(text)
	return slices.Clone(h.Hashes())
}

func TestPrefixAffinitySticksAndCacheAwareSpills(t *testing.T) {
	sys := strings.Repeat("You are a helpful assistant. ", 40)
	clk := newClock()
	bs := backends("a", "b", "c")
	pa := mustNew(t, PrefixAffinity, clk, bs)
	first, _ := pa.Pick(&Request{Model: "m", PromptTokens: 400, Blocks: blocksOf(sys + "q0")})
	if first.Reason != ReasonPrefixMiss {
		t.Fatalf("first request: reason %s want %s", first.Reason, ReasonPrefixMiss)
	}
	for i := range 20 {
		tk, _ := pa.Pick(&Request{Model: "m", PromptTokens: 400, Blocks: blocksOf(sys + "question " + string(rune('a'+i)))})
		if tk.Backend != first.Backend || tk.Reason != ReasonPrefixHit || tk.CachedTokens <= 0 {
			t.Fatalf("request %d: went to %s (%s, cached %d), want affinity to %s", i, tk.Backend.Name(), tk.Reason, tk.CachedTokens, first.Backend.Name())
		}
	}
	// The same load pattern under cache-aware spills once the warm backend is
	// far busier than the others.
	bs2 := backends("a", "b", "c")
	ca := mustNew(t, CacheAware, clk, bs2)
	seen := map[string]bool{}
	for i := range 20 {
		tk, _ := ca.Pick(&Request{Model: "m", PromptTokens: 400, Blocks: blocksOf(sys + "question " + string(rune('a'+i)))})
		seen[tk.Backend.Name()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("cache-aware never spilled from an overloaded warm backend: %v", seen)
	}
}

// train feeds a backend's predictors with TTFT = base + perTok·(queued+uncached).
func train(b *Backend, n int, base, perTok float64, rng *rand.Rand) {
	for range n {
		f := Features{UncachedTokens: float64(rng.IntN(2000)), QueuedTokens: float64(rng.IntN(4000)), InFlight: float64(rng.IntN(8))}
		f.PromptTokens = f.UncachedTokens
		b.preds.observe(f, base+perTok*(f.UncachedTokens+f.QueuedTokens))
	}
}

func TestSLOPredictivePrefersHeadroom(t *testing.T) {
	clk := newClock()
	bs := backends("fast", "slow")
	rng := rand.New(rand.NewPCG(3, 4))
	train(bs[0], 300, 0.02, 0.00002, rng) // 20 ms + 20 µs/token
	train(bs[1], 300, 0.05, 0.0002, rng)  // 50 ms + 200 µs/token
	s := mustNew(t, SLOPredictive, clk, bs)
	tk, _ := s.Pick(&Request{Model: "m", PromptTokens: 1000, SLO: 120 * time.Millisecond})
	if tk.Backend.Name() != "fast" || tk.Reason != ReasonHeadroom || !tk.MeetsSLO {
		t.Fatalf("got %s (%s, meets %v, pred %+v), want fast/headroom", tk.Backend.Name(), tk.Reason, tk.MeetsSLO, tk.Prediction)
	}
	if m := tk.Prediction.Mean; m < 35*time.Millisecond || m > 45*time.Millisecond {
		t.Fatalf("predicted mean %v, want ≈40 ms", m)
	}
	// Queue 20k tokens on fast: now slow has more headroom.
	bs[0].queuedTokens.Add(20000)
	tk2, _ := s.Pick(&Request{Model: "m", PromptTokens: 100, SLO: 120 * time.Millisecond})
	if tk2.Backend.Name() != "slow" {
		t.Fatalf("with fast's queue full, got %s (pred %+v)", tk2.Backend.Name(), tk2.Prediction)
	}
	// A tiny SLO nobody can meet.
	tk3, _ := s.Pick(&Request{Model: "m", PromptTokens: 100000, SLO: time.Millisecond})
	if tk3.Reason != ReasonNoHeadroom || tk3.MeetsSLO {
		t.Fatalf("impossible SLO: reason %s meets %v", tk3.Reason, tk3.MeetsSLO)
	}
}

func TestMeetProbabilityMonotone(t *testing.T) {
	// Property: for a fixed prediction, a looser SLO never lowers the
	// probability; and the score stays within [0,1].
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		mean := time.Duration(rng.IntN(500)+1) * time.Millisecond
		p := Prediction{Mean: mean, P95: mean + time.Duration(rng.IntN(500))*time.Millisecond}
		prev := -1.0
		for slo := time.Millisecond; slo < 1200*time.Millisecond; slo += 7 * time.Millisecond {
			v := meetProbability(p, slo)
			if v < prev-1e-12 || v < 0 || v > 1 {
				t.Fatalf("pred %+v slo %v: %v after %v", p, slo, v, prev)
			}
			prev = v
		}
	}
}

func TestBreaker(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	s := mustNew(t, LeastOutstanding, clk, bs)
	for range breakerFailures {
		tk, _ := s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
		tk.End(OutcomeFailed)
	}
	if st := bs[0].BreakerState(clk.now()); st != BreakerOpen {
		t.Fatalf("after %d failures: state %d want open", breakerFailures, st)
	}
	if _, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("open breaker still admits: %v", err)
	}
	clk.add(breakerCooldown)
	trial, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
	if err != nil {
		t.Fatalf("half-open admits no trial: %v", err)
	}
	if _, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("half-open admits a second request during the trial: %v", err)
	}
	trial.End(OutcomeFailed)
	if st := bs[0].BreakerState(clk.now()); st != BreakerOpen {
		t.Fatalf("failed trial: state %d want open", st)
	}
	clk.add(2 * breakerCooldown) // cooldown doubled
	trial, _ = s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
	trial.End(OutcomeOK)
	if st := bs[0].BreakerState(clk.now()); st != BreakerClosed {
		t.Fatalf("successful trial: state %d want closed", st)
	}
}

func TestSLODemotionAndProbe(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	s := mustNew(t, RoundRobin, clk, bs)
	slo := 100 * time.Millisecond
	violate := func(name string) {
		tk, _ := s.Pick(&Request{Model: "m", SLO: slo, Exclude: []string{other(name)}})
		clk.add(200 * time.Millisecond)
		tk.FirstToken()
		tk.End(OutcomeOK)
	}
	for range demoteAfter {
		violate("a")
	}
	if st := bs[0].SLOState(clk.now()); st != SLODemoted {
		t.Fatalf("after %d violations: state %d want demoted", demoteAfter, st)
	}
	for range 5 {
		tk, _ := s.Pick(&Request{Model: "m", SLO: slo})
		if tk.Backend.Name() != "b" {
			t.Fatalf("demoted a still picked")
		}
		tk.End(OutcomeCanceled)
	}
	clk.add(demoteCooldown)
	// Half-open: the rotation reaches a and that request is its probe.
	var probe *Ticket
	for range 4 {
		tk, _ := s.Pick(&Request{Model: "m", SLO: slo})
		if tk.Backend.Name() == "a" {
			probe = tk
			break
		}
		tk.End(OutcomeCanceled)
	}
	if probe == nil || probe.Reason != ReasonProbe {
		t.Fatalf("no probe sent to half-open a: %+v", probe)
	}
	clk.add(10 * time.Millisecond)
	probe.FirstToken()
	probe.End(OutcomeOK)
	if st := bs[0].SLOState(clk.now()); st != SLOOK {
		t.Fatalf("after a good probe: state %d want ok", st)
	}
}

func other(n string) string {
	if n == "a" {
		return "b"
	}
	return "a"
}

func TestReloadKeepsInFlight(t *testing.T) {
	clk := newClock()
	bs := backends("a")
	s := mustNew(t, RoundRobin, clk, bs)
	tk, _ := s.Pick(&Request{Model: "m"})
	s.SetBackends(backends("x"))
	tk.End(OutcomeOK) // ends on the old backend object without panicking
	if bs[0].InFlight() != 0 {
		t.Fatal("old backend's in-flight not released")
	}
	tk2, _ := s.Pick(&Request{Model: "m"})
	if tk2.Backend.Name() != "x" {
		t.Fatalf("after reload got %s", tk2.Backend.Name())
	}
}

func TestPredictorsLearnLinear(t *testing.T) {
	// Property: on noise-free linear data both predictors converge; the
	// regression to within 2%.
	for seed := uint64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		base := 0.01 + rng.Float64()*0.05
		per := 1e-5 + rng.Float64()*1e-4
		b := NewBackend(BackendSpec{Name: "x"})
		train(b, 400, base, per, rng)
		f := Features{UncachedTokens: 1500, QueuedTokens: 2500}
		want := base + per*4000
		p := b.preds.predict(f)
		if got := p.Mean.Seconds(); math.Abs(got-want)/want > 0.02 {
			t.Fatalf("seed %d: predicted %.4f want %.4f (%s)", seed, got, want, p.Predictor)
		}
		if p.P95 < p.Mean {
			t.Fatalf("P95 %v below mean %v", p.P95, p.Mean)
		}
		st := b.PredictorStats()
		if st.MAPE[PredictorLinear] > MAPEThreshold {
			t.Fatalf("seed %d: linear MAPE %.3f on linear data", seed, st.MAPE[PredictorLinear])
		}
	}
}

func TestPredictorFallbackOnHighMAPE(t *testing.T) {
	// TTFT proportional to total work with a strong multiplicative
	// interaction the regression cannot express, but the queue model can:
	// ttft = k·work where k drifts across two regimes keyed by in-flight.
	b := NewBackend(BackendSpec{Name: "x"})
	rng := rand.New(rand.NewPCG(8, 9))
	for range 2000 {
		f := Features{UncachedTokens: float64(rng.IntN(3000) + 10), QueuedTokens: float64(rng.IntN(50)) * float64(rng.IntN(200))}
		f.InFlight = float64(rng.IntN(3))
		work := f.UncachedTokens + f.QueuedTokens + overheadTokens
		b.preds.observe(f, 1e-4*work*work/1000) // quadratic in work
	}
	st := b.PredictorStats()
	if st.MAPE[st.Active] > st.MAPE[otherPred(st.Active)] && st.MAPE[st.Active] > MAPEThreshold {
		t.Fatalf("active %s has MAPE %.3f above threshold while the other has %.3f", st.Active, st.MAPE[st.Active], st.MAPE[otherPred(st.Active)])
	}
}

func otherPred(n string) string {
	if n == PredictorLinear {
		return PredictorQueue
	}
	return PredictorLinear
}

func TestResidualP95Coverage(t *testing.T) {
	// Property: with multiplicative noise, about 95% of outcomes fall at or
	// below the predicted P95.
	b := NewBackend(BackendSpec{Name: "x"})
	rng := rand.New(rand.NewPCG(10, 11))
	sample := func() (Features, float64) {
		f := Features{UncachedTokens: float64(rng.IntN(2000)), QueuedTokens: float64(rng.IntN(2000))}
		noise := math.Exp(rng.NormFloat64() * 0.3)
		return f, (0.02 + 5e-5*(f.UncachedTokens+f.QueuedTokens)) * noise
	}
	for range 1000 {
		f, y := sample()
		b.preds.observe(f, y)
	}
	under := 0
	const n = 2000
	for range n {
		f, y := sample()
		if y <= b.preds.predict(f).P95.Seconds() {
			under++
		}
	}
	if cov := float64(under) / n; cov < 0.90 || cov > 0.99 {
		t.Fatalf("P95 coverage %.3f, want ≈0.95", cov)
	}
}

func TestColdBackendIsNotRejected(t *testing.T) {
	clk := newClock()
	s := mustNew(t, SLOPredictive, clk, backends("a", "b"))
	tk, _ := s.Pick(&Request{Model: "m", PromptTokens: 100, SLO: time.Millisecond})
	if !tk.MeetsSLO || tk.Reason == ReasonNoHeadroom || tk.Prediction.Ready {
		t.Fatalf("cold backend: meets %v reason %s ready %v; want an optimistic try", tk.MeetsSLO, tk.Reason, tk.Prediction.Ready)
	}
}

// Demotion takes a backend out only while at least half of the fleet is
// left: with one of four demoted the request goes elsewhere, with three
// of four every backend is a candidate again (the misses are the load's,
// and one backend cannot take it all).
func TestSLODemotionKeepsHalf(t *testing.T) {
	for _, tt := range []struct {
		demoted  int
		wantUsed int // backends the next 40 picks use
	}{{1, 3}, {2, 2}, {3, 4}} {
		t.Run(fmt.Sprintf("%d of 4 demoted", tt.demoted), func(t *testing.T) {
			clk := newClock()
			bs := backends("a", "b", "c", "d")
			s := mustNew(t, RoundRobin, clk, bs)
			slo := 100 * time.Millisecond
			for _, b := range bs[:tt.demoted] {
				for range demoteAfter {
					tk, _ := s.Pick(&Request{Model: "m", SLO: slo, Exclude: others(bs, b.Name())})
					clk.add(200 * time.Millisecond)
					tk.FirstToken()
					tk.End(OutcomeOK)
				}
				if st := b.SLOState(clk.now()); st != SLODemoted {
					t.Fatalf("%s after %d violations: state %d want demoted", b.Name(), demoteAfter, st)
				}
			}
			used := map[string]bool{}
			for range 40 {
				tk, _ := s.Pick(&Request{Model: "m", SLO: slo})
				used[tk.Backend.Name()] = true
				tk.End(OutcomeCanceled)
			}
			if len(used) != tt.wantUsed {
				t.Errorf("picks used %v; want %d backends", used, tt.wantUsed)
			}
		})
	}
}

// others names every backend but name.
func others(bs []*Backend, name string) []string {
	var o []string
	for _, b := range bs {
		if b.Name() != name {
			o = append(o, b.Name())
		}
	}
	return o
}

// No prediction falls below the fastest TTFT recently served: a
// regression fitted where requests queue extrapolates, for an idle
// backend, below zero (clamped to it), which made the backend look the
// fastest of all. Where the data reach, the regression stands.
func TestPredictionFloor(t *testing.T) {
	b := NewBackend(BackendSpec{Name: "x"})
	rng := rand.New(rand.NewPCG(12, 13))
	least := math.Inf(1)
	for range 300 {
		f := Features{UncachedTokens: 500, InFlight: float64(2 + rng.IntN(8))}
		ttft := -0.03 + 0.02*f.InFlight // 10–150 ms where seen
		least = min(least, ttft)
		b.preds.observe(f, ttft)
	}
	if m, ready := b.preds.preds[0].Predict(Features{UncachedTokens: 500}); !ready || m > 0 {
		t.Fatalf("the regression alone predicts %.4f s (ready %v) for an idle backend; the case wants it clamped at zero", m, ready)
	}
	idle := b.preds.predict(Features{UncachedTokens: 500})
	if !idle.Ready || idle.Mean.Seconds() < least-1e-9 {
		t.Errorf("idle backend predicted %v (ready %v), below the fastest TTFT served, %.3f s", idle.Mean, idle.Ready, least)
	}
	if got := b.preds.predict(Features{UncachedTokens: 500, InFlight: 5}).Mean.Seconds(); math.Abs(got-0.07) > 0.002 {
		t.Errorf("five in flight: predicted %.4f s, want the regression's 0.070", got)
	}
}

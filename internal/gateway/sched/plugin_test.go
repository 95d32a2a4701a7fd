package sched

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

const filters = "exclude-filter → health-filter → capacity-filter → breaker-filter → slo-demotion-filter → "

// Every policy is a profile: the same filters, then its scorers (with
// weights) and its picker.
func TestPolicyProfiles(t *testing.T) {
	want := map[string]string{
		RoundRobin:       filters + "round-robin-picker",
		Random:           filters + "random-picker",
		LeastOutstanding: filters + "1×load-scorer → max-score-picker",
		PowerOfTwo:       filters + "1×load-scorer → two-choices-picker",
		PrefixAffinity:   filters + "1×prefix-scorer → max-score-picker",
		CacheAware:       filters + "1×prefix-scorer → max-score-picker",
		SLOPredictive:    filters + "1×prefix-scorer → slo-affinity-picker",
		SLOLatency:       filters + "0.6×slo-compliance-scorer + 0.4×latency-scorer → slo-picker",
	}
	for _, pol := range Policies() {
		s, err := New(Options{Policy: pol, Seed: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Describe(); got != want[pol] {
			t.Errorf("%s: %s\nwant %s", pol, got, want[pol])
		}
		if s.Policy() != pol || s.Profile().Name != pol {
			t.Errorf("%s: policy %q profile %q", pol, s.Policy(), s.Profile().Name)
		}
	}
	for _, pol := range []string{SLOPredictive, SLOLatency} {
		spec, _ := PolicyProfile(pol, Options{Explore: -1, PanicThreshold: -1})
		checkDisabled(t, spec)
	}
}

// checkDisabled: a negative Explore and PanicThreshold reach the plugins
// as 0 and -1.
func checkDisabled(t *testing.T, spec ProfileSpec) {
	t.Helper()
	for _, p := range spec.Plugins {
		switch p.Type {
		case SLOPickerType, SLOAffinityPickerType:
			if p.Params["explore"] != 0.0 {
				t.Errorf("explore disabled: params %v", p.Params)
			}
		case BreakerFilterType:
			if p.Params["panic_threshold"] != -1.0 {
				t.Errorf("panic routing disabled: params %v", p.Params)
			}
		}
	}
}

// A custom profile mixes scorers by weight: here cached prefix 0.7 and
// load 0.3, so affinity holds until the warm backend is much busier.
func TestCustomProfile(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	spec := ProfileSpec{Name: "mixed", Plugins: []PluginSpec{
		{Type: ExcludeFilterType},
		{Type: HealthFilterType},
		{Type: PrefixScorerType, Weight: 0.7},
		{Type: LoadScorerType, Weight: 0.3},
		{Type: MaxScorePickerType, Params: Params{"tie_break": TieFirst}},
	}}
	s, err := New(Options{Profile: &spec, Now: clk.now, Seed: 1}, bs)
	if err != nil {
		t.Fatal(err)
	}
	if s.Policy() != "mixed" || s.Describe() != "exclude-filter → health-filter → 0.7×prefix-scorer + 0.3×load-scorer → max-score-picker" {
		t.Fatalf("policy %q: %s", s.Policy(), s.Describe())
	}
	blocks := blocksOf(strings.Repeat("shared system prompt ", 40))
	bs[1].Prefix().Insert(blocks)
	var held []*Ticket
	for i := range 3 {
		tk, err := s.Pick(&Request{Model: "m", PromptTokens: 200, Blocks: blocks})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Backend.Name() != "b" || tk.Reason != ReasonPrefixHit || tk.Policy != "mixed" {
			t.Fatalf("pick %d: %s (%s, policy %s), want b by its prefix", i, tk.Backend.Name(), tk.Reason, tk.Policy)
		}
		held = append(held, tk)
	}
	// With 3 in flight b scores 0.7·1 + 0.3·¼ against the idle a's 0.3·1:
	// b still wins. Once a holds the prompt too, load decides.
	bs[0].Prefix().Insert(blocks)
	tk, _ := s.Pick(&Request{Model: "m", PromptTokens: 200, Blocks: blocks})
	if tk.Backend.Name() != "a" {
		t.Fatalf("both warm: got %s, want the idle a", tk.Backend.Name())
	}
	for _, h := range append(held, tk) {
		h.End(OutcomeOK)
	}
}

func TestProfileErrors(t *testing.T) {
	picker := PluginSpec{Type: RoundRobinPickerType}
	for _, tc := range []struct {
		spec ProfileSpec
		want string
	}{
		{ProfileSpec{Plugins: []PluginSpec{picker}}, "no name"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: "fastest-picker"}}}, `unknown plugin type "fastest-picker"`},
		{ProfileSpec{Name: "x"}, "exactly one picker, got 0"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{picker, picker}}, "exactly one picker, got 2"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: HealthFilterType, Weight: 2}, picker}}, "only scorers take a weight"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: LoadScorerType, Weight: -1}, picker}}, "not a positive number"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: HealthFilterType, Params: Params{"strict": true}}, picker}}, `unknown parameter "strict" (it takes none)`},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: BreakerFilterType, Params: Params{"panic": 0.2}}, picker}}, `unknown parameter "panic" (want panic_threshold)`},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: BreakerFilterType, Params: Params{"panic_threshold": "half"}}, picker}}, "want a number"},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: MaxScorePickerType, Params: Params{"tie_break": "coin"}}}}, `tie_break: "coin"`},
		{ProfileSpec{Name: "x", Plugins: []PluginSpec{{Type: SLOPickerType, Params: Params{"explore": 2}}}}, "explore: 2 is above 1"},
	} {
		_, err := New(Options{Profile: &tc.spec}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.spec, err, tc.want)
		}
	}
	for _, typ := range []string{ExcludeFilterType, HealthFilterType, CapacityFilterType, BreakerFilterType, SLODemotionFilterType,
		LoadScorerType, PrefixScorerType, SLOComplianceScorerType, LatencyScorerType,
		RoundRobinPickerType, RandomPickerType, MaxScorePickerType, TwoChoicesPickerType, SLOPickerType} {
		if !strings.Contains(strings.Join(PluginTypes(), ","), typ) {
			t.Errorf("%s not registered", typ)
		}
	}
}

// durations collects what the scheduler observes, per (kind, plugin).
type durations struct {
	mu sync.Mutex
	n  map[string]int
}

type durationObserver struct {
	d   *durations
	key string
}

func (o durationObserver) Observe(s float64) {
	o.d.mu.Lock()
	defer o.d.mu.Unlock()
	if s >= 0 && s < 1 {
		o.d.n[o.key]++
	}
}

func (d *durations) latency(kind, plugin string) Observer {
	return durationObserver{d, kind + "/" + plugin}
}

// Every plugin of a timed decision is observed once, under its kind.
func TestPluginLatency(t *testing.T) {
	for _, every := range []int{1, 16} {
		d := &durations{n: map[string]int{}}
		clk := newClock()
		s, err := New(Options{Policy: SLOLatency, Now: clk.now, Seed: 1, PluginLatency: d.latency, PluginLatencyEvery: every}, backends("a", "b", "c"))
		if err != nil {
			t.Fatal(err)
		}
		const n = 4096
		for range n {
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 100, SLO: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			tk.End(OutcomeOK)
		}
		want := []string{"filter/exclude-filter", "filter/health-filter", "filter/capacity-filter", "filter/breaker-filter", "filter/slo-demotion-filter",
			"scorer/slo-compliance-scorer", "scorer/latency-scorer", "picker/slo-picker"}
		if len(d.n) != len(want) {
			t.Fatalf("every %d: observed %v, want %v", every, d.n, want)
		}
		for _, k := range want {
			switch got := d.n[k]; {
			case every == 1 && got != n:
				t.Errorf("every decision timed: %s observed %d times, want %d", k, got, n)
			case every > 1 && (got < n/every/2 || got > 2*n/every):
				t.Errorf("1 in %d decisions timed: %s observed %d times of %d", every, k, got, n)
			}
		}
	}
}

// Each built-in profile gives its policy's decision reasons (the scorers
// explain what max-score and two-choices pickers leave unsaid).
func TestProfileReasons(t *testing.T) {
	reasons := map[string][]string{
		RoundRobin:       {ReasonRotation},
		Random:           {ReasonRandom},
		LeastOutstanding: {ReasonLeastLoad},
		PowerOfTwo:       {ReasonLeastLoad},
		PrefixAffinity:   {ReasonPrefixHit, ReasonPrefixMiss},
		CacheAware:       {ReasonPrefixHit, ReasonPrefixMiss, ReasonOverloaded},
		SLOPredictive:    {ReasonPrefixHit, ReasonHeadroom, ReasonExplore, ReasonNoHeadroom},
		SLOLatency:       {ReasonHeadroom, ReasonExplore, ReasonNoHeadroom},
	}
	for _, pol := range Policies() {
		clk := newClock()
		s, err := New(Options{Policy: pol, Now: clk.now, Seed: 3, Explore: 0.2}, backends("a", "b", "c"))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var open []*Ticket
		for i := range 400 {
			slo := 5 * time.Second
			if i%3 == 0 {
				slo = time.Nanosecond
			}
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 100, Blocks: blocksOf(strings.Repeat("p", 64*(1+i%2)) + fmt.Sprint(i%7)), SLO: slo})
			if err != nil {
				t.Fatal(err)
			}
			seen[tk.Reason] = true
			open = append(open, tk)
			if len(open) > 12 {
				clk.add(time.Millisecond)
				open[0].FirstToken()
				open[0].End(OutcomeOK)
				open = open[1:]
			}
		}
		for r := range seen {
			if r != ReasonProbe && !strings.Contains(strings.Join(reasons[pol], ","), r) {
				t.Errorf("%s gave reason %q, want one of %v", pol, r, reasons[pol])
			}
		}
	}
}

// Decisions run concurrently (each on a pooled Cycle of its own) while
// the backend set is swapped; run with -race.
func TestConcurrentPicks(t *testing.T) {
	for _, pol := range Policies() {
		d := &durations{n: map[string]int{}}
		bs := backends("a", "b", "c", "d")
		s, err := New(Options{Policy: pol, Seed: 1, PluginLatency: d.latency, PluginLatencyEvery: 2}, bs)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 300 {
					tk, err := s.Pick(&Request{Model: "m", PromptTokens: 100, Blocks: blocksOf(strings.Repeat("x", 64*(g+1)) + fmt.Sprint(i%5)), SLO: 100 * time.Millisecond, Exclude: []string{bs[i%4].Name()}})
					if err != nil {
						t.Error(err)
						return
					}
					tk.FirstToken()
					tk.End(Outcome(i % 3))
				}
			}()
		}
		for range 20 {
			s.SetBackends(bs[:3+len(s.Backends())%2])
		}
		s.SetBackends(bs)
		wg.Wait()
		for _, b := range bs {
			if b.InFlight() != 0 {
				t.Fatalf("%s: %s has %d in flight", pol, b.Name(), b.InFlight())
			}
		}
	}
}

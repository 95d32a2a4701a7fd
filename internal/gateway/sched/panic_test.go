package sched

import (
	"errors"
	"testing"
)

// Below the panic threshold (default: half the backends available) the
// breakers are ignored and every healthy backend takes requests; above it
// they are obeyed; unhealthy backends are never picked.
func TestPanicThreshold(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b", "c", "d")
	s := mustNew(t, RoundRobin, clk, bs)
	open := func(b *Backend) {
		for range breakerFailures {
			b.reportOutcome(clk.now(), false, false)
		}
	}
	picked := func(s *Scheduler) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for range 16 {
			tk, err := s.Pick(&Request{Model: "m", API: "openai"})
			if err != nil {
				t.Fatal(err)
			}
			seen[tk.Backend.Name()]++
			tk.End(OutcomeOK)
		}
		return seen
	}
	open(bs[0])
	open(bs[1])
	if seen := picked(s); seen["a"]+seen["b"] != 0 {
		t.Fatalf("2 of 4 available (at the threshold): open breakers must be obeyed, picked %v", seen)
	}
	open(bs[2])
	if seen := picked(s); len(seen) != 4 {
		t.Fatalf("1 of 4 available: want every backend in rotation, picked %v", seen)
	}
	bs[3].SetHealthy(false)
	if seen := picked(s); len(seen) != 3 || seen["d"] != 0 {
		t.Fatalf("panic routing: want the 3 healthy backends, picked %v", seen)
	}
	// Excluded backends (tried by this request) still count as the fleet.
	if tk, err := s.Pick(&Request{Model: "m", API: "openai", Exclude: []string{"a", "b"}}); err != nil || tk.Backend.Name() != "c" {
		t.Fatalf("panic routing with exclusions: %v %v", tk, err)
	}
	off, err := New(Options{Policy: RoundRobin, Now: clk.now, Seed: 7, Explore: -1, PanicThreshold: -1}, bs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Pick(&Request{Model: "m", API: "openai"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("panic routing off: want ErrUnavailable, got %v", err)
	}
}

// An attempt without a verdict (a 429, a long non-streamed answer cut by
// the gateway) neither opens a breaker nor keeps a half-open one's trial.
func TestNoVerdictOutcome(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	s := mustNew(t, RoundRobin, clk, bs)
	for range 3 * breakerFailures {
		tk, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
		if err != nil {
			t.Fatal(err)
		}
		tk.End(OutcomeNoVerdict)
	}
	if st := bs[0].BreakerState(clk.now()); st != BreakerClosed {
		t.Fatalf("breaker state %d after no-verdict outcomes, want closed", st)
	}
	for range breakerFailures {
		tk, _ := s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
		tk.End(OutcomeFailed)
	}
	clk.add(breakerCooldown)
	trial, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	trial.End(OutcomeNoVerdict)
	if _, err := s.Pick(&Request{Model: "m", Exclude: []string{"b"}}); err != nil {
		t.Fatalf("half-open trial slot not freed by a no-verdict end: %v", err)
	}
}

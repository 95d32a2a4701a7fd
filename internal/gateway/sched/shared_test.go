package sched

import (
	"slices"
	"testing"
	"time"
)

// recordingObserver is a SharedObserver that keeps what it hears.
type recordingObserver struct {
	inserts   [][]uint64
	cooldowns []string // backend/kind
}

func (r *recordingObserver) PrefixInserted(_ string, blocks []uint64) {
	r.inserts = append(r.inserts, slices.Clone(blocks))
}

func (r *recordingObserver) CooldownOpen(backend, kind string, _ time.Time) {
	r.cooldowns = append(r.cooldowns, backend+"/"+kind)
}

func (r *recordingObserver) ReplicaSlot() (int, int) { return 0, 1 }

// The observer hears each dispatched prompt's blocks and a breaker that
// opens; nothing when the breaker stays closed.
func TestSharedObserver(t *testing.T) {
	clk := newClock()
	bs := backends("a")
	obs := &recordingObserver{}
	s, err := New(Options{Policy: RoundRobin, Now: clk.now, Seed: 7, Explore: -1, PanicThreshold: -1, Shared: obs}, bs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range breakerFailures {
		tk, err := s.Pick(&Request{API: "openai", Model: "m", Blocks: []uint64{1, 2, uint64(10 + i)}})
		if err != nil {
			t.Fatal(err)
		}
		tk.End(OutcomeFailed)
		if want := i+1 == breakerFailures; (len(obs.cooldowns) == 1) != want {
			t.Fatalf("after %d failures: cooldowns heard %v", i+1, obs.cooldowns)
		}
	}
	if len(obs.inserts) != breakerFailures || !slices.Equal(obs.inserts[0], []uint64{1, 2, 10}) {
		t.Errorf("inserts heard: %v", obs.inserts)
	}
	if obs.cooldowns[0] != "a/"+CooldownBreaker {
		t.Errorf("cooldown heard: %v", obs.cooldowns)
	}
}

func TestImportCooldown(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	later := now.Add(5 * time.Second)
	cases := []struct {
		name    string
		prep    func(b *Backend)
		kind    string
		until   time.Time
		applied bool
		breaker int
		slo     int
	}{
		{"closed breaker opens", nil, CooldownBreaker, later, true, BreakerOpen, SLOOK},
		{"demotion opens", nil, CooldownDemotion, later, true, BreakerClosed, SLODemoted},
		{"an ended cooldown is ignored", nil, CooldownBreaker, now.Add(-time.Second), false, BreakerClosed, SLOOK},
		{"unknown kind", nil, "other", later, false, BreakerClosed, SLOOK},
		{"open longer already", func(b *Backend) { b.ImportCooldown(CooldownBreaker, later.Add(time.Second), now) },
			CooldownBreaker, later, false, BreakerOpen, SLOOK},
		{"open shorter is extended", func(b *Backend) { b.ImportCooldown(CooldownBreaker, now.Add(time.Second), now) },
			CooldownBreaker, later, true, BreakerOpen, SLOOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := backends("a")[0]
			if tc.prep != nil {
				tc.prep(b)
			}
			if got := b.ImportCooldown(tc.kind, tc.until, now); got != tc.applied {
				t.Errorf("applied = %v, want %v", got, tc.applied)
			}
			if got := b.BreakerState(now); got != tc.breaker {
				t.Errorf("breaker = %d, want %d", got, tc.breaker)
			}
			if got := b.SLOState(now); got != tc.slo {
				t.Errorf("SLO state = %d, want %d", got, tc.slo)
			}
			if tc.applied {
				// It half-opens locally when the imported cooldown ends.
				if got := b.BreakerState(tc.until); tc.kind == CooldownBreaker && got != BreakerHalfOpen {
					t.Errorf("breaker at until = %d, want half-open", got)
				}
			}
		})
	}
}

// An imported prefix is matched as a local insert is.
func TestImportPrefix(t *testing.T) {
	b := backends("a")[0]
	b.ImportPrefix([]uint64{1, 2, 3})
	if got := b.Prefix().Match([]uint64{1, 2, 3, 4}); got != 3 {
		t.Errorf("Match = %d, want 3", got)
	}
}

// Other replicas' requests in flight count in the load every load-based
// policy balances on, beside the gateway's own.
func TestImportInFlight(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	s := mustNew(t, LeastOutstanding, clk, bs)
	bs[0].ImportInFlight(2)
	var got []string
	for range 6 {
		tk, err := s.Pick(&Request{Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, tk.Backend.Name())
	}
	// b takes the first two (a has two elsewhere), then the loads are
	// balanced: a 2 + 2, b 4.
	if !slices.Equal(got[:2], []string{"b", "b"}) || bs[0].InFlight() != 2 || bs[1].InFlight() != 4 {
		t.Errorf("picks %v: a has %d in flight, b %d; want b, b first and 2, 4", got, bs[0].InFlight(), bs[1].InFlight())
	}
	if bs[0].RemoteInFlight() != 2 {
		t.Errorf("a's remote count %d, want 2 (kept apart from its own)", bs[0].RemoteInFlight())
	}
	bs[1].ImportInFlight(-1)
	if bs[1].RemoteInFlight() != 0 {
		t.Errorf("a negative count imported as %d", bs[1].RemoteInFlight())
	}
}

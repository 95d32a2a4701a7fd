package sched

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The cooldown behind the breaker and the SLO demotion: threshold
// consecutive bad reports open it; after the cooldown it admits one trial;
// a bad trial reopens it for twice as long (up to the cap), a good one
// closes it and resets the cooldown; a good report resets the count.
func TestCooldown(t *testing.T) {
	p := cooldownPolicy{threshold: 3, first: time.Second, most: 3 * time.Second}
	now := time.Unix(1_700_000_000, 0)
	var c cooldown
	bad := func(trial bool) { c.report(now, false, trial, p) }
	bad(false)
	bad(false)
	c.report(now, true, false, p) // resets the count
	bad(false)
	bad(false)
	if c.at(now) != coolClosed || !c.admits(now) {
		t.Fatalf("2 consecutive bad reports: state %d", c.at(now))
	}
	bad(false)
	if c.at(now) != coolOpen || c.admits(now) || c.claim(now) {
		t.Fatalf("3 consecutive bad reports: state %d, want open and no trial", c.at(now))
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if c.at(now.Add(wait-time.Nanosecond)) != coolOpen {
			t.Fatalf("round %d: half-open before its %v cooldown", i, wait)
		}
		now = now.Add(wait)
		if c.at(now) != coolHalfOpen || !c.admits(now) {
			t.Fatalf("round %d: state %d after %v, want half-open admitting", i, c.at(now), wait)
		}
		if !c.claim(now) || c.admits(now) || c.claim(now) {
			t.Fatalf("round %d: the trial slot is not exclusive", i)
		}
		c.release() // a trial without a verdict frees the slot
		if !c.claim(now) {
			t.Fatalf("round %d: released slot not claimable", i)
		}
		bad(false) // not the trial: no verdict on the half-open state
		if c.at(now) != coolHalfOpen {
			t.Fatalf("round %d: a non-trial failure moved half-open to %d", i, c.at(now))
		}
		bad(true)
		if c.at(now) != coolOpen {
			t.Fatalf("round %d: a failed trial left state %d", i, c.at(now))
		}
	}
	now = now.Add(3 * time.Second)
	c.claim(now)
	c.report(now, true, true, p)
	if c.at(now) != coolClosed || c.wait != 0 || !c.admits(now) {
		t.Fatalf("a good trial: state %d cooldown %v, want closed and reset", c.at(now), c.wait)
	}
}

// Under a policy that routes by predictions, the SLO tracker demotes a
// backend only for violations its predictions did not foresee: a backend
// whose full prefills exceed the SLO (while its cache hits meet it) keeps
// its prompt groups. Other policies demote for every violation, and no
// policy for requests sent before the backend's predictions were ready.
func TestSLODemotionForeseen(t *testing.T) {
	slo := 100 * time.Millisecond
	tests := []struct {
		name      string
		policy    string
		base, tok float64 // the backend's learnt TTFT: base + tok per uncached token
		trained   bool
		// queued: this many requests in flight on a backend of four
		// slots, each waited for past them 50 ms, which the queue
		// bound has learnt (the routing predictor has not: its TTFTs
		// did not depend on the queue); 0: the bound has learnt
		// nothing.
		queued int64
		want   int
	}{
		{"non-predictive policy: every violation counts", PrefixAffinity, 0.05, 2e-4, true, 0, SLODemoted},
		{"foreseen violations do not demote", SLOPredictive, 0.05, 2e-4, true, 0, SLOOK},
		{"unforeseen violations demote", SLOPredictive, 0.02, 2e-5, true, 0, SLODemoted},
		// Six in flight: three waited for, 190 ms predicted.
		{"foreseen by the queue bound: no verdict", SLOPredictive, 0.02, 2e-5, true, 6, SLOOK},
		// Four in flight: one waited for, 90 ms predicted, within the
		// SLO; but the request found every slot taken.
		{"every slot taken: no verdict", SLOPredictive, 0.02, 2e-5, true, 4, SLOOK},
		{"a slot free: violations demote", SLOPredictive, 0.02, 2e-5, true, 2, SLODemoted},
		{"no ready prediction: no verdict", SLOPredictive, 0, 0, false, 0, SLOOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			bs := backends("a")
			if tt.trained {
				train(bs[0], 200, tt.base, tt.tok, rand.New(rand.NewPCG(5, 6)))
			}
			if tt.queued > 0 {
				q := bs[0].preds.bound
				q.on.Store(true)
				rng := rand.New(rand.NewPCG(7, 8))
				for range 200 {
					f := Features{UncachedTokens: float64(rng.IntN(2000)), InFlight: float64(rng.IntN(8))}
					q.observe(f, fifoTTFT(f, 4, tt.base, tt.tok*1000, 0.05))
				}
				bs[0].inFlight.Add(tt.queued)
			}
			s := mustNew(t, tt.policy, clk, bs)
			for i := range demoteAfter {
				tk, err := s.Pick(&Request{Model: "m", PromptTokens: 1000, SLO: slo})
				if err != nil {
					t.Fatal(err)
				}
				if tt.trained && i == 0 && tk.MeetsSLO == (tt.base > 0.04) {
					t.Fatalf("predicted %v (P95 %v): meets %v, not as the case says", tk.Prediction.Mean, tk.Prediction.P95, tk.MeetsSLO)
				}
				clk.add(2 * slo)
				tk.FirstToken()
				tk.End(OutcomeOK)
			}
			if st := bs[0].SLOState(clk.now()); st != tt.want {
				t.Errorf("after %d violations: SLO state %d, want %d", demoteAfter, st, tt.want)
			}
		})
	}
}

// Under a policy that routes by predictions, unforeseen violations by
// requests that were in flight together are one episode toward demotion:
// three that waited side by side do not demote, while a backend that
// keeps missing with requests sent after each counted miss is demoted
// after demoteAfter episodes. Other policies count each violation.
func TestSLODemotionEpisodes(t *testing.T) {
	slo := 100 * time.Millisecond
	for _, tt := range []struct {
		policy string
		// episodes: how many more episodes of one request, after the
		// one of demoteAfter requests together, demote.
		episodes int
	}{
		{SLOPredictive, demoteAfter - 1},
		{RoundRobin, 0},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			clk := newClock()
			bs := backends("a")
			// Learnt at 20 ms + 20 µs per token: each violation below
			// is unforeseen.
			train(bs[0], 200, 0.02, 2e-5, rand.New(rand.NewPCG(5, 6)))
			s := mustNew(t, tt.policy, clk, bs)
			pick := func() *Ticket {
				tk, err := s.Pick(&Request{Model: "m", PromptTokens: 1000, SLO: slo})
				if err != nil {
					t.Fatal(err)
				}
				return tk
			}
			together := make([]*Ticket, demoteAfter)
			for i := range together {
				together[i] = pick()
			}
			clk.add(2 * slo)
			for _, tk := range together {
				tk.FirstToken()
				tk.End(OutcomeOK)
			}
			want := SLODemoted
			if tt.episodes > 0 {
				want = SLOOK
			}
			if st := bs[0].SLOState(clk.now()); st != want {
				t.Fatalf("after %d violations in flight together: SLO state %d, want %d", demoteAfter, st, want)
			}
			if a := bs[0].attainment(); a > 0.9 {
				t.Errorf("attainment %.3f: each violation should count against it", a)
			}
			for i := range tt.episodes {
				tk := pick()
				clk.add(2 * slo)
				tk.FirstToken()
				tk.End(OutcomeOK)
				want := SLOOK
				if i == tt.episodes-1 {
					want = SLODemoted
				}
				if st := bs[0].SLOState(clk.now()); st != want {
					t.Fatalf("after %d more episodes: SLO state %d, want %d", i+1, st, want)
				}
			}
		})
	}
}

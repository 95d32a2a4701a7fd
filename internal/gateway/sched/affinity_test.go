package sched

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestSLOAffinityPicker: the default policy keeps a prompt where its
// prefix is cached, and moves it only when that backend is predicted to
// miss the SLO while another meets it, or to be much slower than one that
// meets it.
func TestSLOAffinityPicker(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	tests := []struct {
		name string
		// per backend "home" (holds the prompt) then "other":
		// prediction base and per-token slope, queued tokens
		homeBase, homeTok, otherBase, otherTok float64
		homeQueue, otherQueue                  int64
		slo                                    time.Duration
		want, reason                           string
	}{
		{"stays with the cached prefix", 0.02, 2e-5, 0.02, 2e-5, 0, 0, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"stays through a short queue", 0.02, 2e-5, 0.02, 2e-5, 2000, 0, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"spills when home would miss the SLO", 0.02, 2e-5, 0.02, 2e-5, 20000, 0, 120 * time.Millisecond, "other", ReasonHeadroom},
		{"stays when no backend meets the SLO", 0.02, 2e-5, 0.02, 2e-5, 20000, 20000, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"leaves a much slower home", 0.2, 2e-4, 0.02, 2e-5, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			train(bs[0], 200, tt.homeBase, tt.homeTok, rng)
			train(bs[1], 200, tt.otherBase, tt.otherTok, rng)
			bs[0].Prefix().Insert(prompt)
			bs[0].queuedTokens.Add(tt.homeQueue)
			bs[1].queuedTokens.Add(tt.otherQueue)
			s, err := New(Options{Policy: SLOPredictive, Now: clk.now, Seed: 1, Explore: -1}, bs)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 600, Blocks: prompt, SLO: tt.slo})
			if err != nil {
				t.Fatal(err)
			}
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, tt.reason)
			}
		})
	}
}

// New prompt groups on a cold fleet (no prefix anywhere, one prior
// prediction for all) go to the backends in turn, not all to the first.
func TestSLOAffinitySpreadsNewGroups(t *testing.T) {
	clk := newClock()
	s := mustNew(t, SLOPredictive, clk, backends("a", "b", "c"))
	got := map[string]int{}
	for g := range 6 {
		tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)), SLO: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got[tk.Backend.Name()]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if got[n] != 2 {
			t.Errorf("six new groups over three cold backends: %v, want two each", got)
			break
		}
	}
}

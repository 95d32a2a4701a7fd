//go:build !race

// (The race detector's sync.Pool drops pooled objects at random.)

package sched

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// A decision allocates only its Ticket: candidates, scores and the
// cycle's scratch are reused, plugins are called once per decision (not
// per candidate), and timing the plugins allocates nothing.
func TestPickAllocs(t *testing.T) {
	h := NewBlockHasher(0)
	h.Segment("system", strings.Repeat("You are a careful assistant. ", 207))
	h.Segment("user", strings.Repeat("question text ", 140))
	blocks := h.Hashes()
	d := &durations{n: map[string]int{}}
	for _, pol := range Policies() {
		for _, timed := range []bool{false, true} {
			var bs []*Backend
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 16 {
				bk := NewBackend(BackendSpec{Name: fmt.Sprint("b", i)})
				train(bk, 50, 0.02, 2e-5, rng)
				bs = append(bs, bk)
			}
			opts := Options{Policy: pol, Seed: 1}
			if timed {
				opts.PluginLatency, opts.PluginLatencyEvery = d.latency, 1
			}
			s, err := New(opts, bs)
			if err != nil {
				t.Fatal(err)
			}
			req := &Request{Model: "m", PromptTokens: 2000, Blocks: blocks, SLO: 320 * time.Millisecond}
			decide := func() {
				tk, err := s.Pick(req)
				if err != nil {
					t.Fatal(err)
				}
				tk.FirstToken()
				tk.End(OutcomeOK)
			}
			for range 100 {
				decide()
			}
			// Every backend's prefix indexes (the full one and the cache
			// capacity candidates') hold the prompt, so that no index
			// grows its storage during the measurement.
			for _, bk := range bs {
				bk.caps.insert(blocks)
				bk.prefix.Insert(blocks)
			}
			if a := testing.AllocsPerRun(500, decide); a > 1 {
				t.Errorf("%s (timed %v): %v allocations per decision, want 1 (the ticket)", pol, timed, a)
			}
		}
	}
}

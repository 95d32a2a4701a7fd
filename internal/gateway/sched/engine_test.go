package sched

import (
	"math"
	"testing"
)

// TestEngineRestartForgetsCache: a scrape that reveals a restart — the
// process start time changed, or a cumulative prefix-cache counter went
// down — empties the backend's prefix index and every capacity
// candidate's, so affinity stops steering prompts to a cache that is no
// longer there; scrapes of a running engine keep them.
func TestEngineRestartForgetsCache(t *testing.T) {
	stats := func(start, queries, hits float64) EngineStats {
		es := UnknownEngineStats()
		es.StartTime, es.PrefixQueries, es.PrefixHits = start, queries, hits
		return es
	}
	nan := math.NaN()
	tests := []struct {
		name    string
		scrapes []EngineStats // the last one decides
		restart bool
	}{
		{"counters climb", []EngineStats{stats(nan, 100, 40), stats(nan, 900, 500)}, false},
		{"start time unchanged", []EngineStats{stats(1000, 100, 40), stats(1000, 900, 500)}, false},
		{"queries go down", []EngineStats{stats(nan, 900, 500), stats(nan, 100, 0)}, true},
		{"hits go down", []EngineStats{stats(nan, 900, 500), stats(nan, 900, 400)}, true},
		{"start time changed, counters already past", []EngineStats{stats(1000, 100, 40), stats(1060, 900, 500)}, true},
		{"start time appears", []EngineStats{stats(nan, 100, 40), stats(1000, 900, 500)}, false},
		{"start time disappears, counters climb", []EngineStats{stats(1000, 100, 40), stats(nan, 900, 500)}, false},
		{"nothing published", []EngineStats{UnknownEngineStats(), UnknownEngineStats()}, false},
		{"counters appear", []EngineStats{UnknownEngineStats(), stats(nan, 10, 0)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBackend(BackendSpec{Name: "a"})
			h := NewBlockHasher(DefaultBlockBytes)
			h.Text(string(make([]byte, 8*DefaultBlockBytes)))
			blocks := h.Hashes()
			for _, es := range tt.scrapes[:len(tt.scrapes)-1] {
				b.SetEngineStats(es)
			}
			b.prefix.Insert(blocks)
			b.caps.insert(blocks)
			b.SetEngineStats(tt.scrapes[len(tt.scrapes)-1])
			got := b.Prefix().Match(blocks)
			cand := b.caps.sets[0].Match(blocks)
			if tt.restart {
				if got != 0 || cand != 0 || b.EngineRestarts() != 1 {
					t.Fatalf("after a restart: index matches %d blocks, smallest candidate %d, restarts %d; want 0, 0, 1", got, cand, b.EngineRestarts())
				}
				return
			}
			if got != len(blocks) || cand == 0 || b.EngineRestarts() != 0 {
				t.Fatalf("no restart: index matches %d of %d blocks, smallest candidate %d, restarts %d", got, len(blocks), cand, b.EngineRestarts())
			}
		})
	}
}

// TestEngineRestartStartsNewHitWindow: the scrape after a restart is not
// hit-rate evidence (its counters belong to another process), and the
// window after it counts from the restart's counters.
func TestEngineRestartStartsNewHitWindow(t *testing.T) {
	b := NewBackend(BackendSpec{Name: "a"})
	es := UnknownEngineStats()
	es.StartTime, es.PrefixQueries, es.PrefixHits = 1000, 5000, 4000
	b.SetEngineStats(es)
	es.StartTime, es.PrefixQueries, es.PrefixHits = 1100, 6000, 4500 // restarted; climbed past
	b.SetEngineStats(es)
	if r := b.EngineCache().HitRate; !math.IsNaN(r) {
		t.Fatalf("hit rate %v from a window spanning a restart; want none (NaN)", r)
	}
	es.PrefixQueries, es.PrefixHits = 7000, 4750
	b.SetEngineStats(es)
	if r := b.EngineCache().HitRate; math.Abs(r-0.25) > 1e-9 {
		t.Fatalf("hit rate after the restart %v, want 0.25 (250 of 1000 tokens since it)", r)
	}
}

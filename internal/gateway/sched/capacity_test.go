package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/lru"
)

// capacityCases are engines of a capacity the scheduler is not told, and
// the capacities it may then believe: within a factor of two, or for an
// engine that keeps everything, the whole index or a candidate at least as
// large as everything sent.
var capacityCases = []struct {
	name   string
	engine int // blocks
	want   []int
}{
	{"a hundred blocks", 100, []int{64, 128}},
	{"three hundred blocks", 300, []int{256, 512}},
	{"keeps everything", 1 << 20, []int{0, 1024, 2048, 4096}},
}

// TestCapacityLearnt: a backend whose engine is a block-LRU cache of a
// capacity the scheduler is not told, with TTFT proportional to what the
// engine really had to compute. Within a few dozen requests the
// scheduler believes a capacity within a factor of two of the engine's
// (or, for an engine that keeps everything, the whole index or a
// candidate at least as large as everything sent).
func TestCapacityLearnt(t *testing.T) {
	tests := capacityCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBackend(BackendSpec{Name: "a"})
			s := mustNew(t, SLOPredictive, clk, []*Backend{b}) // policies that route by predictions learn it
			const requests = 64
			serveFromLRU(t, s, lru.NewSet[uint64](tt.engine), rand.New(rand.NewPCG(5, 6)), groupPrefixes(), requests,
				func(tk *Ticket, _, prompt, hitTokens int) {
					clk.add(time.Millisecond + time.Duration(prompt-hitTokens)*20*time.Microsecond)
					tk.FirstToken()
					tk.End(OutcomeOK)
				})
			if got := b.CacheCapacity(); !slices.Contains(tt.want, got) {
				t.Errorf("after %d requests: believed capacity %d blocks, want one of %v", requests, got, tt.want)
			}
		})
	}
}

// groupPrompt is request i's prompt: one of 24 groups' 16-block prefix
// then 4 blocks of its own.
func groupPrompt(rng *rand.Rand, prefixes []string, i int) string {
	return prefixes[rng.IntN(len(prefixes))] + strings.Repeat(fmt.Sprintf("unique %06d ", i), 4*DefaultBlockBytes/14+1)[:4*DefaultBlockBytes]
}

// serveFromLRU sends n requests (groupPrompt over prefixes) to s, each
// served by engine, a block-LRU cache standing for the backend's, and
// hands then to answer with the ticket, the request's index, its prompt
// tokens and how many of them engine held.
func serveFromLRU(t *testing.T, s *Scheduler, engine *lru.Set[uint64], rng *rand.Rand, prefixes []string, n int, answer func(tk *Ticket, i, prompt, hitTokens int)) {
	t.Helper()
	for i := range n {
		text := groupPrompt(rng, prefixes, i)
		h := NewBlockHasher(DefaultBlockBytes) // one block ≈ BlockTokens tokens
		h.Text(text)
		blocks := h.Hashes()
		prompt := len(text) / 4
		tk, err := s.Pick(&Request{Model: "m", PromptTokens: prompt, Blocks: blocks})
		if err != nil {
			t.Fatal(err)
		}
		hit := 0
		for hit < len(blocks) && engine.Contains(blocks[hit]) {
			hit++
		}
		for _, h := range slices.Backward(blocks) {
			engine.Touch(h)
		}
		answer(tk, i, prompt, hit*DefaultBlockBytes/4)
	}
}

func groupPrefixes() []string {
	var prefixes []string
	for g := range 24 {
		prefixes = append(prefixes, strings.Repeat(fmt.Sprintf("group %02d ", g), 16*DefaultBlockBytes/9+1)[:16*DefaultBlockBytes])
	}
	return prefixes
}

// TestCapacityFromEngineHits: the engine publishes its prefix-cache
// counters and nothing else, and no TTFT is ever observed: the hit rate
// it counts between scrapes (every 8 requests) finds its capacity within
// a factor of two within a few dozen requests.
func TestCapacityFromEngineHits(t *testing.T) {
	tests := capacityCases
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBackend(BackendSpec{Name: "a"})
			s := mustNew(t, SLOPredictive, clk, []*Backend{b})
			engine := lru.NewSet[uint64](tt.engine)
			rng := rand.New(rand.NewPCG(7, 8))
			prefixes := groupPrefixes()
			var queries, hits float64
			scrape := func() {
				es := UnknownEngineStats()
				es.PrefixQueries, es.PrefixHits = queries, hits
				b.SetEngineStats(es)
			}
			scrape()
			const requests = 64
			serveFromLRU(t, s, engine, rng, prefixes, requests, func(tk *Ticket, i, prompt, hitTokens int) {
				queries += float64(prompt)
				hits += float64(hitTokens)
				tk.End(OutcomeOK) // no first token: no TTFT evidence
				if i%8 == 7 {
					scrape()
				}
			})
			if got := b.CacheCapacity(); !slices.Contains(tt.want, got) {
				t.Errorf("after %d requests: believed capacity %d blocks, want one of %v", requests, got, tt.want)
			}
			if r := b.EngineCache().HitRate; !(r >= 0 && r <= 1) {
				t.Errorf("observed hit rate %v, want one in [0, 1]", r)
			}
		})
	}
}

// TestCapacityBoundedByEngine: an engine that publishes its KV size is
// believed to cache no more than the smallest candidate holding it, from
// the start and whatever the TTFTs say (here those of an engine that
// recomputes nothing, which alone would have the full index believed).
func TestCapacityBoundedByEngine(t *testing.T) {
	tests := []struct {
		name   string
		tokens float64 // published KV capacity
		want   int     // believed capacity bound, blocks (0: the full index)
	}{
		{"96 blocks of 64 tokens", 96 * 64, 128},
		{"exactly 256 index blocks", 256 * 64, 256},
		{"more than the largest candidate", 1e7, 0},
		{"not published", math.NaN(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBackend(BackendSpec{Name: "a"})
			s := mustNew(t, SLOPredictive, clk, []*Backend{b})
			es := UnknownEngineStats()
			es.CacheTokens = tt.tokens
			b.SetEngineStats(es)
			if got := b.CacheCapacity(); got != tt.want {
				t.Errorf("before any request: believed %d blocks, want %d", got, tt.want)
			}
			if got := b.EngineCache().Tokens; !(got == tt.tokens || math.IsNaN(got) && math.IsNaN(tt.tokens)) {
				t.Errorf("EngineCache().Tokens = %v, want %v", got, tt.tokens)
			}
			rng := rand.New(rand.NewPCG(9, 10))
			prefixes := groupPrefixes()
			for i := range 64 {
				text := groupPrompt(rng, prefixes, i)
				h := NewBlockHasher(DefaultBlockBytes)
				h.Text(text)
				tk, err := s.Pick(&Request{Model: "m", PromptTokens: len(text) / 4, Blocks: h.Hashes()})
				if err != nil {
					t.Fatal(err)
				}
				clk.add(time.Millisecond)
				tk.FirstToken()
				tk.End(OutcomeOK)
			}
			got := b.CacheCapacity()
			if tt.want > 0 && (got == 0 || got > tt.want) {
				t.Errorf("after 64 requests: believed %d blocks, want at most %d", got, tt.want)
			}
		})
	}
}

// The hit rate between two scrapes comes from the counters' deltas; a
// first scrape, an idle interval or counters that went down (a restart)
// give none.
func TestEngineHitWindow(t *testing.T) {
	b := NewBackend(BackendSpec{Name: "a"})
	steps := []struct {
		q, h float64
		want float64 // NaN: still unknown
	}{
		{100, 50, math.NaN()}, // first scrape: a baseline
		{300, 200, 0.75},      // 150 of 200
		{300, 200, 0.75},      // idle: the last rate stays
		{10, 0, 0.75},         // restart: a new baseline
		{110, 10, 0.1},
	}
	for i, st := range steps {
		es := UnknownEngineStats()
		es.PrefixQueries, es.PrefixHits = st.q, st.h
		b.SetEngineStats(es)
		got := b.EngineCache().HitRate
		if !(got == st.want || math.IsNaN(got) && math.IsNaN(st.want)) {
			t.Errorf("scrape %d (%v queries, %v hits): hit rate %v, want %v", i, st.q, st.h, got, st.want)
		}
	}
}

// TestCapacityLearntFromReportedHits: the same engines, but no TTFT is
// ever observed (answers not streamed, say); the only evidence is the
// cached tokens each answer's usage reports (Ticket.ObserveCached). The
// scheduler believes a capacity within a factor of two of the engine's
// as it does from TTFTs; without the reports it keeps the whole index.
func TestCapacityLearntFromReportedHits(t *testing.T) {
	for _, tt := range capacityCases {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBackend(BackendSpec{Name: "a"})
			s := mustNew(t, SLOPredictive, clk, []*Backend{b})
			const requests = 64
			serveFromLRU(t, s, lru.NewSet[uint64](tt.engine), rand.New(rand.NewPCG(5, 6)), groupPrefixes(), requests,
				func(tk *Ticket, _, prompt, hitTokens int) {
					clk.add(time.Millisecond)
					tk.ObserveCached(hitTokens, prompt)
					tk.End(OutcomeOK)
				})
			if got := b.CacheCapacity(); !slices.Contains(tt.want, got) {
				t.Errorf("after %d requests: believed capacity %d blocks, want one of %v", requests, got, tt.want)
			}
		})
	}
}

// The fill of a cache whose size the engine publishes counts the groups
// placed there in an index at least that large, whichever smaller
// capacity is believed: five groups of 16 blocks in an engine of 96 fill
// it past fillLimit when 64 blocks are believed as when 128 are.
func TestFillReadAtEngineSize(t *testing.T) {
	const groupBlocks = 16
	for _, believed := range []int{1, 2} { // capacityHypotheses: 64, 128
		t.Run(fmt.Sprint(capacityHypotheses[believed], " believed"), func(t *testing.T) {
			b := NewBackend(BackendSpec{Name: "a"})
			es := UnknownEngineStats()
			es.CacheTokens = 96 * DefaultBlockBytes / 4
			b.SetEngineStats(es)
			for g := range 5 {
				blocks := make([]uint64, groupBlocks)
				for i := range blocks {
					blocks[i] = uint64(g*1000 + i + 1)
				}
				b.caps.insertRoot(blocks)
			}
			b.caps.active.Store(int32(believed))
			want := float64(5*groupBlocks+groupBlocks) / 96
			if got := b.caps.fill(groupBlocks); math.Abs(got-want) > 1e-9 {
				t.Errorf("fill with a sixth group: %.2f, want %.2f", got, want)
			}
		})
	}
}

package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/lru"
)

// TestCapacityLearnt: a backend whose engine is a block-LRU cache of a
// capacity the scheduler is not told, with TTFT proportional to what the
// engine really had to compute. Within a few dozen requests the
// scheduler believes a capacity within a factor of two of the engine's
// (or, for an engine that keeps everything, the whole index or a
// candidate at least as large as everything sent).
func TestCapacityLearnt(t *testing.T) {
	tests := []struct {
		name   string
		engine int // blocks
		want   []int
	}{
		{"a hundred blocks", 100, []int{64, 128}},
		{"three hundred blocks", 300, []int{256, 512}},
		{"keeps everything", 1 << 20, []int{0, 1024, 2048, 4096}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBackend(BackendSpec{Name: "a"})
			s := mustNew(t, SLOPredictive, clk, []*Backend{b}) // policies that route by predictions learn it
			engine := lru.NewSet[uint64](tt.engine)
			rng := rand.New(rand.NewPCG(5, 6))
			var prefixes []string
			for g := range 24 {
				prefixes = append(prefixes, strings.Repeat(fmt.Sprintf("group %02d ", g), 16*DefaultBlockBytes/9+1)[:16*DefaultBlockBytes])
			}
			const requests = 64
			for i := range requests {
				text := prefixes[rng.IntN(len(prefixes))] + strings.Repeat(fmt.Sprintf("unique %06d ", i), 4*DefaultBlockBytes/14+1)[:4*DefaultBlockBytes]
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
				uncached := prompt - hit*DefaultBlockBytes/4
				clk.add(time.Millisecond + time.Duration(uncached)*20*time.Microsecond)
				tk.FirstToken()
				tk.End(OutcomeOK)
			}
			if got := b.CacheCapacity(); !slices.Contains(tt.want, got) {
				t.Errorf("after %d requests: believed capacity %d blocks, want one of %v", requests, got, tt.want)
			}
		})
	}
}

package sched

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestBlockHasherChains(t *testing.T) {
	sys := strings.Repeat("s", 300)
	h := NewBlockHasher(100)
	h.Segment("system", sys)
	h.Segment("user", "hello there, this is a question that is long enough to fill a block or two....................................")
	a := slices.Clone(h.Hashes())
	h.Reset()
	h.Segment("system", sys)
	h.Segment("user", "a different question, also long enough to fill a block or two................................................")
	b := slices.Clone(h.Hashes())
	if len(a) < 4 || len(b) < 4 {
		t.Fatalf("too few blocks: %d %d", len(a), len(b))
	}
	if !slices.Equal(a[:3], b[:3]) {
		t.Fatal("shared 300-byte system prompt: first three blocks differ")
	}
	if a[3] == b[3] {
		t.Fatal("differing user text: block 3 equal")
	}
	// Segment boundaries matter.
	h.Reset()
	h.Segment("user", strings.Repeat("ab", 60))
	x := slices.Clone(h.Hashes())
	h.Reset()
	h.Segment("usera", "b"+strings.Repeat("ab", 59))
	if slices.Equal(x, h.Hashes()) {
		t.Fatal("role/content boundary not part of the hash")
	}
}

// TestPrefixIndexLRU checks the index against a naive LRU model on random
// operations (a property test with a fixed seed).
func TestPrefixIndexLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const capacity = 50
	p := NewPrefixIndex(capacity)
	var model []uint64 // most recent first
	// Prompts are prefixes of a few chained block sequences, as real
	// prompts sharing system prompts and conversation history are; block
	// hashes are unique per (sequence, position) since hashes are chained.
	seqs := make([][]uint64, 6)
	for k := range seqs {
		for i := range 30 {
			seqs[k] = append(seqs[k], uint64(k*1000+i))
		}
		if k%2 == 1 {
			// Odd sequences share their first 5 blocks with the previous one.
			copy(seqs[k], seqs[k-1][:5])
		}
	}
	for step := range 20000 {
		hs := seqs[rng.IntN(len(seqs))][:rng.IntN(30)+1]
		if rng.IntN(2) == 0 {
			p.Insert(hs)
			for i := len(hs) - 1; i >= 0; i-- {
				if k := slices.Index(model, hs[i]); k >= 0 {
					model = slices.Delete(model, k, k+1)
				}
				model = slices.Insert(model, 0, hs[i])
				if len(model) > capacity {
					model = model[:capacity]
				}
			}
		} else {
			want := 0
			for _, h := range hs {
				if !slices.Contains(model, h) {
					break
				}
				want++
			}
			if got := p.Match(hs); got != want {
				t.Fatalf("step %d: Match=%d want %d", step, got, want)
			}
		}
		if p.Len() != len(model) {
			t.Fatalf("step %d: Len=%d want %d", step, p.Len(), len(model))
		}
	}
	p.Clear()
	if p.Len() != 0 || p.Match([]uint64{model[0]}) != 0 {
		t.Fatal("Clear left entries")
	}
}

func FuzzBlockHasher(f *testing.F) {
	f.Add("system prompt", "user text", 7)
	f.Fuzz(func(t *testing.T, a, b string, split int) {
		// Property: hashing is independent of how Text calls split the input.
		h1 := NewBlockHasher(16)
		h1.Text(a + b)
		h2 := NewBlockHasher(16)
		s := a + b
		if split < 0 {
			split = -split
		}
		split %= len(s) + 1
		h2.Text(s[:split])
		h2.Text(s[split:])
		if !slices.Equal(h1.Hashes(), h2.Hashes()) || h1.Bytes() != h2.Bytes() || len(h1.Hashes()) != len(s)/16 {
			t.Fatalf("split %d changed hashes", split)
		}
	})
}

// A group's root counts in RootBlocks while the index holds its first
// block, and goes with it: evicted (the LRU let it go) or cleared.
func TestPrefixIndexRoots(t *testing.T) {
	p := NewPrefixIndex(10)
	seq := func(k, n int) []uint64 {
		var hs []uint64
		for i := range n {
			hs = append(hs, uint64(k*100+i))
		}
		return hs
	}
	p.InsertRoot(seq(1, 4))
	p.InsertRoot(seq(1, 6)) // the same group again: counted once
	p.Insert(seq(2, 3))     // not a new group here
	if got := p.RootBlocks(); got != 4 {
		t.Fatalf("after one group of 4 blocks: RootBlocks %d, want 4", got)
	}
	p.InsertRoot(seq(3, 3))
	if got := p.RootBlocks(); got != 7 {
		t.Fatalf("after two groups of 4 and 3 blocks: RootBlocks %d, want 7", got)
	}
	// Held now, most recent first: 300-302, 200-202, 100-103. Two more
	// blocks of group 3 evict group 1's last two; its root (block 100,
	// touched last of its prompt) goes only when it is the least recent
	// block left.
	p.Insert(seq(3, 5))
	if got := p.RootBlocks(); got != 7 || !p.set.Contains(100) {
		t.Fatalf("group 1's first block held: RootBlocks %d, want 7", got)
	}
	p.Insert(seq(4, 2))
	if got := p.RootBlocks(); got != 3 || p.set.Contains(100) {
		t.Fatalf("group 1's first block evicted: RootBlocks %d, want 3 (group 3)", got)
	}
	// A prompt longer than the index counts as much as the index holds.
	p.InsertRoot(seq(5, 30))
	if got := p.RootBlocks(); got != 10 {
		t.Fatalf("a 30-block group in a 10-block index: RootBlocks %d, want 10", got)
	}
	p.Clear()
	if got := p.RootBlocks(); got != 0 {
		t.Fatalf("after Clear: RootBlocks %d", got)
	}
}

package sched

import (
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/ttft-dev/ttft/internal/lru"
)

// DefaultBlockBytes is the size of one hashed prompt block: 256 bytes is
// about 64 tokens of English, a few of vLLM's 16-token KV blocks. Finer blocks
// cost more map lookups per decision for little extra precision, since the
// index only approximates what the engine really keeps.
const DefaultBlockBytes = 256

// BlockHasher turns a prompt into chained block hashes: block i's hash covers
// every byte before it, so two prompts share block i's hash only if they
// share the whole prefix up to its end (the same rule as vLLM's prefix cache).
//
// Prompts are canonicalised as a sequence of (role, text) segments, so an
// OpenAI request with a system message and an Anthropic request with the same
// "system" field and messages hash alike, as do content strings and arrays of
// text parts. Only full blocks are hashed; a trailing partial block is not
// cacheable on the engine either.
type BlockHasher struct {
	blockBytes int
	buf        []byte
	prev       uint64
	hashes     []uint64
	total      int
}

// NewBlockHasher returns a hasher with the given block size (DefaultBlockBytes
// when blockBytes <= 0).
func NewBlockHasher(blockBytes int) *BlockHasher {
	if blockBytes <= 0 {
		blockBytes = DefaultBlockBytes
	}
	return &BlockHasher{blockBytes: blockBytes, buf: make([]byte, 0, blockBytes)}
}

// Reset clears the hasher for reuse, keeping its buffers.
func (h *BlockHasher) Reset() {
	h.buf = h.buf[:0]
	h.prev = 0
	h.hashes = h.hashes[:0]
	h.total = 0
}

// Segment adds one message: its role then its text. The separators are
// control bytes that do not occur in ordinary text, so ("a","bc") and
// ("ab","c") hash differently.
func (h *BlockHasher) Segment(role, text string) {
	h.write(role)
	h.write("\x1f")
	h.write(text)
	h.write("\x1e")
}

// Text adds raw text (the completions API's prompt).
func (h *BlockHasher) Text(text string) { h.write(text) }

func (h *BlockHasher) write(s string) {
	h.total += len(s)
	for len(s) > 0 {
		n := min(h.blockBytes-len(h.buf), len(s))
		h.buf = append(h.buf, s[:n]...)
		s = s[n:]
		if len(h.buf) == h.blockBytes {
			h.prev = chain(h.prev, xxhash.Sum64(h.buf))
			h.hashes = append(h.hashes, h.prev)
			h.buf = h.buf[:0]
		}
	}
}

// chain mixes the previous block's hash into this block's (a 64-bit
// multiply-xorshift, cheap and well distributed).
func chain(prev, cur uint64) uint64 {
	x := prev*0x9E3779B97F4A7C15 ^ cur
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return x
}

// Hashes returns the chained hashes of the full blocks so far. The slice is
// the hasher's own; copy it to keep it past Reset.
func (h *BlockHasher) Hashes() []uint64 { return h.hashes }

// Bytes is the canonical prompt length in bytes.
func (h *BlockHasher) Bytes() int { return h.total }

// PrefixIndex is an approximate, bounded record of which prompt blocks one
// backend has probably cached: the blocks of prompts recently sent to it,
// evicted least-recently-used beyond its capacity (roughly the backend's KV
// capacity in blocks). It is approximate because the engine evicts by its
// own rules; it only has to be right often enough to steer affinity.
type PrefixIndex struct {
	mu  sync.Mutex
	set *lru.Set[uint64]
	// roots are the first blocks of the prompt groups placed here
	// (InsertRoot), each with its first prompt's size in blocks, for as
	// long as the index holds the block; rootBlocks sums the sizes: the
	// cache the groups living here take (their footprint).
	roots      map[uint64]int
	rootBlocks int
}

// NewPrefixIndex returns an index holding at most capacity block hashes.
func NewPrefixIndex(capacity int) *PrefixIndex {
	return &PrefixIndex{set: lru.NewSet[uint64](capacity), roots: make(map[uint64]int)}
}

// Len is the number of blocks held.
func (p *PrefixIndex) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set.Len()
}

// Match returns how many leading blocks of hashes are in the index. It does
// not touch recency: looking is not using.
//
// It binary-searches instead of scanning: Insert touches a prompt's blocks
// last to first, so every block is at least as recent as the blocks after
// it in any prompt that contains it, and LRU eviction therefore always
// removes a suffix of each chain first. Presence is monotone along chained
// hashes, and log2(n) lookups find the boundary (5 instead of 32 for an
// 8 KB prompt, per backend, per decision).
func (p *PrefixIndex) Match(hashes []uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := 0, len(hashes)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if p.set.Contains(hashes[mid-1]) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Insert records that the backend now holds every block of hashes, making
// them the most recently used (the first block last, so that shared system
// prompts, touched by every request, are evicted last).
func (p *PrefixIndex) Insert(hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.insert(hashes)
}

func (p *PrefixIndex) insert(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		if ev, ok := p.set.Touch(hashes[i]); ok && len(p.roots) > 0 {
			if n, root := p.roots[ev]; root {
				delete(p.roots, ev)
				p.rootBlocks -= n
			}
		}
	}
}

// InsertRoot is Insert for a prompt that starts a prompt group here (none
// of it was held): its first block becomes the group's root, counted in
// RootBlocks with the prompt's size until the index lets the block go.
// The first block is touched by every prompt of the group, so it stays
// while the group is in use here and goes when the group does.
func (p *PrefixIndex) InsertRoot(hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.insert(hashes)
	if len(hashes) == 0 {
		return
	}
	if _, dup := p.roots[hashes[0]]; dup || !p.set.Contains(hashes[0]) {
		return
	}
	n := min(len(hashes), p.set.Cap())
	p.roots[hashes[0]] = n
	p.rootBlocks += n
}

// RootBlocks is the footprint of the prompt groups placed here that the
// index still holds: the sum of their first prompts' sizes in blocks.
func (p *PrefixIndex) RootBlocks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rootBlocks
}

// Clear forgets everything (the backend restarted).
func (p *PrefixIndex) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set.Clear()
	clear(p.roots)
	p.rootBlocks = 0
}

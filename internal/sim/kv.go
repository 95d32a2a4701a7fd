package sim

import (
	"slices"

	"github.com/ttft-dev/ttft/internal/lru"
)

// kvCache is a paged KV cache with vLLM-v1-style prefix caching. Blocks are
// indices into parallel arrays (no per-block allocation). A block is either
// held (refcount > 0) or in the free queue; a freed block keeps its hash, so
// a later request with the same prefix can take it back out of the queue (a
// prefix-cache hit) until it is reused for something else (LRU eviction:
// allocation pops the queue's head, the least recently freed block).
type kvCache struct {
	blockSize int
	ref       []int32
	hash      []uint64
	hashed    []bool
	// queue is the free queue, least recently freed block at the front;
	// a block is in it exactly when no sequence holds it.
	queue lru.List

	cache map[uint64]int32 // block hash -> block holding it

	// Counters in tokens, as vLLM's prefix_cache_queries/hits are.
	queries, hits int64
}

func newKVCache(numBlocks, blockSize int) *kvCache {
	k := &kvCache{
		blockSize: blockSize,
		ref:       make([]int32, numBlocks),
		hash:      make([]uint64, numBlocks),
		hashed:    make([]bool, numBlocks),
		queue:     *lru.NewList(numBlocks),
		cache:     make(map[uint64]int32),
	}
	for i := 0; i < numBlocks; i++ {
		k.queue.PushBack(int32(i))
	}
	return k
}

func (k *kvCache) numBlocks() int { return len(k.ref) }

// usage is the fraction of blocks held by running sequences (vLLM's
// kv_cache_usage_perc counts cached-but-free blocks as free).
func (k *kvCache) usage() float64 {
	if len(k.ref) == 0 {
		return 0
	}
	return 1 - float64(k.numFree())/float64(len(k.ref))
}

// numFree is the number of blocks in the free queue.
func (k *kvCache) numFree() int { return k.queue.Len() }

// inFree reports whether block b is in the free queue.
func (k *kvCache) inFree(b int32) bool { return k.queue.Contains(b) }

// popHead takes the least recently freed block, evicting its cached hash.
func (k *kvCache) popHead() int32 {
	b := k.queue.Front()
	k.queue.Remove(b)
	if k.hashed[b] {
		if k.cache[k.hash[b]] == b {
			delete(k.cache, k.hash[b])
		}
		k.hashed[b] = false
	}
	k.ref[b] = 1
	return b
}

// lookup returns how many of the leading full blocks (hashes) are cached.
// It never matches the whole prompt: at least one token must be computed to
// produce logits, as in vLLM.
func (k *kvCache) lookup(hashes []uint64, promptLen int) int {
	limit := (promptLen - 1) / k.blockSize
	if limit > len(hashes) {
		limit = len(hashes)
	}
	n := 0
	for n < limit {
		if _, ok := k.cache[hashes[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// cover is lookup under evict:F: it walks the leading full blocks while
// each is cached (kept) or was dropped by eviction (in evicted), and
// returns how many it covered and how many of those are cached. A block
// that is neither ends the walk, as a prefix-cache miss does.
func (k *kvCache) cover(hashes []uint64, promptLen int, evicted map[uint64]struct{}) (covered, kept int) {
	limit := min((promptLen-1)/k.blockSize, len(hashes))
	for covered < limit {
		h := hashes[covered]
		if _, ok := k.cache[h]; ok {
			kept++
		} else if _, ok := evicted[h]; !ok {
			break
		}
		covered++
	}
	return covered, kept
}

// acquireCached takes references on the cached blocks among the first n
// of s.hashes and appends them to s.blocks; an evicted block (not cached,
// see cover) gets a -1 slot so that slots keep matching prompt positions.
func (k *kvCache) acquireCached(s *Seq, n int) {
	for i := 0; i < n; i++ {
		b, ok := k.cache[s.hashes[i]]
		if !ok {
			s.blocks = append(s.blocks, -1)
			continue
		}
		if k.queue.Contains(b) {
			k.queue.Remove(b)
		}
		k.ref[b]++
		s.blocks = append(s.blocks, b)
	}
	s.numHashedBlocks = n
}

// allocate grows s.blocks to hold total tokens; it fails without side
// effects when there are not enough free blocks.
func (k *kvCache) allocate(s *Seq, total int) bool {
	need := (total+k.blockSize-1)/k.blockSize - len(s.blocks)
	if need <= 0 {
		return true
	}
	if need > k.queue.Len() {
		return false
	}
	for i := 0; i < need; i++ {
		s.blocks = append(s.blocks, k.popHead())
	}
	return true
}

// commit registers the hashes of s's newly computed full blocks (prompt,
// then output as extendChain hashes them) so that later requests can hit
// them.
func (k *kvCache) commit(s *Seq) {
	full := s.numComputed / k.blockSize
	if full > len(s.hashes) {
		full = len(s.hashes)
	}
	for j := s.numHashedBlocks; j < full; j++ {
		h := s.hashes[j]
		b := s.blocks[j]
		if b < 0 {
			continue // released by a sliding window or evicted
		}
		if _, dup := k.cache[h]; !dup && !k.hashed[b] {
			k.hash[b], k.hashed[b] = h, true
			k.cache[h] = b
		}
	}
	if full > s.numHashedBlocks {
		s.numHashedBlocks = full
	}
}

// free drops s's references. Blocks go to the queue's tail in reverse order
// so that a sequence's last blocks (least likely shared) are evicted first.
func (k *kvCache) free(s *Seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		b := s.blocks[i]
		if b < 0 {
			continue // already released by a sliding window, or evicted
		}
		k.ref[b]--
		if k.ref[b] == 0 {
			k.queue.PushBack(b)
		}
	}
	s.blocks = s.blocks[:0]
	s.numHashedBlocks = 0
	s.numReleased = 0
	s.skipped = 0
}

// slide releases the blocks of s that lie wholly before its last window
// computed tokens: sliding-window attention never reads them again. Their
// slots stay as -1 so that block indices keep matching prompt positions
// (the prefix-cache hashes). Released blocks keep their hashes in the free
// queue, oldest first, so a later turn can still hit them until reused.
func (k *kvCache) slide(s *Seq, window int) {
	drop := min((s.numComputed-window)/k.blockSize, len(s.blocks))
	for j := s.numReleased; j < drop; j++ {
		if b := s.blocks[j]; b >= 0 {
			k.ref[b]--
			if k.ref[b] == 0 {
				k.queue.PushBack(b)
			}
			s.blocks[j] = -1
		}
	}
	s.numReleased = max(s.numReleased, drop)
}

// heldBlocks counts the blocks s holds (released slots excluded).
func (s *Seq) heldBlocks() int {
	n := 0
	for _, b := range s.blocks {
		if b >= 0 {
			n++
		}
	}
	return n
}

// blockHashes computes the hash chain of the full blocks of tokens: each
// block's hash covers its parent's hash and its own token IDs, so equal
// hashes mean equal prefixes.
func blockHashes(tokens []int, blockSize int) []uint64 {
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	parent := hashRoot
	for i := 0; i < n; i++ {
		parent = hashBlock(parent, tokens[i*blockSize:(i+1)*blockSize])
		out[i] = parent
	}
	return out
}

// hashRoot is the parent of a chain's first block.
const hashRoot uint64 = 0xcbf29ce484222325

// hashBlock is one link of the chain: the block's tokens over its parent.
func hashBlock(parent uint64, block []int) uint64 {
	h := parent
	for _, t := range block {
		h = mix64(h ^ uint64(int64(t)))
	}
	return h
}

// outChain continues a sequence's hash chain past its prompt over the
// tokens its conversation's next turn will send in their place: the prompt
// (as the next turn tokenises it, base) followed by the reply, re-tokenised.
// vLLM hashes the blocks that generated tokens fill and caches them like
// prompt blocks, so the next turn, whose prompt carries the reply, hits
// them; the chain here reproduces the hashes that next prompt will have.
type outChain struct {
	words  *OutputTokens
	key    uint64 // the sequence's output word key (OutputWord)
	parent uint64 // hash of the chain's last full block
	pend   []int  // chain tokens after it (fewer than a block)
	next   int    // output tokens consumed into the chain
}

// ChainOutput re-bases s's output blocks for a driver whose next turn does
// not re-send the prompt's tokens as they are: base is the token sequence
// that turn sends before the reply (for a chat prompt, the messages joined
// as the server tokenises them), and words re-tokenise the reply. The
// reply's full blocks are then hashed, and cached once computed, as that
// next prompt will carry them; when base's leading full blocks do not hash
// as the prompt's (the next turn could not reach the reply's blocks
// anyway), the output stays uncached. It does nothing without prefix
// caching. Call it after NewSeq, before the engine first schedules s.
func (s *Seq) ChainOutput(d *Deployment, base []int, words *OutputTokens) {
	if !d.Config.EnablePrefixCaching {
		return
	}
	s.setChain(base, nil, words, d.BlockSize)
}

// setChain makes s's output blocks cacheable: base is the token sequence the
// next turn sends before the reply (normally the prompt itself). Without a
// consistent base (its full blocks must hash as the prompt's do, or the
// next turn could not reach the reply's blocks anyway), output blocks stay
// uncached.
// hs, when not nil, is blockHashes(base) already at hand.
func (s *Seq) setChain(base []int, hs []uint64, words *OutputTokens, blockSize int) {
	s.chain = nil
	s.hashes = s.hashes[:s.promptBlocks]
	if words == nil || len(base) < s.promptBlocks*blockSize {
		return
	}
	if hs == nil {
		hs = blockHashes(base, blockSize)
	}
	if len(hs) < s.promptBlocks || !slices.Equal(hs[:s.promptBlocks], s.hashes) {
		return
	}
	c := &outChain{words: words, key: s.ID, parent: hashRoot}
	if len(hs) > 0 {
		c.parent = hs[len(hs)-1]
	}
	// Full blocks of base past the prompt's (base may be longer by a
	// separator) hash as output blocks: they hold part of the reply's KV.
	s.hashes = append(s.hashes, hs[s.promptBlocks:]...)
	c.pend = append(make([]int, 0, blockSize), base[len(hs)*blockSize:]...)
	s.chain = c
}

// extendChain hashes the blocks that s's new output tokens complete and
// appends them to s.hashes, where commit registers them once computed.
func (s *Seq) extendChain(blockSize int) {
	c := s.chain
	for ; c.next < s.Output; c.next++ {
		c.pend = append(c.pend, c.words.ids[wordIndex(c.key, c.next)]...)
		for len(c.pend) >= blockSize {
			c.parent = hashBlock(c.parent, c.pend[:blockSize])
			s.hashes = append(s.hashes, c.parent)
			c.pend = c.pend[:copy(c.pend, c.pend[blockSize:])]
		}
	}
}

// syntheticHashes stands for a prompt whose tokens are unknown: unique per
// key, so it never shares a prefix with another key.
func syntheticHashes(key uint64, promptLen, blockSize int) []uint64 {
	n := promptLen / blockSize
	out := make([]uint64, n)
	h := mix64(key ^ 0x9e3779b97f4a7c15)
	for i := range out {
		h = mix64(h + uint64(i) + 1)
		out[i] = h
	}
	return out
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

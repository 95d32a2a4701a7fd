package sim

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
	// Free queue: a doubly linked list threaded through prev/next, with
	// sentinel -1. inFree marks membership.
	prev, next []int32
	inFree     []bool
	head, tail int32
	numFree    int

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
		prev:      make([]int32, numBlocks),
		next:      make([]int32, numBlocks),
		inFree:    make([]bool, numBlocks),
		head:      -1,
		tail:      -1,
		cache:     make(map[uint64]int32),
	}
	for i := 0; i < numBlocks; i++ {
		k.pushTail(int32(i))
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
	return 1 - float64(k.numFree)/float64(len(k.ref))
}

func (k *kvCache) pushTail(b int32) {
	k.prev[b], k.next[b] = k.tail, -1
	if k.tail >= 0 {
		k.next[k.tail] = b
	} else {
		k.head = b
	}
	k.tail = b
	k.inFree[b] = true
	k.numFree++
}

func (k *kvCache) unlink(b int32) {
	p, n := k.prev[b], k.next[b]
	if p >= 0 {
		k.next[p] = n
	} else {
		k.head = n
	}
	if n >= 0 {
		k.prev[n] = p
	} else {
		k.tail = p
	}
	k.inFree[b] = false
	k.numFree--
}

// popHead takes the least recently freed block, evicting its cached hash.
func (k *kvCache) popHead() int32 {
	b := k.head
	k.unlink(b)
	if k.hashed[b] {
		if k.cache[k.hash[b]] == b {
			delete(k.cache, k.hash[b])
		}
		k.hashed[b] = false
	}
	k.ref[b] = 1
	return b
}

// pushHead puts b at the front of the free queue: the next block reused.
func (k *kvCache) pushHead(b int32) {
	k.prev[b], k.next[b] = -1, k.head
	if k.head >= 0 {
		k.prev[k.head] = b
	} else {
		k.tail = b
	}
	k.head = b
	k.inFree[b] = true
	k.numFree++
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
		if k.inFree[b] {
			k.unlink(b)
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
	if need > k.numFree {
		return false
	}
	for i := 0; i < need; i++ {
		s.blocks = append(s.blocks, k.popHead())
	}
	return true
}

// commit registers the hashes of s's newly completed full prompt blocks so
// that later requests can hit them.
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
			k.pushTail(b)
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
				k.pushTail(b)
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
	var parent uint64 = 0xcbf29ce484222325
	for i := 0; i < n; i++ {
		h := parent
		for _, t := range tokens[i*blockSize : (i+1)*blockSize] {
			h = mix64(h ^ uint64(int64(t)))
		}
		out[i] = h
		parent = h
	}
	return out
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

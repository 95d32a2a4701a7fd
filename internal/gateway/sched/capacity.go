package sched

import (
	"math"
	"sync"
	"sync/atomic"
)

// The gateway is not told how much of a prompt each backend really keeps
// cached: its prefix index remembers every block it sent (up to
// PrefixBlocks, 65,536 by default), while an engine's cache may hold a
// hundred. Believing the index, a predictor prices requests as hits that
// are misses, so a latency-seeking policy spreads every prompt group over
// every backend and thrashes caches smaller than the working set.
//
// capacityModel learns a backend's effective cache capacity from the
// TTFTs it observes, by model selection: it keeps one LRU index per
// candidate capacity (capacityHypotheses, in the index's blocks) — exact,
// since an LRU of capacity C holds precisely the C most recently touched
// blocks — and one small TTFT model per candidate (seconds per token of
// work, the work being the queued and own uncached tokens that candidate
// predicts), and believes the candidate whose model has predicted the
// observed TTFTs best (least mean absolute log error). Every candidate
// learns from every request, so the choice is made within a few dozen
// requests of a cold start, and it follows a backend whose cache shrinks
// (another tenant) or grows.
//
// Where the engine publishes its cache (SetEngineStats), two more facts
// enter: its KV size bounds the candidates (a backend cannot cache more
// than its KV holds, so the largest candidate believed is the smallest
// one holding it, also before any TTFT), and the prefix-cache hit rate it
// counted between two scrapes is scored against the hit rate each
// candidate predicted for the requests sent in that interval, an error
// added to the TTFT models' (observeHitRate). Where a backend reports in
// each answer how many prompt tokens its cache held (usage's cached
// tokens), that share is scored against each candidate's prediction for
// the request (observeCached): the same evidence without a metrics
// endpoint, and free of a scrape window's approximate edges.
type capacityModel struct {
	mu   sync.Mutex
	sets [nCap]*PrefixIndex
	rate [nCap]float64 // seconds per token of work, EWMA
	err  [nCap]float64 // mean absolute log error, EWMA
	n    int
	// queued is each candidate's uncached tokens of requests awaiting
	// their first token.
	queued [nCap]atomic.Int64
	// active is the candidate believed (nCap: none yet, use the full
	// index).
	active atomic.Int32

	// What the engine publishes (SetEngineStats). engineTokens is its KV
	// capacity in tokens (float64 bits, NaN unknown) and blockTokens the
	// scheduler's tokens per index block, which convert it to blocks.
	engineTokens atomic.Uint64
	blockTokens  atomic.Int64
	// winPrompt and winHit: prompt tokens dispatched since the engine's
	// last scrape, and the tokens of them each candidate predicted as
	// hits; hitErr: each candidate's mean absolute error of the engine's
	// hit rate (EWMA, under mu), over nHit scrape windows.
	winPrompt atomic.Int64
	winHit    [nCap]atomic.Int64
	hitErr    [nCap]float64
	nHit      int
	// reqErr: each candidate's mean absolute error of the hit share
	// backends report request by request (observeCached; EWMA, under mu),
	// over nReq requests.
	reqErr [nCap]float64
	nReq   int
}

// hitMinWindows is how many scrape windows of hit-rate evidence count as
// enough to choose a candidate on (with or before capacityMinSamples
// TTFTs): each window sums every request sent in a scrape interval.
const hitMinWindows = 3

// hitMinTokens is the fewest prompt tokens a scrape window must have seen
// dispatched to count: a window with one short request says little.
const hitMinTokens = 256

// capacityHypotheses are the candidate capacities in index blocks (of
// DefaultBlockBytes, ≈ 64 tokens): 2 k to 256 k tokens, doubling; the
// full index (PrefixBlocks) is the last candidate.
var capacityHypotheses = [...]int{32, 64, 128, 256, 512, 1024, 2048, 4096}

const nCap = len(capacityHypotheses) + 1

// capacityMinSamples is how many TTFTs the candidates must have predicted
// before one is believed over the full index.
const capacityMinSamples = 16

func newCapacityModel(full *PrefixIndex) *capacityModel {
	m := &capacityModel{}
	for i, c := range capacityHypotheses {
		m.sets[i] = NewPrefixIndex(c)
	}
	m.sets[nCap-1] = full
	m.active.Store(int32(nCap - 1))
	m.engineTokens.Store(math.Float64bits(math.NaN()))
	m.blockTokens.Store(DefaultBlockBytes / 4)
	return m
}

// maxCandidate is the largest candidate the engine's published KV
// capacity allows: the smallest at least as large as it (the conversion
// from tokens to index blocks is an estimate, so the bound rounds up to
// the next candidate), or the full index when none is or the engine
// publishes nothing. A backend cannot cache more than its KV holds.
func (m *capacityModel) maxCandidate() int {
	t := math.Float64frombits(m.engineTokens.Load())
	if !(t > 0) {
		return nCap - 1
	}
	blocks := t / float64(m.blockTokens.Load())
	for i, c := range capacityHypotheses {
		if float64(c) >= blocks {
			return i
		}
	}
	return nCap - 1
}

// setEngineTokens records the engine's KV capacity (NaN: unknown) and
// brings the believed candidate within it.
func (m *capacityModel) setEngineTokens(tokens float64) {
	if old := math.Float64frombits(m.engineTokens.Swap(math.Float64bits(tokens))); old == tokens || (math.IsNaN(old) && math.IsNaN(tokens)) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.choose()
}

// capacityEstimate is a snapshot of what the backend is believed to cache.
type capacityEstimate struct {
	blocks int // believed capacity in index blocks (0: unknown, the full index)
}

// insert records the prompt's blocks in every candidate's index but the
// full one (Pick inserts into that).
func (m *capacityModel) insert(blocks []uint64) {
	for i := range nCap - 1 {
		m.sets[i].Insert(blocks)
	}
}

// insertRoot is insert for a prompt that starts a prompt group on the
// backend (PrefixIndex.InsertRoot).
func (m *capacityModel) insertRoot(blocks []uint64) {
	for i := range nCap - 1 {
		m.sets[i].InsertRoot(blocks)
	}
}

// fill is the share of the backend's cache that the prompt groups placed
// on it would take with one more of n blocks: their footprint in the
// believed index (PrefixIndex.RootBlocks) over the cache's capacity in
// blocks, the engine's KV size where it publishes one, else the learnt
// capacity; 0 while neither is known (a cache believed to hold
// everything the index does is never full).
//
// Where the engine publishes its size, the footprint is read from the
// smallest candidate index that holds as much (maxCandidate), whichever
// candidate is believed: the believed one can be smaller than the KV
// (what the engine's running requests take from its prefix cache, or
// between two candidates, 64 and 128 blocks for an engine of 96), and
// its index then has dropped the roots of groups the engine still
// holds. Read from the 64-block index, a stand-in of 96 blocks serving
// six groups of 16 read a fill of 0.19 and was taken for empty: new
// groups and spills were sent to it (fleet shared-prefill,
// docs/routing-evaluation.md, "Room for new groups, and the price of an
// eviction").
func (m *capacityModel) fill(n int) float64 {
	a := int(m.active.Load())
	capBlocks := 0.0
	if t := math.Float64frombits(m.engineTokens.Load()); t > 0 {
		capBlocks = t / float64(max(m.blockTokens.Load(), 1))
		a = m.maxCandidate()
	} else if a < nCap-1 {
		capBlocks = float64(capacityHypotheses[a])
	}
	if capBlocks <= 0 {
		return 0
	}
	return float64(m.sets[a].RootBlocks()+n) / capBlocks
}

// forgetCached empties every candidate's index (the full one is the
// backend's, cleared by its owner) and the hit-rate window: the engine
// restarted with an empty cache, and a window spanning the restart
// compares counters of two processes. What was learnt about the cache's
// size and the backend's speed is kept: a restart changes neither.
func (m *capacityModel) forgetCached() {
	for i := range nCap - 1 {
		m.sets[i].Clear()
	}
	m.winPrompt.Store(0)
	for i := range nCap {
		m.winHit[i].Store(0)
	}
}

// uncached returns each candidate's uncached tokens for a prompt.
// It also counts the prompt in the hit-rate window (observeHitRate).
func (m *capacityModel) uncached(blocks []uint64, promptTokens, blockTokens int) (u [nCap]int64) {
	if blockTokens > 0 && m.blockTokens.Swap(int64(blockTokens)) != int64(blockTokens) {
		m.mu.Lock()
		m.choose()
		m.mu.Unlock()
	}
	m.winPrompt.Add(int64(promptTokens))
	for i := range nCap {
		u[i] = int64(max(promptTokens-m.sets[i].Match(blocks)*blockTokens, 0))
		m.winHit[i].Add(int64(promptTokens) - u[i])
	}
	return u
}

// activeMatch is how many leading blocks the believed capacity holds.
func (m *capacityModel) activeMatch(blocks []uint64) int {
	return m.sets[m.active.Load()].Match(blocks)
}

// dispatched counts a request's uncached tokens in each candidate's queue
// and returns the work each candidate predicts for it.
func (m *capacityModel) dispatched(u [nCap]int64) (work [nCap]float64) {
	for i := range nCap {
		work[i] = float64(m.queued[i].Add(u[i])) + overheadTokens
	}
	return work
}

// firstToken takes the request out of the candidates' queues.
func (m *capacityModel) firstToken(u [nCap]int64) {
	for i := range nCap {
		m.queued[i].Add(-u[i])
	}
}

// observe scores each candidate's prediction of a TTFT (work at dispatch
// times its rate), learns the rates and picks the best candidate.
func (m *capacityModel) observe(work [nCap]float64, ttft float64) {
	if !(ttft > 0) || math.IsInf(ttft, 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	const alpha = 0.1
	for i := range nCap {
		s := ttft / work[i]
		if m.n > 0 {
			e := math.Abs(math.Log(m.rate[i] * work[i] / ttft))
			if m.n == 1 {
				m.err[i] = e
			} else {
				m.err[i] += alpha * (e - m.err[i])
			}
			m.rate[i] += alpha * (s - m.rate[i])
		} else {
			m.rate[i] = s
		}
	}
	m.n++
	m.choose()
}

// observeHitRate scores each candidate's prediction of the hit rate the
// engine counted over a scrape window (the share of the prompt tokens
// dispatched since the previous scrape that the candidate's index held)
// and picks the best candidate. It is direct evidence of the cache's
// contents, free of the queueing and speed that blur TTFTs; it is
// approximate in where a window ends (a request dispatched just before a
// scrape is counted by the engine after it) and in granularity (the
// engine hits by its own blocks), errors every candidate shares.
func (m *capacityModel) observeHitRate(rate float64) {
	prompt := m.winPrompt.Swap(0)
	var hit [nCap]int64
	for i := range nCap {
		hit[i] = m.winHit[i].Swap(0)
	}
	if prompt < hitMinTokens || !(rate >= 0 && rate <= 1) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	const alpha = 0.2
	for i := range nCap {
		e := math.Abs(float64(hit[i])/float64(prompt) - rate)
		if m.nHit == 0 {
			m.hitErr[i] = e
		} else {
			m.hitErr[i] += alpha * (e - m.hitErr[i])
		}
	}
	m.nHit++
	m.choose()
}

// observeCached scores each candidate's predicted hit share of one
// request (its uncached tokens u of prompt, at dispatch) against the share
// the backend reported cached. It is the engine's hit rate
// (observeHitRate) one request at a time, kept apart from it: a scrape
// window's error is approximate where the window ends, and single
// requests must be many before they outweigh it (capacityMinSamples, as
// TTFTs). The backend counts hits in its own blocks and tokens, the index
// in its own, an error every candidate shares.
func (m *capacityModel) observeCached(u [nCap]int64, prompt int64, share float64) {
	if prompt <= 0 || !(share >= 0 && share <= 1) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	const alpha = 0.1
	for i := range nCap {
		e := math.Abs(1 - float64(u[i])/float64(prompt) - share)
		if m.nReq == 0 {
			m.reqErr[i] = e
		} else {
			m.reqErr[i] += alpha * (e - m.reqErr[i])
		}
	}
	m.nReq++
	m.choose()
}

// choose believes the candidate with the least error, summing the TTFT
// models' mean absolute log error, the engine's hit-rate error and the
// reported hit shares' error, each once it has enough samples (all are
// relative: 0.1 is a TTFT 10 % off, or a hit rate 10 points off), among
// the candidates the engine's published KV capacity allows. Called with
// mu held.
func (m *capacityModel) choose() {
	top := m.maxCandidate()
	useTTFT, useHits, useReqs := m.n >= capacityMinSamples, m.nHit >= hitMinWindows, m.nReq >= capacityMinSamples
	cur := int(m.active.Load())
	if !useTTFT && !useHits && !useReqs {
		// No evidence yet: the largest candidate the engine allows.
		if cur > top || (cur == nCap-1 && top < nCap-1) {
			m.active.Store(int32(top))
		}
		return
	}
	score := func(i int) float64 {
		s := 0.0
		if useTTFT {
			s += m.err[i]
		}
		if useHits {
			s += m.hitErr[i]
		}
		if useReqs {
			s += m.reqErr[i]
		}
		return s
	}
	best := 0
	for i := range top + 1 {
		if score(i) < score(best) {
			best = i
		}
	}
	// Switch only to a clearly better candidate, so that two about as
	// good do not flap (unless the current one is out of bounds).
	if cur > top || score(best) < 0.9*score(cur) {
		m.active.Store(int32(best))
	}
}

// estimate reports the believed capacity (0 while the full index is).
func (m *capacityModel) estimate() capacityEstimate {
	if a := int(m.active.Load()); a < nCap-1 {
		return capacityEstimate{blocks: capacityHypotheses[a]}
	}
	return capacityEstimate{}
}

// CacheCapacity is the prefix-cache capacity, in index blocks
// (DefaultBlockBytes each), that the scheduler has learnt the backend
// effectively holds; 0 while it believes the backend keeps everything
// its prefix index holds (and its engine publishes no smaller KV
// size). Only policies that route by TTFT predictions
// (slo-predictive, slo-latency, custom profiles with their plugins) learn
// it: it costs about 3 µs of CPU per decision (BenchmarkPick).
func (b *Backend) CacheCapacity() int { return b.caps.estimate().blocks }

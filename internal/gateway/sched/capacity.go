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
}

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
	return m
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

// uncached returns each candidate's uncached tokens for a prompt.
func (m *capacityModel) uncached(blocks []uint64, promptTokens, blockTokens int) (u [nCap]int64) {
	for i := range nCap {
		u[i] = int64(max(promptTokens-m.sets[i].Match(blocks)*blockTokens, 0))
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
	if m.n < capacityMinSamples {
		return
	}
	best := 0
	for i := range nCap {
		if m.err[i] < m.err[best] {
			best = i
		}
	}
	// Switch only to a clearly better candidate, so that two about as
	// good do not flap.
	if cur := int(m.active.Load()); m.err[best] < 0.9*m.err[cur] {
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
// its prefix index holds. Only policies that route by TTFT predictions
// (slo-predictive, slo-latency, custom profiles with their plugins) learn
// it: it costs about 3 µs of CPU per decision (BenchmarkPick).
func (b *Backend) CacheCapacity() int { return b.caps.estimate().blocks }

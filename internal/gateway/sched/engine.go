package sched

import (
	"math"
	"sync"
	"sync/atomic"
)

// EngineStats is what one scrape of a backend's engine metrics says
// (package enginemetrics reads them, for the gateway's health check and
// the Endpoint Picker's pool). Fields an engine does not publish are NaN.
type EngineStats struct {
	// Waiting requests and KV-cache usage (0..1): vLLM's
	// num_requests_waiting and kv_cache_usage_perc.
	Waiting, KVUsage float64
	// Running requests (vLLM's num_requests_running): reported by the
	// Endpoint Picker, not read by the scheduler.
	Running float64
	// CacheTokens is how many tokens of KV the engine holds at most:
	// vLLM's cache_config_info num_gpu_blocks × block_size, SGLang's
	// max_total_num_tokens. Its prefix cache lives in that space, so it
	// bounds what the engine can keep cached.
	CacheTokens float64
	// PrefixQueries and PrefixHits are the engine's cumulative
	// prefix-cache counters, in tokens (vLLM's prefix_cache_queries and
	// prefix_cache_hits, gpu_prefix_cache_* before v0.10).
	PrefixQueries, PrefixHits float64
	// HitRate is a hit-rate gauge the engine computes itself (SGLang's
	// cache_hit_rate), used when it publishes no counters.
	HitRate float64
	// StartTime is when the engine's process started, in Unix seconds
	// (process_start_time_seconds, which vLLM's and SGLang's Python
	// Prometheus clients publish): a change means a restart, even one
	// quick enough that its counters climbed past their old values
	// between two scrapes.
	StartTime float64
}

// UnknownEngineStats returns EngineStats with every field unknown.
func UnknownEngineStats() EngineStats {
	n := math.NaN()
	return EngineStats{Waiting: n, KVUsage: n, Running: n, CacheTokens: n, PrefixQueries: n, PrefixHits: n, HitRate: n, StartTime: n}
}

// engineCache is what the backend's engine has said about its cache.
type engineCache struct {
	tokens  atomic.Uint64 // CacheTokens (float64 bits; NaN unknown)
	hitRate atomic.Uint64 // last observed hit rate (float64 bits; NaN unknown)

	mu sync.Mutex
	// queries and hits: the counters at the previous scrape (NaN: none).
	queries, hits float64
	// start: the process start time at the previous scrape (NaN: none).
	start float64
	// restarts counts the restarts seen (EngineRestarts).
	restarts atomic.Int64
}

func (e *engineCache) init() {
	e.tokens.Store(math.Float64bits(math.NaN()))
	e.hitRate.Store(math.Float64bits(math.NaN()))
	e.queries, e.hits, e.start = math.NaN(), math.NaN(), math.NaN()
}

// restarted reports whether the engine restarted since the previous
// scrape: its process start time changed, or a cumulative counter went
// down (the rule Prometheus's rate() applies to counter resets). A
// restarted engine's KV cache is empty, whatever the gateway sent it.
// It records the start time; window records the counters.
func (e *engineCache) restarted(s EngineStats) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := e.start
	if !math.IsNaN(s.StartTime) {
		e.start = s.StartTime
	}
	if !math.IsNaN(ps) && !math.IsNaN(s.StartTime) && s.StartTime != ps {
		return true
	}
	return s.PrefixQueries < e.queries || s.PrefixHits < e.hits // false when either is NaN
}

// window returns the hit rate over the tokens queried since the previous
// scrape, and false when there is none: first scrape, no queries since
// (an idle engine says nothing about its cache), or counters that went
// down (the engine restarted; the next window counts again).
func (e *engineCache) window(queries, hits float64) (float64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pq, ph := e.queries, e.hits
	e.queries, e.hits = queries, hits
	if math.IsNaN(queries) || math.IsNaN(hits) || math.IsNaN(pq) || math.IsNaN(ph) {
		return 0, false
	}
	dq, dh := queries-pq, hits-ph
	if dq <= 0 || dh < 0 || dh > dq {
		return 0, false
	}
	return dh / dq, true
}

// SetEngineStats records a scrape of the backend's engine: the gauges the
// predictors read, the engine's cache size, which bounds the cache
// capacity the scheduler learns (capacityModel), and the prefix-cache
// hit rate since the previous scrape, which the capacity learner takes as
// evidence (each candidate capacity predicts a hit rate for the requests
// sent in the meantime; the engine counted the real one).
func (b *Backend) SetEngineStats(s EngineStats) {
	b.SetEngineMetrics(zeroNaN(s.Waiting), zeroNaN(s.KVUsage))
	tokens := math.NaN()
	if s.CacheTokens > 0 && !math.IsInf(s.CacheTokens, 0) {
		tokens = s.CacheTokens
	}
	b.engine.tokens.Store(math.Float64bits(tokens))
	b.caps.setEngineTokens(tokens)
	if b.engine.restarted(s) {
		b.engine.restarts.Add(1)
		b.prefix.Clear()
		b.caps.forgetCached()
		b.engine.window(s.PrefixQueries, s.PrefixHits) // the next window starts here
		return
	}
	if r, ok := b.engine.window(s.PrefixQueries, s.PrefixHits); ok {
		b.engine.hitRate.Store(math.Float64bits(r))
		b.caps.observeHitRate(r)
	} else if s.HitRate >= 0 && s.HitRate <= 1 && math.IsNaN(s.PrefixQueries) {
		// A gauge over a window the engine chose: shown, not used as
		// evidence (its window is not the requests sent since the last
		// scrape).
		b.engine.hitRate.Store(math.Float64bits(s.HitRate))
	}
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// EngineRestarts is how many engine restarts the scrapes have revealed;
// each emptied the backend's prefix index.
func (b *Backend) EngineRestarts() int64 { return b.engine.restarts.Load() }

// EngineCache is what the backend's engine has published about its
// cache, NaN where it has not.
type EngineCache struct {
	// Tokens is the engine's KV capacity in tokens.
	Tokens float64
	// HitRate is the share of the prompt tokens the engine looked up in
	// its prefix cache between the last two scrapes that it found there.
	HitRate float64
}

// EngineCache returns what the last scrapes said about the engine's cache.
func (b *Backend) EngineCache() EngineCache {
	return EngineCache{
		Tokens:  math.Float64frombits(b.engine.tokens.Load()),
		HitRate: math.Float64frombits(b.engine.hitRate.Load()),
	}
}

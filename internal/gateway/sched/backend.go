package sched

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// BackendSpec is the static description of a backend the scheduler needs.
type BackendSpec struct {
	Name string
	// APIs the backend speaks ("openai", "anthropic").
	APIs []string
	// Models served; empty means any model.
	Models []string
	// Weight biases round-robin, random and load scores (default 1).
	Weight float64
	// MaxConcurrency caps in-flight requests (0 = unlimited).
	MaxConcurrency int
	// PrefixBlocks bounds the prefix index (0 = 65536 blocks).
	PrefixBlocks int
	// PriorTTFT is the predictors' guess before they have data (0 = 100 ms).
	PriorTTFT time.Duration
	// Predictor is PredictorDefault ("" too) or PredictorSwitching
	// (switching.go).
	Predictor string
}

// Breaker states, in the order exported as a metric value.
const (
	BreakerClosed   = coolClosed
	BreakerHalfOpen = coolHalfOpen
	BreakerOpen     = coolOpen
)

// SLO tracker states, in the order exported as a metric value.
const (
	SLOOK      = 0
	SLODemoted = 1
	SLOProbing = 2
)

// Backend is one backend's live scheduling state. It is shared by the
// scheduler, the tickets of requests in flight on it, and the gateway's
// health checker; every field is safe for concurrent use.
type Backend struct {
	Spec BackendSpec

	inFlight     atomic.Int64
	queuedTokens atomic.Int64
	healthy      atomic.Bool
	// Scraped engine metrics (float64 bits).
	waiting atomic.Uint64
	kvUsage atomic.Uint64

	// remoteInFlight: other gateway replicas' requests in flight here, as
	// they last published them (shared.go); 0 without shared state.
	remoteInFlight atomic.Int64
	// reach is the most requests of this gateway's that were in flight
	// ahead of one whose first token came back: how deep a queue the
	// backend's predictions have been shown (withinReach).
	reach atomic.Int64

	prefix *PrefixIndex
	caps   *capacityModel
	// slots follows the requests in flight for when the slots free
	// (slots.go), which the queue bound prices the wait for a slot by.
	slots slotTracker
	// engine is what the engine's own metrics say about its cache.
	engine engineCache
	preds  *predictorSet

	mu sync.Mutex
	// breaker takes the backend out of rotation after consecutive
	// failures of the transport or 5xx answers; demotion after consecutive
	// SLO violations (the article's SLO tracker). Each half-opens for one
	// trial request (the SLO tracker's probe) after its cooldown.
	breaker, demotion cooldown
	// Attainment as an exponentially weighted average, for the sla score.
	attain float64
	nSLO   int
	// missAt is when the last violation the demotion counted got its
	// first token (reportSLO).
	missAt time.Time
}

// Breaker and SLO tracker tuning.
const (
	breakerFailures    = 5
	breakerCooldown    = 2 * time.Second
	breakerMaxCooldown = 30 * time.Second
	demoteAfter        = 3
	demoteCooldown     = 2 * time.Second
	demoteMaxCooldown  = 30 * time.Second
)

var (
	breakerPolicy = cooldownPolicy{threshold: breakerFailures, first: breakerCooldown, most: breakerMaxCooldown}
	demotePolicy  = cooldownPolicy{threshold: demoteAfter, first: demoteCooldown, most: demoteMaxCooldown}
)

// NewBackend returns fresh state for spec.
func NewBackend(spec BackendSpec) *Backend {
	if spec.Weight <= 0 {
		spec.Weight = 1
	}
	if spec.PrefixBlocks <= 0 {
		spec.PrefixBlocks = 65536
	}
	if spec.PriorTTFT <= 0 {
		spec.PriorTTFT = 100 * time.Millisecond
	}
	b := &Backend{Spec: spec, prefix: NewPrefixIndex(spec.PrefixBlocks), preds: newPredictorSet(spec.PriorTTFT, spec.Predictor), attain: 1}
	b.caps = newCapacityModel(b.prefix)
	b.engine.init()
	b.healthy.Store(true)
	return b
}

// Name is the backend's configured name.
func (b *Backend) Name() string { return b.Spec.Name }

// InFlight is the number of requests the scheduler sent that have not ended.
func (b *Backend) InFlight() int64 { return b.inFlight.Load() }

// QueuedTokens is the uncached prompt tokens of requests awaiting their first token.
func (b *Backend) QueuedTokens() int64 { return b.queuedTokens.Load() }

// SetHealthy records the active health check's verdict.
func (b *Backend) SetHealthy(ok bool) { b.healthy.Store(ok) }

// Healthy reports the last active health check's verdict.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// SetEngineMetrics records scraped engine gauges (vLLM's
// num_requests_waiting and kv_cache_usage_perc).
func (b *Backend) SetEngineMetrics(waiting, kvUsage float64) {
	b.waiting.Store(math.Float64bits(waiting))
	b.kvUsage.Store(math.Float64bits(kvUsage))
}

// EngineMetrics returns the last scraped engine gauges.
func (b *Backend) EngineMetrics() (waiting, kvUsage float64) {
	return math.Float64frombits(b.waiting.Load()), math.Float64frombits(b.kvUsage.Load())
}

// Prefix exposes the backend's prefix index (for tests and warm-up).
func (b *Backend) Prefix() *PrefixIndex { return b.prefix }

// PredictorStats reports the active predictor and each one's MAPE.
func (b *Backend) PredictorStats() PredictorStats { return b.preds.stats() }

// serves reports whether the backend serves model over api.
func (b *Backend) serves(api, model string) bool {
	if api != "" && len(b.Spec.APIs) > 0 && !slices.Contains(b.Spec.APIs, api) {
		return false
	}
	return len(b.Spec.Models) == 0 || model == "" || slices.Contains(b.Spec.Models, model)
}

// BreakerState returns the breaker's state at now.
func (b *Backend) BreakerState(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.breaker.at(now)
}

// SLOState returns the SLO tracker's state at now.
func (b *Backend) SLOState(now time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.demotion.at(now) {
	case coolOpen:
		return SLODemoted
	case coolHalfOpen:
		return SLOProbing
	}
	return SLOOK
}

// admissible reports whether the breaker lets a request through now (a
// half-open breaker admits one trial at a time).
func (b *Backend) admissible(now time.Time) bool {
	if !b.healthy.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.breaker.admits(now)
}

// sloOK reports whether the SLO tracker currently lets ordinary traffic
// through: not demoted, or half-open with no probe in flight.
func (b *Backend) sloOK(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.demotion.admits(now)
}

// claim marks the trial/probe slots a dispatched request takes.
func (b *Backend) claim(now time.Time) (trial, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.breaker.claim(now), b.demotion.claim(now)
}

// HealthCheckPassed tells the backend that an active health check
// answered. A breaker that failures opened then lets its trial through
// at once instead of at the end of its cooldown, as Envoy un-ejects a
// host that passes an active check (successful_active_health_check_
// uneject_host). The cooldown doubles with each failed trial, up to
// breakerMaxCooldown, so an engine restarting for a minute left its
// backend out of rotation up to 30 s after it answered again; and a
// restart shorter than the first cooldown kept it out for the rest of
// that cooldown (fleets restart-fast and rolling-restart:
// docs/routing-evaluation.md, "A seventh held-out set"). The trial still
// decides: a backend whose health endpoint answers while its requests
// fail goes back to its cooldown, doubled.
func (b *Backend) HealthCheckPassed(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.breaker.at(now) == coolOpen {
		b.breaker.until = now
	}
}

// reportOutcome feeds the breaker: ok=false is a transport failure or 5xx.
func (b *Backend) reportOutcome(now time.Time, ok, trial bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.breaker.report(now, ok, trial, breakerPolicy)
}

// releaseTrial frees a trial or probe slot whose request ended without a
// verdict (cancelled by the client), so the half-open state is not stuck.
func (b *Backend) releaseTrial(trial, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if trial {
		b.breaker.release()
	}
	if probe {
		b.demotion.release()
	}
}

// reportSLO feeds the SLO tracker with one request, dispatched at start,
// that had a TTFT target.
//
// With episodes (a policy that routes by predictions: Ticket.sloVerdict),
// a violation by a request that was already in flight when the last
// counted one got its first token is the same episode: it counts against
// the attainment but not again toward demotion. Requests that wait
// together miss together — a burst of full prefills sharing one
// processor, a pause of the host — and three such misses within 4 ms
// demoted a stand-in twice as fast as the others for the rest of a run
// (fleet shared-prefill, docs/routing-evaluation.md). A backend that is
// slow for good still misses with requests sent after each counted
// miss, one episode per TTFT. A probe's verdict always counts: it is
// the one request of its episode. Other policies have no signal but
// demotion to take a slow backend out, so each violation stays one.
func (b *Backend) reportSLO(now, start time.Time, met, probe, episodes bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := 0.0
	if met {
		v = 1
	}
	b.attain += 0.05 * (v - b.attain)
	b.nSLO++
	if !met {
		if episodes && !probe && start.Before(b.missAt) {
			return
		}
		b.missAt = now
	}
	b.demotion.report(now, met, probe, demotePolicy)
}

// attainment is the recent SLO attainment (1 before any data).
func (b *Backend) attainment() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.attain
}

func (b *Backend) features(promptTokens, uncached int) Features {
	return Features{
		PromptTokens:   float64(promptTokens),
		UncachedTokens: float64(uncached),
		InFlight:       float64(b.inFlight.Load()),
		QueuedTokens:   float64(b.queuedTokens.Load()),
		Waiting:        math.Float64frombits(b.waiting.Load()),
		KVUsage:        math.Float64frombits(b.kvUsage.Load()),
	}
}

// noteReach records that a first token came back from behind ahead
// requests.
func (b *Backend) noteReach(ahead int64) {
	for {
		r := b.reach.Load()
		if ahead <= r || b.reach.CompareAndSwap(r, ahead) {
			return
		}
	}
}

// withinReach reports whether a request sent now would wait behind no
// more requests than one past the deepest queue the backend has returned
// a first token from. Beyond it a TTFT prediction extrapolates the queue:
// a backend the fleet seldom used (a slow one) has predictions fitted at
// queues of zero or one, which price a queue at nearly nothing, so every
// request spilling to it looked as fast as the first until the first
// TTFTs came back — by then two dozen were queued there (fleet eight:
// P99 over 500 ms in about one run in ten). The queue it may be given
// grows by one as each deeper first token returns, as admission's bound
// does (queueBound.reach).
func (b *Backend) withinReach() bool { return b.inFlight.Load() <= b.reach.Load()+1 }

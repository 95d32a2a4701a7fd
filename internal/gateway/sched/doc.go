// Package sched decides which backend serves an LLM request, over live
// per-backend state (in-flight requests, queued prompt tokens, an
// approximate prefix-cache index, online TTFT predictors, an SLO tracker
// and a circuit breaker).
//
// A decision runs a profile of plugins, after the Kubernetes Gateway API
// Inference Extension's scheduler: the backends serving the request's model
// and API go through the profile's Filters in order, every Scorer rates the
// survivors (scores in [0, 1]), the scores are summed with the scorers'
// weights, and the Picker chooses one from the totals and names the
// decision's reason (or leaves it to an Explainer scorer). Each policy of
// the gateway is a built-in profile (PolicyProfile):
//
//	every policy       exclude → health → capacity → breaker (panic threshold) → slo-demotion filters, then
//	round-robin        round-robin-picker
//	random             random-picker
//	least-outstanding  1×load-scorer → max-score-picker (ties: rotation)
//	power-of-two       1×load-scorer → two-choices-picker
//	prefix-affinity    1×prefix-scorer → max-score-picker (ties: least-load)
//	cache-aware        1×prefix-scorer with its overload guard → max-score-picker (ties: least-load)
//	slo-predictive     1×prefix-scorer → slo-affinity-picker (the default: affinity, spilling on predicted SLO misses)
//	slo-latency        0.6×slo-compliance-scorer + 0.4×latency-scorer → slo-picker (3% exploration)
//
// The default keeps each prompt group where its prefix is cached and
// moves a request only when that backend is predicted to miss the SLO
// (or to be over twice as slow) while another is predicted to meet it:
// sending every request to the predicted-fastest backend (slo-latency,
// the default before issue 17) spread every group over every backend and
// thrashed caches smaller than the working set on fleets that were not
// the simulator (docs/routing-evaluation.md). The predictions price
// uncached tokens with each backend's effective cache capacity, which
// the gateway is not told and learns (capacityModel: one LRU index and
// one small TTFT model per candidate capacity; the best predictor wins).
//
// A ProfileSpec is configuration (plugin types, weights, parameters); a
// registry of factories (Register, one per plugin type) builds the plugins
// from their parameters, so an embedder can run its own profile
// (Options.Profile) or add plugin types. Plugins see the candidates as one
// slice per call, not one call per candidate, and the Cycle they share is
// pooled: a decision allocates only its Ticket. Each plugin's duration goes
// to an Observer (Options.PluginLatency, for a sample of the decisions).
//
// The circuit breaker and the SLO tracker's demotion are the same cooldown
// state machine (closed → open → half-open with one trial), tuned apart.
// The prefix index is an LRU set from package lru, the same list the
// simulator's KV cache evicts with; SLO classes come from package sloclass.
//
// It deliberately knows nothing about HTTP (it must not import net/http) so
// that the same decisions can be served by the ttft gateway's reverse proxy,
// by an offline evaluation on a virtual clock, or by an Envoy ext_proc
// endpoint picker. Time comes from an injected clock for the same reason.
//
// The lifecycle of a request is Pick → (Ticket).FirstToken → (Ticket).End;
// the ticket carries the features seen at dispatch so that the predictors
// learn from exactly what they were asked about.
package sched

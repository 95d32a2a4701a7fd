// Package liveeval is the live routing evaluation: the real gateway
// (gateway.New serving on a loopback port) in front of real HTTP backends,
// loaded by ttft bench's runner (internal/bench) with the same seeded
// request sequence for every policy, on fleets of two kinds — the
// simulator's live replicas (internal/sim/serve) and stand-in backends with
// a latency model of their own (internal/gateway/standin) — so that a
// policy is never judged only on the model it was tuned against; and, with
// an ollama binary, real engines (OllamaFleets: `ollama serve` on the CPU
// with generated models and their own prompt caches), which outlive a run
// and are reset before each instead.
//
// Every (fleet, policy, seed) run starts its fleet and its gateway afresh
// (cold caches, cold predictors): the warm-up requests are the only
// history a policy gets. Results are per run and summarised across seeds
// (median and spread), with the targets of issue 17 checked per fleet.
package liveeval

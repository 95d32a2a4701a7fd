// Package enginemetrics reads what an inference engine publishes on its
// Prometheus /metrics: queue lengths, KV-cache usage and size, and
// prefix-cache counters, under the names vLLM, SGLang and Triton
// TensorRT-LLM use. The gateway's health check and the Endpoint Picker's
// pool both scrape through it, so both feed sched.Backend.SetEngineStats
// the same facts.
//
// It is separate from sched because parsing Prometheus text pulls in
// net/http (through expfmt), which sched must not depend on; the result
// is sched.EngineStats, what the scheduler consumes.
package enginemetrics

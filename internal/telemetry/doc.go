// Package telemetry connects ttft to the observability stacks users already
// run: Prometheus (the live client-side view of a bench run, served while it
// goes), OpenTelemetry traces named and attributed per the GenAI semantic
// conventions and exported over OTLP only when the standard OTEL_* variables
// ask for it, W3C trace-context propagation, a dynamic sampler that turns
// tracing up while TTFT and errors are bad, a tail processor that keeps error
// and SLO-violating traces the head sampler dropped, and the server-side TTFT
// decomposition read from an engine's own /metrics (vLLM, SGLang, TGI names).
//
// It knows records and requests, never the runner or the gateway: both call
// in through bench.Observer-shaped types and small helpers, so neither import
// cycles nor business logic end up here.
package telemetry

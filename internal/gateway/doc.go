// Package gateway is ttft's SLO-aware reverse proxy for OpenAI- and
// Anthropic-compatible LLM backends: configuration (YAML with file:line
// errors, hot reload), the streaming pass-through (every SSE event flushed as
// it arrives, never re-encoded), retries strictly before the first byte
// reaches the client, active health checks, client keys and rate limits,
// Prometheus metrics, W3C trace propagation and a JSON access log.
//
// Which backend serves a request is decided by package sched, which has no
// HTTP in it; this package turns HTTP requests into sched.Requests and
// reports each request's first token and end back to it.
//
// Start one in-process with New (an http.Handler) and ListenAndServe, or from
// the command line with "ttft gateway".
package gateway

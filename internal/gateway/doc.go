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
// The per-request path is kept lean because on a small VM the gateway's own
// CPU is its added latency (docs/performance.md): plain-http backends are
// reached through a small HTTP/1.1 client that does its I/O on the handler's
// goroutine (h1client.go), request bodies are read by a one-pass scanner
// that defers to encoding/json for anything unusual (reqparse.go), and the
// access log is formatted without reflection into a batching LogBuffer.
//
// Start one in-process with New (an http.Handler) and ListenAndServe, or from
// the command line with "ttft gateway".
package gateway

// Package gateway is ttft's SLO-aware reverse proxy for OpenAI- and
// Anthropic-compatible LLM backends, in the scope of Caddy's reverseproxy:
// the proxy itself (proxy.go: reading and admitting a request, routing and
// retrying it; attempt.go: one try on one backend, from building its
// request to relaying its answer), active health checks (health.go), the
// glue to scheduling and to transports, and metrics, traces, the access
// log and records (metrics.go, finish.go, accesslog.go). Around it:
// configuration (config.go: YAML with file:line errors) and its reload
// (Run, run.go and watch.go: the file watched and re-read on SIGHUP, each
// new configuration handed to a list of reloaders, the gateway first),
// client keys and rate limits (keys.go).
//
// The proxy streams every SSE event through as it arrives, never
// re-encoded, retries only before the first byte reaches the client, and
// ends a stream the backend cut with a well-formed error event of the
// client's API — unless it continues it on another backend, which is asked
// for the rest of the answer and whose stream is spliced onto the first
// (continue.go). APIs are named by wire.API throughout: a request's is that
// of the endpoint it came to (chat completions, completions, messages).
//
// What it delegates:
//   - which backend serves a request: package sched, which has no HTTP in
//     it; this package turns HTTP requests into sched.Requests and reports
//     each request's first token and end back to it;
//   - its HTTP/1.1 server for clients and its client for plain-http
//     backends: package httpx (httpx.Server or, with Options.HTTPServer
//     "net/http", httpx.ServeStd; httpx.Client), both with their I/O on
//     the request's own goroutine; https backends and health checks use
//     net/http's Transport;
//   - OpenAI ⇄ Anthropic translation, when no backend serves a chat
//     request's model over its own API: package wire/translate;
//   - JSON string encoding (access log, error answers and events):
//     jsonscan.AppendString.
//
// The per-request path is kept lean because on a small VM the gateway's own
// CPU is its added latency (docs/performance.md): request bodies are read
// by a one-pass scanner that defers to encoding/json for anything unusual
// (reqparse.go); a stream's events are framed and classified with byte
// searches (stream.go), each read's events written and flushed together,
// and counted only once they are on their way; and the access log is
// formatted without reflection into a batching LogBuffer.
//
// Start one in-process with New (an http.Handler) and ListenAndServe, with
// Run (listening, serving and reloading a configuration file, as the
// command does), or from the command line with "ttft gateway".
package gateway

// Package sched decides which backend serves an LLM request: filter → score
// → pick, over live per-backend state (in-flight requests, queued prompt
// tokens, an approximate prefix-cache index, online TTFT predictors, an SLO
// tracker and a circuit breaker).
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

// Package serve is the simulator's HTTP face: a live, OpenAI-compatible
// replica (Start) whose tokens leave at the times the sim engine schedules
// them on the wall clock, fleets of such replicas (StartFleet, ParseFleet),
// vLLM-named Prometheus metrics on /metrics, and fault injection
// (FaultConfig, the X-Sim-Fault header).
//
// Endpoints: POST /v1/chat/completions and /v1/completions (streaming or
// not), GET /v1/models, /health and /metrics.
//
// One engine goroutine per Server owns a sim.Engine: it sleeps until each
// step's scheduled end (spinning the last SpinWindow, as OS timers wake
// late), then hands the step's tokens to the requests' streams; each
// request's handler goroutine writes and flushes its own chunks, so the
// engine never blocks on a slow client. Server.EmissionLag reports how far
// writes trailed the schedule.
//
// It is the built-in target of "ttft bench" (DefaultConfig), "ttft sim
// serve", and the backend of the gateway's end-to-end tests. The engine,
// the catalogs and the offline runner are package sim's; this package adds
// only what HTTP needs.
package serve

// Package sloclass defines ttft's per-product SLO classes once: the
// gateway's x-slo-class values and default classes (internal/gateway/sched),
// the built-in bench scenarios of the same names (internal/workload), and
// the command line's help and defaults (internal/cli). It is a leaf (it
// imports only the standard library), so all of them can use it without an
// import cycle.
//
// The targets are the source article's §3.2 table: interactive code
// completion, customer-service chat, and real-time summaries of long
// documents.
package sloclass

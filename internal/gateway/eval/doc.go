// Package eval compares the gateway's scheduling policies on simulated
// fleets: the ttft simulator's engine (package sim, the same code "ttft sim"
// runs) drives one engine per replica on a virtual clock, and package sched
// makes every routing decision exactly as the live gateway does, with the
// same clock-injected predictors, prefix index and SLO tracker. A run of
// thousands of requests per policy and load takes well under a second.
//
// What it leaves out is the HTTP hop (the gateway's own overhead, measured
// separately in docs/performance.md) and network jitter.
package eval

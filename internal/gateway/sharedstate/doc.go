// Package sharedstate lets replicated ttft gateways share what their
// schedulers learn, through Redis: each replica's prefix-cache inserts
// (which prompt blocks it sent to which backend) and its breaker and SLO
// demotion openings.
//
// Routing stays local and fast. Nothing on the request path talks to
// Redis: the scheduler's SharedObserver hooks (sched/shared.go) put
// entries on a bounded queue, dropped when it is full, and a publisher
// goroutine writes them in batches, each entry as its own key with a TTL
// (prefix entries: the configured TTL; cooldowns: until they end) plus
// one pub/sub message per batch. A subscriber goroutine applies the other
// replicas' messages to the local index and breakers (ImportPrefix,
// ImportCooldown); when it (re)subscribes it first loads the live keys
// with SCAN, so a replica that starts or reconnects is not blind.
//
// Load is deliberately not shared: every replica counts its own requests
// in flight and reads the engines' own metrics, which are fresher than
// anything relayed through Redis would be.
//
// Losing Redis only degrades routing to what each replica learns alone:
// publishing drops its batches (counted), the subscriber retries with
// backoff, and the connectivity gauge says so.
package sharedstate

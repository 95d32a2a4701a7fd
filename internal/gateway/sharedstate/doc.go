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
// Each replica also publishes its requests in flight per backend (read
// every 5 ms off the request path, sent when they change and every second
// regardless, as pub/sub messages only), and the scheduler's load counts
// the others' sum beside its own (load.go): a replica alone sees only its
// share of every backend's load, and replicas that placed new prompt
// groups by their own counts stacked cold prefills on one backend. The
// same messages tell each replica which others are alive, hence its rank
// among them (ReplicaSlot), with which the slo-affinity picker staggers
// its rotation: simultaneous first picks on a cold fleet, before any
// count has arrived, then cover the backends evenly.
//
// Losing Redis only degrades routing to what each replica learns alone:
// publishing drops its batches (counted), the others' requests in flight
// are forgotten, the subscriber retries with backoff, and the
// connectivity gauge says so.
package sharedstate

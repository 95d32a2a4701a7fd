package sched

import "time"

// Shared state between replicated gateways (issue 19): several gateway
// processes route to the same backends, and each one's prefix index and
// breakers would otherwise learn only from its own share of the traffic.
// The scheduler stays local and knows nothing of how state travels: it
// tells a SharedObserver what it learnt (on the request path, so the
// observer must not block) and takes what other replicas learnt through
// Backend.ImportPrefix and Backend.ImportCooldown. Package
// gateway/sharedstate carries both through Redis, and each replica's
// requests in flight per backend (Backend.ImportInFlight), which the load
// the scheduler balances on then includes.

// Cooldown kinds, as a SharedObserver hears them and ImportCooldown takes them.
const (
	CooldownBreaker  = "breaker"
	CooldownDemotion = "demotion"
)

// SharedObserver hears the scheduler state worth sharing with other
// replicas. Its methods run on the request path: they must return at once
// (queue, never wait on the network).
type SharedObserver interface {
	// PrefixInserted: blocks were sent to backend and are now probably in
	// its cache. blocks is the caller's and only valid during the call.
	PrefixInserted(backend string, blocks []uint64)
	// CooldownOpen: the backend's breaker or SLO demotion (kind) is open
	// until until. It may be called more than once for one opening.
	CooldownOpen(backend, kind string, until time.Time)
	// ReplicaSlot is this replica's rank among the n replicas sharing
	// state (0 ≤ rank < n), in an order every replica agrees on; 0, 1
	// while it knows of no other. It is called for every pick.
	ReplicaSlot() (rank, n int)
}

// replicaSlot is the observer's ReplicaSlot, or 0, 1 without one.
func (s *Scheduler) replicaSlot() (rank, n int) {
	if s.opts.Shared == nil {
		return 0, 1
	}
	return s.opts.Shared.ReplicaSlot()
}

// sharedInsert tells the observer, if any, of a prefix insert.
func (s *Scheduler) sharedInsert(b *Backend, blocks []uint64) {
	if s.opts.Shared == nil || len(blocks) == 0 {
		return
	}
	s.opts.Shared.PrefixInserted(b.Spec.Name, blocks)
}

// sharedCooldowns tells the observer, if any, of the backend's open
// cooldowns. It is called after bad verdicts only (a failure, a missed
// SLO), the only ones that can open them, so the request path pays for
// the lock only when something went wrong.
func (s *Scheduler) sharedCooldowns(b *Backend, now time.Time) {
	if s.opts.Shared == nil {
		return
	}
	b.mu.Lock()
	br, bu := b.breaker.at(now), b.breaker.until
	de, du := b.demotion.at(now), b.demotion.until
	b.mu.Unlock()
	if br == coolOpen {
		s.opts.Shared.CooldownOpen(b.Spec.Name, CooldownBreaker, bu)
	}
	if de == coolOpen {
		s.opts.Shared.CooldownOpen(b.Spec.Name, CooldownDemotion, du)
	}
}

// ImportPrefix records blocks that another replica sent to this backend:
// the engine caches what any gateway sent it. The capacity model's
// candidate indexes learn them too, so predictions price them alike.
func (b *Backend) ImportPrefix(blocks []uint64) {
	if len(blocks) == 0 {
		return
	}
	b.caps.insert(blocks)
	b.prefix.Insert(blocks)
}

// ImportCooldown opens the backend's breaker or SLO demotion (kind) until
// until, as another replica's did, unless it is already open at least that
// long; it reports whether it changed anything. It half-opens locally when
// until passes, so each replica sends its own trial. The cooldown's length
// is kept (at least the first one) so that a failed trial here backs off
// as it would have after a local opening.
func (b *Backend) ImportCooldown(kind string, until, now time.Time) bool {
	if !until.After(now) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, p := &b.breaker, breakerPolicy
	switch kind {
	case CooldownBreaker:
	case CooldownDemotion:
		c, p = &b.demotion, demotePolicy
	default:
		return false
	}
	if c.at(now) == coolOpen && !c.until.Before(until) {
		return false
	}
	c.state, c.until, c.trial, c.bad = coolOpen, until, false, 0
	if c.wait == 0 {
		c.wait = p.first
	}
	return true
}

// ImportInFlight sets how many requests the other replicas have in flight
// on this backend, as they last reported it; the scheduler's load (load
// scores, least-load ties, the slo-affinity picker's placement of new
// prompt groups) counts them beside its own. Without it, replicas that
// each see only their own requests send concurrent new groups to the
// same backend, whose cold prefills then queue behind each other.
func (b *Backend) ImportInFlight(n int64) { b.remoteInFlight.Store(max(n, 0)) }

// RemoteInFlight is the other replicas' requests in flight, as imported.
func (b *Backend) RemoteInFlight() int64 { return b.remoteInFlight.Load() }

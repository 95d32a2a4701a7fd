package sched

import "time"

// Cooldown states, in the order the breaker exports them as a metric value
// (the SLO tracker maps them to its own: see SLOState).
const (
	coolClosed   = 0 // in rotation
	coolHalfOpen = 1 // cooled down: one trial request at a time
	coolOpen     = 2 // out of rotation until the cooldown ends
)

// cooldownPolicy tunes a cooldown: how many consecutive bad reports open
// it, and the first and longest cooldown (doubling in between).
type cooldownPolicy struct {
	threshold   int
	first, most time.Duration
}

// cooldown is the state machine behind both the circuit breaker (bad =
// the transport failed or the backend answered 5xx) and the SLO tracker's
// demotion (bad = a TTFT over the request's SLO):
//
//	closed ──threshold consecutive bad──► open ──cooldown over──► half-open
//	   ▲                                   ▲                          │
//	   └──────── the trial was good ───────┼──── the trial was bad ───┘
//	                                   (cooldown doubled, up to most)
//
// Half-open admits one trial request at a time; a good trial closes it
// and resets the cooldown. Open turns half-open lazily, when next asked
// at or after its deadline. It is not safe for concurrent use: Backend
// guards both of its cooldowns with its mutex.
type cooldown struct {
	state int
	bad   int // consecutive bad reports
	until time.Time
	wait  time.Duration // the current cooldown (0 = none yet)
	trial bool          // a half-open trial is in flight
}

// at returns the state at now.
func (c *cooldown) at(now time.Time) int {
	if c.state == coolOpen && !now.Before(c.until) {
		c.state, c.trial = coolHalfOpen, false
	}
	return c.state
}

// admits reports whether a request may go through now: closed, or
// half-open with the trial slot free.
func (c *cooldown) admits(now time.Time) bool {
	switch c.at(now) {
	case coolOpen:
		return false
	case coolHalfOpen:
		return !c.trial
	}
	return true
}

// claim takes the half-open trial slot for a dispatched request, when it
// is free; it reports whether the request is the trial.
func (c *cooldown) claim(now time.Time) bool {
	if c.at(now) == coolHalfOpen && !c.trial {
		c.trial = true
		return true
	}
	return false
}

// release frees the trial slot of a request that ended without a verdict.
func (c *cooldown) release() { c.trial = false }

// report feeds one verdict; trial says whether the request was the
// half-open trial (only the trial's verdict closes or reopens it).
func (c *cooldown) report(now time.Time, good, trial bool, p cooldownPolicy) {
	st := c.at(now)
	if good {
		c.bad = 0
		if st == coolHalfOpen && trial {
			c.state, c.wait, c.trial = coolClosed, 0, false
		}
		return
	}
	c.bad++
	if (st == coolHalfOpen && trial) || (st == coolClosed && c.bad >= p.threshold) {
		if c.wait == 0 {
			c.wait = p.first
		} else {
			c.wait = min(2*c.wait, p.most)
		}
		c.state, c.until, c.trial = coolOpen, now.Add(c.wait), false
	}
}

// sloVerdict reports whether the request's SLO violation is a verdict on
// its backend for the SLO tracker's demotion. Under a policy that routes
// by predictions, only a violation the prediction did not foresee is: the
// policy sent the request knowing it might miss (a full prefill on a
// backend whose prefills exceed the SLO while its cache hits meet it, or
// a request no backend was predicted to serve in time), and it already
// moves requests off a backend predicted to miss. Demoting for foreseen
// misses took every prompt group off such a backend for seconds at a
// time, each paying a full prefill elsewhere and evicting others there
// (docs/routing-evaluation.md, "Real engines: Ollama fleets"). Without a
// ready prediction there is nothing foreseen or not: no verdict either,
// so a backend's first few requests (its cold prefills) cannot demote
// it. Other policies have no other signal: every violation counts.
func (t *Ticket) sloVerdict() bool {
	if !t.s.profile.predictive {
		return true
	}
	if !t.Prediction.Ready || t.Prediction.P95 > t.SLO {
		return false
	}
	// Nor one the queue bound foresaw: a wait for a slot, which the
	// routing predictor does not price (it prices every request in
	// flight alike). Behind long answers holding every slot, misses
	// that only the bound foresaw demoted three of four stand-ins
	// together, and the fourth took every request (fleet long-decode,
	// docs/routing-evaluation.md).
	// Nor one that found every slot taken: its wait was the queue's,
	// which the picker chose, not the backend's service.
	q := t.QueueEstimate()
	return !q.Ready || q.Mean <= t.SLO && t.feat.InFlight < float64(q.Slots)
}

// reportSLOForeseen feeds the SLO tracker a violation that is no verdict
// (sloVerdict): it counts against the attainment, leaves the demotion's
// count of consecutive violations as it was, and frees the probe slot if
// the request held it, for the next request to probe.
func (b *Backend) reportSLOForeseen(probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attain += 0.05 * (0 - b.attain)
	b.nSLO++
	if probe {
		b.demotion.release()
	}
}

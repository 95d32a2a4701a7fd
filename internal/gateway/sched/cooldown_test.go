package sched

import (
	"testing"
	"time"
)

// The cooldown behind the breaker and the SLO demotion: threshold
// consecutive bad reports open it; after the cooldown it admits one trial;
// a bad trial reopens it for twice as long (up to the cap), a good one
// closes it and resets the cooldown; a good report resets the count.
func TestCooldown(t *testing.T) {
	p := cooldownPolicy{threshold: 3, first: time.Second, most: 3 * time.Second}
	now := time.Unix(1_700_000_000, 0)
	var c cooldown
	bad := func(trial bool) { c.report(now, false, trial, p) }
	bad(false)
	bad(false)
	c.report(now, true, false, p) // resets the count
	bad(false)
	bad(false)
	if c.at(now) != coolClosed || !c.admits(now) {
		t.Fatalf("2 consecutive bad reports: state %d", c.at(now))
	}
	bad(false)
	if c.at(now) != coolOpen || c.admits(now) || c.claim(now) {
		t.Fatalf("3 consecutive bad reports: state %d, want open and no trial", c.at(now))
	}
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if c.at(now.Add(wait-time.Nanosecond)) != coolOpen {
			t.Fatalf("round %d: half-open before its %v cooldown", i, wait)
		}
		now = now.Add(wait)
		if c.at(now) != coolHalfOpen || !c.admits(now) {
			t.Fatalf("round %d: state %d after %v, want half-open admitting", i, c.at(now), wait)
		}
		if !c.claim(now) || c.admits(now) || c.claim(now) {
			t.Fatalf("round %d: the trial slot is not exclusive", i)
		}
		c.release() // a trial without a verdict frees the slot
		if !c.claim(now) {
			t.Fatalf("round %d: released slot not claimable", i)
		}
		bad(false) // not the trial: no verdict on the half-open state
		if c.at(now) != coolHalfOpen {
			t.Fatalf("round %d: a non-trial failure moved half-open to %d", i, c.at(now))
		}
		bad(true)
		if c.at(now) != coolOpen {
			t.Fatalf("round %d: a failed trial left state %d", i, c.at(now))
		}
	}
	now = now.Add(3 * time.Second)
	c.claim(now)
	c.report(now, true, true, p)
	if c.at(now) != coolClosed || c.wait != 0 || !c.admits(now) {
		t.Fatalf("a good trial: state %d cooldown %v, want closed and reset", c.at(now), c.wait)
	}
}

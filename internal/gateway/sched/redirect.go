package sched

import "time"

// ReasonFallback is the reason of a ticket Redirect moved to the backend
// that served the request in place of the one picked.
const ReasonFallback = "fallback"

// Redirect re-attributes a dispatched request to the backend that actually
// served it. A data plane that walks a list of endpoints (the Endpoint
// Picker's chosen one, then its fallbacks) reports which one answered only
// after the fact: when it is not t.Backend, the chosen backend failed (it
// refused the connection or answered with a status the retry policy
// retries), and the answer, its TTFT included, is `to`'s.
//
// t ends as a failure (its backend's breaker hears of it). The returned
// ticket is the request's on `to`: counted in flight there, its prompt in
// `to`'s prefix index and its features taken from `to`'s state now, so
// that its FirstToken teaches `to`'s predictors. Its TTFT is measured from
// t's dispatch: the picker cannot see when the data plane moved on, so
// the failed attempt's time is included. That overstates the fallback's
// own TTFT by the failed attempt (a refused connection and the data
// plane's retry back-off, typically), a conservative error: measuring
// from the redirect instead would credit a fallback whose response
// headers come with its first token with a TTFT of nearly nothing, and
// draw traffic to it.
//
// req is the request as it was picked (its PromptTokens and Blocks price
// the prompt on `to`). Redirect returns t itself when `to` is t's backend,
// and nil when t had already ended (the request is over; there is nothing
// left to attribute).
func (s *Scheduler) Redirect(t *Ticket, to *Backend, req *Request) *Ticket {
	if to == t.Backend {
		return t
	}
	t.mu.Lock()
	ended, start, first := t.ended, t.start, t.first
	t.mu.Unlock()
	if ended {
		return nil
	}
	now := s.opts.Now()
	cy := s.cycles.Get().(*Cycle)
	defer s.putCycle(cy)
	cy.req, cy.now = *req, now
	c := Candidate{b: to}
	cy.predict(&c)
	n := &Ticket{
		Backend:    to,
		Policy:     t.Policy,
		Reason:     ReasonFallback,
		Prediction: c.pred,
		SLO:        t.SLO,
		Class:      t.Class,
		MeetsSLO:   t.SLO <= 0 || !c.pred.Ready || c.pred.P95 <= t.SLO,
		// The data plane chose `to`, not this scheduler: it takes no trial
		// or probe slot of a recovering backend.
		CachedTokens: req.PromptTokens - c.uncached,
		Candidates:   t.Candidates,
		s:            s,
		feat:         c.feat,
		uncached:     int64(c.uncached),
		start:        start,
		budget:       t.budget,
	}
	to.inFlight.Add(1)
	to.queuedTokens.Add(n.uncached)
	to.slots.dispatched(start, float64(n.uncached))
	if t.caps {
		n.caps = true
		n.capU = to.caps.uncached(req.Blocks, req.PromptTokens, s.opts.BlockTokens)
		n.capPrompt = int64(req.PromptTokens)
		n.capWork = to.caps.dispatched(n.capU)
		to.caps.insert(req.Blocks)
	}
	to.prefix.Insert(req.Blocks)
	s.sharedInsert(to, req.Blocks)
	if first {
		// A first token was already credited to t (to the wrong backend):
		// it cannot be taken back, and the new ticket must not learn it
		// twice.
		n.mu.Lock()
		n.first, n.firstAt = true, now
		to.slots.ended(start, time.Time{}, now, false)
		to.slots.decoding(now, n.budget)
		to.queuedTokens.Add(-n.uncached)
		if n.caps {
			to.caps.firstToken(n.capU)
		}
		n.mu.Unlock()
	}
	t.End(OutcomeFailed)
	return n
}

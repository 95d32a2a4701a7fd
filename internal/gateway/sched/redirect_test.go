package sched

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRedirectLearnsTheServingBackend: requests picked for a but served by
// b (a data plane's fallback) teach b's predictors b's TTFT, count in
// flight on b, put the prompt in b's prefix index, and fail a.
func TestRedirectLearnsTheServingBackend(t *testing.T) {
	const ttft = 300 * time.Millisecond
	for _, policy := range []string{SLOPredictive, RoundRobin} {
		t.Run(policy, func(t *testing.T) {
			clk := newClock()
			bs := backends("a", "b")
			a, b := bs[0], bs[1]
			s := mustNew(t, policy, clk, bs)
			sys := strings.Repeat("You are a helpful assistant. ", 40)
			var last Features // b's features at the last redirect
			// control learns what b should have: each redirected
			// request's features on b and its TTFT.
			control := NewBackend(b.Spec)
			// One failure fewer than opens a's breaker: a stays pickable.
			for i := range breakerFailures - 1 {
				req := Request{Model: "m", PromptTokens: 400, Blocks: blocksOf(sys + fmt.Sprint(i)), SLO: time.Second, Class: "chat",
					Exclude: []string{"b"}}
				tk, err := s.Pick(&req)
				if err != nil || tk.Backend != a {
					t.Fatalf("pick %d: %v, %v (want a)", i, tk, err)
				}
				n := s.Redirect(tk, b, &req)
				if n == nil || n.Backend != b || n.Reason != ReasonFallback || n.SLO != time.Second || n.Class != "chat" {
					t.Fatalf("redirect %d: %+v", i, n)
				}
				if a.InFlight() != 0 || b.InFlight() != 1 {
					t.Fatalf("redirect %d: in flight a %d b %d, want 0 and 1", i, a.InFlight(), b.InFlight())
				}
				if b.QueuedTokens() != n.uncached || a.QueuedTokens() != 0 {
					t.Fatalf("redirect %d: queued tokens a %d b %d, want 0 and %d", i, a.QueuedTokens(), b.QueuedTokens(), n.uncached)
				}
				if got := b.Prefix().Match(req.Blocks); got != len(req.Blocks) {
					t.Fatalf("redirect %d: b's prefix index holds %d of %d blocks", i, got, len(req.Blocks))
				}
				last = n.feat
				control.preds.observe(n.feat, ttft.Seconds())
				clk.add(ttft)
				if got := n.FirstToken(); got != ttft {
					t.Fatalf("redirect %d: TTFT %v, want %v (from the original dispatch)", i, got, ttft)
				}
				// t is over: a late first token for it is not learnt.
				if got := tk.FirstToken(); got != 0 {
					t.Fatalf("redirect %d: the redirected ticket still learnt a TTFT (%v)", i, got)
				}
				n.End(OutcomeOK)
			}
			if a.InFlight() != 0 || b.InFlight() != 0 || a.QueuedTokens() != 0 || b.QueuedTokens() != 0 {
				t.Fatalf("after the requests: in flight a %d b %d, queued a %d b %d", a.InFlight(), b.InFlight(), a.QueuedTokens(), b.QueuedTokens())
			}
			f := last
			if p, want := b.preds.predict(f), control.preds.predict(f); !p.Ready || p != want {
				t.Errorf("b served %d requests of %v TTFT; its prediction is %+v, want %+v", breakerFailures-1, ttft, p, want)
			}
			if p := a.preds.predict(f); p.Ready {
				t.Errorf("a served nothing, yet its predictors learnt: %+v", p)
			}
			if st := a.BreakerState(clk.now()); st != BreakerClosed {
				t.Fatalf("a: breaker %d after %d failures", st, breakerFailures-1)
			}
			req := Request{Model: "m", PromptTokens: 400, Exclude: []string{"b"}}
			tk, err := s.Pick(&req)
			if err != nil {
				t.Fatal(err)
			}
			s.Redirect(tk, b, &req).End(OutcomeOK)
			if st := a.BreakerState(clk.now()); st != BreakerOpen {
				t.Errorf("a: breaker %d after %d redirects away from it, want open", st, breakerFailures)
			}
		})
	}
}

func TestRedirectEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before runs on the picked ticket before the redirect.
		before func(tk *Ticket)
		// same: redirect to the picked backend itself.
		same     bool
		wantNil  bool
		wantSame bool
		// learnt: b's predictors may hear of a TTFT from the new ticket.
		learnt bool
	}{
		{name: "to the same backend", same: true, wantSame: true, learnt: false},
		{name: "after the ticket ended", before: func(tk *Ticket) { tk.End(OutcomeCanceled) }, wantNil: true},
		{name: "after a first token", before: func(tk *Ticket) { tk.FirstToken() }},
		{name: "in flight", learnt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			bs := backends("a", "b")
			a, b := bs[0], bs[1]
			s := mustNew(t, LeastOutstanding, clk, bs)
			req := Request{Model: "m", PromptTokens: 200, Blocks: blocksOf(strings.Repeat("x", 900)), Exclude: []string{"b"}}
			tk, err := s.Pick(&req)
			if err != nil {
				t.Fatal(err)
			}
			clk.add(50 * time.Millisecond)
			if tc.before != nil {
				tc.before(tk)
			}
			to := b
			if tc.same {
				to = a
			}
			n := s.Redirect(tk, to, &req)
			switch {
			case tc.wantNil:
				if n != nil {
					t.Fatalf("redirect of an ended ticket: %+v, want nil", n)
				}
			case tc.wantSame:
				if n != tk {
					t.Fatalf("redirect to its own backend: a new ticket")
				}
			case n == nil || n.Backend != b:
				t.Fatalf("redirect: %+v", n)
			}
			if n != nil {
				clk.add(50 * time.Millisecond)
				got := n.FirstToken()
				if want := 100 * time.Millisecond; tc.learnt && got != want {
					t.Errorf("first token: %v learnt, want %v", got, want)
				} else if !tc.learnt && !tc.wantSame && got != 0 {
					t.Errorf("first token: %v learnt twice", got)
				}
				n.End(OutcomeOK)
			}
			tk.End(OutcomeOK)
			for _, be := range bs {
				if be.InFlight() != 0 || be.QueuedTokens() != 0 {
					t.Errorf("%s: %d in flight, %d tokens queued after the request ended", be.Name(), be.InFlight(), be.QueuedTokens())
				}
			}
		})
	}
}

// The cached tokens the serving backend reports reach its own capacity
// learner, not the picked backend's, after a redirect.
func TestRedirectReportsCachedToServingBackend(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	a, b := bs[0], bs[1]
	s := mustNew(t, SLOPredictive, clk, bs)
	req := Request{Model: "m", PromptTokens: 200, Blocks: blocksOf(strings.Repeat("x", 900)), Exclude: []string{"b"}}
	tk, err := s.Pick(&req)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Redirect(tk, b, &req)
	n.ObserveCached(150, 200)
	n.End(OutcomeOK)
	a.caps.mu.Lock()
	na := a.caps.nReq
	a.caps.mu.Unlock()
	b.caps.mu.Lock()
	nb := b.caps.nReq
	b.caps.mu.Unlock()
	if na != 0 || nb != 1 {
		t.Errorf("reports heard: a %d, b %d; want 0, 1", na, nb)
	}
}

package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

func TestSessionsHistoryGrows(t *testing.T) {
	tok := DefaultTokenizer()
	src, err := NewSessions(SessionOptions{
		Seed: 1, Sessions: 1, Turns: 4, SystemTokens: 20,
		UserTokens: FixedDist(10), Output: FixedDist(5), Scenario: "mt",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var prev *Request
	for turn := 1; turn <= 4; turn++ {
		r, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Turn != turn || r.Session != "s0" || r.Scenario != "mt" {
			t.Fatalf("labels %q turn %d", r.Session, r.Turn)
		}
		// system + (user, assistant) * (turn-1) + user
		if want := 1 + 2*(turn-1) + 1; len(r.Messages) != want {
			t.Fatalf("turn %d: %d messages, want %d", turn, len(r.Messages), want)
		}
		if r.Messages[0].Role != "system" || r.Messages[len(r.Messages)-1].Role != "user" {
			t.Fatalf("roles %+v", r.Messages)
		}
		if prev != nil {
			for i, m := range prev.Messages {
				if r.Messages[i] != m {
					t.Fatalf("turn %d changed history message %d", turn, i)
				}
			}
			reply := r.Messages[len(prev.Messages)]
			if reply.Role != "assistant" || reply.Content != fmt.Sprintf("reply %d", turn-1) {
				t.Fatalf("turn %d: reply %+v", turn, reply)
			}
			// Token IDs extend the previous turn's: prefix caching sees it.
			for i := range prev.Tokens {
				if r.Tokens[i] != prev.Tokens[i] {
					t.Fatalf("turn %d: token prefix differs at %d", turn, i)
				}
			}
		}
		var want int
		for _, m := range r.Messages {
			want += tok.Count(m.Content)
		}
		if r.PromptTokens != want || len(r.Tokens) != want {
			t.Fatalf("turn %d: prompt tokens %d, want %d", turn, r.PromptTokens, want)
		}
		src.Done(r, Result{OK: true, Text: fmt.Sprintf("reply %d", turn), End: time.Now()})
		prev = r
	}
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after last turn: %v", err)
	}
}

// Sessions outnumber the workers: every turn is served, Next never blocks
// for good, and each session's turns come in order.
func TestSessionsNoDeadlockManySessions(t *testing.T) {
	src, err := NewSessions(SessionOptions{
		Seed: 2, Sessions: 50, Turns: 3, UserTokens: FixedDist(4), Output: FixedDist(2),
		MaxActive: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	lastTurn := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := src.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if lastTurn[r.Session] != r.Turn-1 {
					t.Errorf("%s: turn %d after %d", r.Session, r.Turn, lastTurn[r.Session])
				}
				lastTurn[r.Session] = r.Turn
				total++
				mu.Unlock()
				src.Done(r, Result{OK: true, Text: "ok", End: time.Now()})
			}
		}()
	}
	wg.Wait()
	if total != 150 || len(lastTurn) != 50 {
		t.Fatalf("%d requests over %d sessions, want 150 over 50", total, len(lastTurn))
	}
}

func TestSessionsFailureEndsSessionAndThinkTime(t *testing.T) {
	origin := time.Unix(1000, 0)
	src, err := NewSessions(SessionOptions{
		Seed: 3, Sessions: 2, Turns: 5, UserTokens: FixedDist(3), Output: FixedDist(2),
		ThinkTime: 2 * time.Second, Origin: origin,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, _ := src.Next(ctx)
	b, _ := src.Next(ctx)
	// Both in flight, nothing ready: Next must wait, then honour ctx.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if _, err := src.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want wait then deadline, got %v", err)
	}
	cancel()
	src.Done(a, Result{OK: false})
	src.Done(b, Result{OK: true, Text: "x", End: origin.Add(3 * time.Second)})
	r, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Session != b.Session || r.Turn != 2 || !r.HasAt || r.At != 5*time.Second {
		t.Fatalf("next turn %s/%d at %v (has %v), want %s/2 at 5s", r.Session, r.Turn, r.At, r.HasAt, b.Session)
	}
	src.Done(r, Result{OK: false})
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("both sessions ended: %v", err)
	}
	src.Done(r, Result{OK: true}) // a second report is ignored
}

func TestSessionsRateSchedulesStarts(t *testing.T) {
	src, err := NewSessions(SessionOptions{
		Seed: 4, Sessions: 200, Turns: 1, UserTokens: FixedDist(2), Output: FixedDist(1),
		Arrival: ArrivalSpec{Process: "constant", RatePerS: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		r, err := src.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !r.HasAt || r.At != time.Duration(i)*250*time.Millisecond {
			t.Fatalf("session %d starts at %v", i, r.At)
		}
		src.Done(r, Result{OK: true})
	}
}

func TestSessionOptionErrors(t *testing.T) {
	for _, o := range []SessionOptions{
		{Sessions: 0, Turns: 1, UserTokens: FixedDist(1), Output: FixedDist(1)},
		{Sessions: 1, Turns: 0, UserTokens: FixedDist(1), Output: FixedDist(1)},
		{Sessions: 1, Turns: 1, UserTokens: Dist{}, Output: FixedDist(1)},
		{Sessions: 1, Turns: 1, UserTokens: FixedDist(1), Output: FixedDist(1), ThinkTime: -1},
	} {
		if _, err := NewSessions(o); err == nil {
			t.Errorf("%+v: want error", o)
		}
	}
}

// A follow-up turn due before a later session's scheduled start is handed
// out first, and At counts from SetOrigin.
func TestSessionsOrderByAtAndOrigin(t *testing.T) {
	src, err := NewSessions(SessionOptions{
		Seed: 6, Sessions: 2, Turns: 2, UserTokens: FixedDist(2), Output: FixedDist(1),
		Arrival:   ArrivalSpec{Process: "constant", RatePerS: 0.1}, // starts at 0 s and 10 s
		ThinkTime: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	origin := time.Unix(500, 0)
	src.SetOrigin(origin)
	ctx := context.Background()
	a, _ := src.Next(ctx)
	if a.Session != "s0" || a.At != 0 {
		t.Fatalf("first %s at %v", a.Session, a.At)
	}
	src.Done(a, Result{OK: true, Text: "r", End: origin.Add(2 * time.Second)})
	b, _ := src.Next(ctx)
	if b.Session != "s0" || b.Turn != 2 || b.At != 3*time.Second {
		t.Fatalf("second %s/%d at %v, want s0/2 at 3s", b.Session, b.Turn, b.At)
	}
	c, _ := src.Next(ctx)
	if c.Session != "s1" || c.At != 10*time.Second {
		t.Fatalf("third %s at %v, want s1 at 10s", c.Session, c.At)
	}
}

package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// One timer keeps every deadline of a request: which limit ends it, and
// none once it is stopped.
func TestRequestLimitsOnOneTimer(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name          string
		timeout, ttft time.Duration
		tokenAt       time.Duration // 0: no token
		drainAt       time.Duration // 0: no drain; when the end marker came
		stopAt        time.Duration // 0: not stopped
		want          error         // the cause, nil: not canceled
	}{
		{"first-token limit", 0, 40 * ms, 0, 0, 0, errTTFTTimeout},
		{"token in time, then the whole-request limit", 120 * ms, 40 * ms, 10 * ms, 0, 0, errTimeout},
		{"token in time, no other limit", 0, 40 * ms, 10 * ms, 0, 0, nil},
		{"whole-request limit first", 40 * ms, 400 * ms, 0, 0, 0, errTimeout},
		{"drain replaces the limits", 60 * ms, 40 * ms, 0, 10 * ms, 0, errDrained},
		{"drain without limits", 0, 0, 0, 10 * ms, 0, errDrained},
		{"stopped before any limit", 40 * ms, 40 * ms, 0, 0, 10 * ms, nil},
		{"stopped while draining", 0, 0, 0, 10 * ms, 20 * ms, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			l := &limits{cancel: cancel}
			start := time.Now()
			l.start(tc.timeout, tc.ttft)
			type step struct {
				at time.Duration
				do func()
			}
			var steps []step
			if tc.tokenAt > 0 {
				steps = append(steps, step{tc.tokenAt, func() { l.gotToken.Store(true) }})
			}
			if tc.drainAt > 0 {
				steps = append(steps, step{tc.drainAt, func() { l.drain(50 * time.Millisecond) }})
			}
			if tc.stopAt > 0 {
				steps = append(steps, step{tc.stopAt, l.stop})
			}
			for _, s := range steps {
				time.Sleep(time.Until(start.Add(s.at)))
				if ctx.Err() != nil {
					t.Fatalf("canceled (%v) before %v", context.Cause(ctx), s.at)
				}
				s.do()
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
			got := context.Cause(ctx)
			if ctx.Err() == nil {
				got = nil
			}
			if !errors.Is(got, tc.want) {
				t.Fatalf("cause %v, want %v", got, tc.want)
			}
			if tc.want != nil {
				// Never before the limit that ended it.
				min := map[error]time.Duration{errTTFTTimeout: tc.ttft, errTimeout: tc.timeout, errDrained: tc.drainAt + 50*ms}[tc.want]
				if el := time.Since(start); el < min {
					t.Errorf("ended after %v, before its limit %v", el, min)
				}
			}
			l.stop()
		})
	}
}

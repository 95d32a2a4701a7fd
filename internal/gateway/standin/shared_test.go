package standin

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSharedProcessor checks processor sharing's arithmetic: a job alone
// takes its work; two jobs started together both take twice the shorter
// one's work until it leaves, the longer then runs alone.
func TestSharedProcessor(t *testing.T) {
	p := newSharedProcessor()
	ctx := context.Background()
	t0 := time.Now()
	if !p.run(ctx, 40*time.Millisecond) {
		t.Fatal("run ended early")
	}
	if d := time.Since(t0); d < 40*time.Millisecond || d > 200*time.Millisecond {
		t.Errorf("alone: %v, want ≈ 40 ms", d)
	}
	// 60 and 120 ms of work together: the short one ends at 120 ms
	// (both at half speed), the long one at 180 (60 left, alone).
	var short, long time.Duration
	var wg sync.WaitGroup
	t0 = time.Now()
	wg.Add(2)
	go func() { defer wg.Done(); p.run(ctx, 60*time.Millisecond); short = time.Since(t0) }()
	go func() { defer wg.Done(); p.run(ctx, 120*time.Millisecond); long = time.Since(t0) }()
	wg.Wait()
	if short < 110*time.Millisecond || short > 300*time.Millisecond || long < 170*time.Millisecond || long > 400*time.Millisecond || long-short < 40*time.Millisecond {
		t.Errorf("together: short %v (want ≈ 120 ms), long %v (want ≈ 180 ms)", short, long)
	}
	// A cancelled job leaves, and the one beside it speeds up.
	cctx, cancel := context.WithCancel(ctx)
	t0 = time.Now()
	wg.Add(1)
	go func() { defer wg.Done(); _ = p.run(cctx, time.Second) }()
	time.AfterFunc(20*time.Millisecond, cancel)
	p.run(ctx, 60*time.Millisecond)
	wg.Wait()
	// 20 ms at half speed (10 done), then 50 alone: ≈ 70 ms.
	if d := time.Since(t0); d > 300*time.Millisecond {
		t.Errorf("beside a job cancelled at 20 ms: %v, want ≈ 70 ms", d)
	}
	if len(p.jobs) != 0 {
		t.Errorf("%d jobs left in the processor", len(p.jobs))
	}
}

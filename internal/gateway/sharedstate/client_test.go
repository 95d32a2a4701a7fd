package sharedstate_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/sharedstate"
)

// fakeLocal records what a client applies.
type fakeLocal struct {
	mu        sync.Mutex
	prefixes  map[string][][]uint64
	cooldowns map[string]time.Time // backend/kind → until
	own       map[string]int64     // this replica's requests in flight
	remote    map[string]int64     // the others', as imported
}

func newFakeLocal() *fakeLocal {
	return &fakeLocal{prefixes: map[string][][]uint64{}, cooldowns: map[string]time.Time{},
		own: map[string]int64{}, remote: map[string]int64{}}
}

func (f *fakeLocal) InFlight(dst []sharedstate.BackendLoad) []sharedstate.BackendLoad {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b, n := range f.own {
		dst = append(dst, sharedstate.BackendLoad{Backend: b, InFlight: n})
	}
	return dst
}

func (f *fakeLocal) ImportInFlight(backend string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remote[backend] = n
}

func (f *fakeLocal) setOwn(backend string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.own[backend] = n
}

func (f *fakeLocal) remoteInFlight(backend string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remote[backend]
}

func (f *fakeLocal) ImportPrefix(backend string, blocks []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prefixes[backend] = append(f.prefixes[backend], slices.Clone(blocks))
}

func (f *fakeLocal) ImportCooldown(backend, kind string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cooldowns[backend+"/"+kind] = until
}

func (f *fakeLocal) hasPrefix(backend string, blocks []uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.prefixes[backend] {
		if slices.Equal(b, blocks) {
			return true
		}
	}
	return false
}

func (f *fakeLocal) cooldown(backend, kind string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cooldowns[backend+"/"+kind]
}

func (f *fakeLocal) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.cooldowns)
	for _, p := range f.prefixes {
		n += len(p)
	}
	return n
}

type replica struct {
	c     *sharedstate.Client
	local *fakeLocal
	m     *sharedstate.Metrics
}

func startReplica(t *testing.T, ctx context.Context, cfg sharedstate.Config) *replica {
	t.Helper()
	m, err := sharedstate.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{local: newFakeLocal(), m: m}
	if r.c, err = sharedstate.New(cfg, r.local, m); err != nil {
		t.Fatal(err)
	}
	r.c.Start(ctx)
	t.Cleanup(func() { r.c.Close() })
	return r
}

// TestClientShares: what one replica publishes reaches a running replica
// through pub/sub and a replica started later through SCAN, never its own
// publisher, and each entry kind keeps its content.
func TestClientShares(t *testing.T) {
	rs := startRedis(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := sharedstate.Config{URL: rs.URL(), TTL: time.Minute, KeyPrefix: "test:shares:"}
	a := startReplica(t, ctx, cfg)
	b := startReplica(t, ctx, cfg)
	eventually(t, 5*time.Second, "subscribed", func() bool { return a.c.Connected() && b.c.Connected() })

	until := time.Now().Add(30 * time.Second).Truncate(time.Millisecond)
	cases := []struct {
		name    string
		publish func()
		seen    func(*fakeLocal) bool
	}{
		{"prefix", func() { a.c.PrefixInserted("b1", []uint64{1, 2, 3}) },
			func(l *fakeLocal) bool { return l.hasPrefix("b1", []uint64{1, 2, 3}) }},
		{"breaker", func() { a.c.CooldownOpen("b2", sched.CooldownBreaker, until) },
			func(l *fakeLocal) bool { return l.cooldown("b2", sched.CooldownBreaker).Equal(until) }},
		{"demotion", func() { a.c.CooldownOpen("b3", sched.CooldownDemotion, until) },
			func(l *fakeLocal) bool { return l.cooldown("b3", sched.CooldownDemotion).Equal(until) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.publish()
			d := eventually(t, 2*time.Second, "applied by the other replica", func() bool { return tc.seen(b.local) })
			t.Logf("%s seen by the other replica after %v", tc.name, d)
		})
	}
	// A replica that starts now loads every live entry.
	c := startReplica(t, ctx, cfg)
	eventually(t, 5*time.Second, "a late replica loads the live keys", func() bool {
		return c.c.Connected() && c.local.count() == 3
	})
	for _, tc := range cases {
		if !tc.seen(c.local) {
			t.Errorf("late replica lacks the %s entry", tc.name)
		}
	}
	if n := a.local.count(); n != 0 {
		t.Errorf("the publisher applied %d of its own entries", n)
	}
	if got := promtest.ToFloat64(a.m.Published); got != 3 {
		t.Errorf("published = %v, want 3", got)
	}
	// Republishing a hot prefix within a quarter of the TTL is skipped.
	a.c.PrefixInserted("b1", []uint64{1, 2, 3})
	time.Sleep(50 * time.Millisecond)
	if got := promtest.ToFloat64(a.m.Published); got != 3 {
		t.Errorf("published = %v after a repeated insert, want 3", got)
	}
}

// TestClientWithoutRedis: with Redis unreachable nothing blocks or fails:
// entries are dropped and counted, and the gauge says disconnected.
func TestClientWithoutRedis(t *testing.T) {
	rs := startRedis(t)
	url := rs.URL()
	rs.stop()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := startReplica(t, ctx, sharedstate.Config{URL: url, KeyPrefix: "test:down:", QueueSize: 4})
	start := time.Now()
	for i := range 1000 {
		r.c.PrefixInserted("b", []uint64{uint64(i)})
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("1000 inserts took %v with Redis down; the request path must not wait", d)
	}
	eventually(t, 3*time.Second, "all 1000 entries counted as dropped", func() bool {
		return promtest.ToFloat64(r.m.Dropped) == 1000
	})
	if r.c.Connected() || promtest.ToFloat64(r.m.Connected) != 0 {
		t.Error("connected with Redis down")
	}
	// A dropped chain is not remembered as published: inserted again, it
	// is queued again (and, Redis still down, dropped again).
	for i := range 1000 {
		r.c.PrefixInserted("b", []uint64{uint64(i)})
	}
	eventually(t, 3*time.Second, "the repeated inserts queued again", func() bool {
		return promtest.ToFloat64(r.m.Dropped) == 2000
	})
}

// TestClientSharesInFlight: each replica's requests in flight reach the
// others, summed per backend and without its own; every replica ranks
// the live replicas alike; a replica that stops is forgotten, its
// requests no longer counted.
func TestClientSharesInFlight(t *testing.T) {
	rs := startRedis(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := sharedstate.Config{URL: rs.URL(), KeyPrefix: "test:inflight:"}
	var reps []*replica
	for range 3 {
		reps = append(reps, startReplica(t, ctx, cfg))
	}
	// c stops on its own.
	cctx, cstop := context.WithCancel(ctx)
	c := startReplica(t, cctx, cfg)
	reps = append(reps, c)
	eventually(t, 5*time.Second, "every replica hears the three others", func() bool {
		for _, r := range reps {
			if _, n := r.c.ReplicaSlot(); n != 4 || !r.c.Connected() {
				return false
			}
		}
		return true
	})
	ranks := map[int]bool{}
	for _, r := range reps {
		rank, _ := r.c.ReplicaSlot()
		ranks[rank] = true
	}
	if len(ranks) != 4 {
		t.Errorf("ranks %v: want 0-3, one each", ranks)
	}

	reps[0].local.setOwn("b1", 3)
	reps[1].local.setOwn("b1", 2)
	c.local.setOwn("b2", 5)
	want := func(r *replica, b1, b2 int64) func() bool {
		return func() bool { return r.local.remoteInFlight("b1") == b1 && r.local.remoteInFlight("b2") == b2 }
	}
	d := eventually(t, 2*time.Second, "counts summed at each replica, less its own", func() bool {
		return want(reps[0], 2, 5)() && want(reps[1], 3, 5)() && want(reps[2], 5, 5)() && want(c, 5, 0)()
	})
	t.Logf("requests in flight seen by the other replicas after %v", d)
	reps[0].local.setOwn("b1", 0)
	eventually(t, 2*time.Second, "a change reaches the others", want(reps[2], 2, 5))

	cstop()
	c.c.Close()
	d = eventually(t, 5*time.Second, "a stopped replica is forgotten", func() bool {
		_, n := reps[2].c.ReplicaSlot()
		return want(reps[2], 2, 0)() && n == 3
	})
	t.Logf("stopped replica forgotten after %v", d)
}

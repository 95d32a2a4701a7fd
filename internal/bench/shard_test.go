package bench

import (
	"context"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

func TestShardShare(t *testing.T) {
	for _, c := range []struct{ n, index, count, want int }{
		{10, 0, 1, 10}, {10, 0, 3, 4}, {10, 1, 3, 3}, {10, 2, 3, 3},
		{2, 2, 3, 0}, {0, 0, 4, 0}, {4, 3, 4, 1}, {7, 0, 7, 1},
	} {
		if got := workload.ShardShare(c.n, c.index, c.count); got != c.want {
			t.Errorf("ShardShare(%d, %d, %d) = %d, want %d", c.n, c.index, c.count, got, c.want)
		}
	}
	// The shares add up to the whole for any n and count.
	for count := 1; count <= 9; count++ {
		for n := 0; n <= 40; n++ {
			sum := 0
			for k := range count {
				sum += workload.ShardShare(n, k, count)
			}
			if sum != n {
				t.Fatalf("shares of %d over %d add up to %d", n, count, sum)
			}
		}
	}
}

// shardedRun runs count shards in goroutines (count 1: the single run) with
// one common start, and returns each shard's measured records with their
// offsets from the origin.
func shardedRun(t *testing.T, base string, count int, opt Options, src func() workload.Source) [][]record.Record {
	t.Helper()
	start := time.Now().Add(100 * time.Millisecond)
	out := make([][]record.Record, count)
	var wg sync.WaitGroup
	errs := make([]error, count)
	for k := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opt
			o.API, o.BaseURL, o.Request = wire.OpenAIChat, base, wire.RequestOptions{Model: "m"}
			o.Shard = Shard{Index: k, Count: count, Start: func(context.Context) (time.Time, error) { return start, nil }}
			r, err := New(o)
			if err != nil {
				errs[k] = err
				return
			}
			res, err := r.Run(context.Background(), src())
			if err != nil {
				errs[k] = err
				return
			}
			if !res.Origin.Equal(start) {
				t.Errorf("shard %d: origin %v, want the common start %v", k, res.Origin, start)
			}
			for _, rec := range res.Records {
				if !rec.Warmup {
					out[k] = append(out[k], rec)
				}
			}
		}()
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", k, err)
		}
	}
	return out
}

type plan struct {
	offset time.Duration
	prompt int
	max    int
	sess   string
}

func planOf(t *testing.T, shards [][]record.Record, origin func(record.Record) time.Time) map[int]plan {
	t.Helper()
	m := map[int]plan{}
	for _, recs := range shards {
		for _, r := range recs {
			if _, dup := m[r.Index]; dup {
				t.Fatalf("request index %d sent twice", r.Index)
			}
			m[r.Index] = plan{offset: r.Intended.Sub(origin(r)), prompt: r.PromptTokens, max: r.MaxTokens, sess: r.Session}
		}
	}
	return m
}

func TestShardsReproduceTheSingleRun(t *testing.T) {
	ts := NewTimingServer(2*time.Millisecond, time.Millisecond, 2)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	gen := func() workload.Source {
		g, err := workload.NewGenerated(workload.GenOptions{Seed: 7, Prompt: workload.Dist{Kind: "uniform", Min: 8, Max: 64},
			Output: workload.FixedDist(2), Requests: 0})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	cases := []struct {
		name  string
		count int
		opt   Options
	}{
		{"open loop poisson, 3 shards", 3, Options{Rate: 300, Arrival: "poisson", Seed: 3, Requests: 31, Warmup: 2}},
		{"open loop gamma, 4 shards", 4, Options{Rate: 300, Arrival: "gamma", Burstiness: 0.3, Seed: 5, Requests: 25}},
		{"closed loop, 2 shards", 2, Options{Concurrency: 4, Requests: 21, Warmup: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			single := shardedRun(t, srv.URL, 1, c.opt, gen)
			sharded := shardedRun(t, srv.URL, c.count, c.opt, gen)
			// Each shard's records count from the same origin; the
			// single run's from its own, so compare offsets.
			origin := func(recs [][]record.Record) func(record.Record) time.Time {
				first := map[bool]time.Time{}
				for _, rs := range recs {
					for _, r := range rs {
						if r.Index == c.opt.Warmup {
							first[true] = r.Intended
						}
					}
				}
				return func(record.Record) time.Time { return first[true] }
			}
			a, b := planOf(t, single, origin(single)), planOf(t, sharded, origin(sharded))
			if len(a) != c.opt.Requests || len(b) != c.opt.Requests {
				t.Fatalf("single run sent %d, shards %d; want %d", len(a), len(b), c.opt.Requests)
			}
			for i, p := range a {
				q, ok := b[i]
				if !ok {
					t.Fatalf("request %d missing from the shards", i)
				}
				if p.prompt != q.prompt || p.max != q.max {
					t.Errorf("request %d: prompt %d/%d max %d/%d differ", i, p.prompt, q.prompt, p.max, q.max)
				}
				if c.opt.Rate > 0 && p.offset != q.offset {
					t.Errorf("request %d: intended at %v in the single run, %v in the shards", i, p.offset, q.offset)
				}
			}
			for k, recs := range sharded {
				for _, r := range recs {
					if (r.Index-c.opt.Warmup)%c.count != k {
						t.Errorf("shard %d sent request %d", k, r.Index)
					}
				}
			}
		})
	}
}

func TestShardsKeepSessionsWhole(t *testing.T) {
	ts := NewTimingServer(2*time.Millisecond, time.Millisecond, 2)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	src := func() workload.Source {
		s, err := workload.NewSessions(workload.SessionOptions{Seed: 1, Sessions: 7, Turns: 3,
			UserTokens: workload.FixedDist(8), Output: workload.FixedDist(2)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	shards := shardedRun(t, srv.URL, 3, Options{Concurrency: 3, Requests: 21}, src)
	owner := map[string]int{}
	total := 0
	var idx []int
	for k, recs := range shards {
		for _, r := range recs {
			total++
			idx = append(idx, r.Index)
			if o, ok := owner[r.Session]; ok && o != k {
				t.Errorf("session %s split over shards %d and %d", r.Session, o, k)
			}
			owner[r.Session] = k
		}
	}
	if total != 21 || len(owner) != 7 {
		t.Fatalf("%d turns of %d sessions, want 21 of 7", total, len(owner))
	}
	sort.Ints(idx)
	for i := 1; i < len(idx); i++ {
		if idx[i] == idx[i-1] {
			t.Fatalf("request index %d used twice", idx[i])
		}
	}
}

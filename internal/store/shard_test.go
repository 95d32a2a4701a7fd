package store

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// shardSuite runs the sharded-run life cycle against a store: n shards join
// concurrently, meet at one start, save, and the last hears allIn.
func shardSuite(t *testing.T, st Store) {
	ctx := context.Background()
	ss := st.(ShardStore)
	const n = 4
	starts := make([]ShardStart, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts[k], errs[k] = ss.Join(ctx, ShardJoin{RunID: "sharded-1", Index: k, Count: n, Margin: 300 * time.Millisecond,
				Timeout: 30 * time.Second, PollEvery: 10 * time.Millisecond, Source: "bench", Labels: map[string]string{"shards": "4"}})
		}()
	}
	wg.Wait()
	for k := range n {
		if errs[k] != nil {
			t.Fatalf("shard %d: %v", k, errs[k])
		}
		if !starts[k].DBStart.Equal(starts[0].DBStart) {
			t.Fatalf("shard %d starts at %v, shard 0 at %v: one run has one start", k, starts[k].DBStart, starts[0].DBStart)
		}
	}
	if _, err := ss.Join(ctx, ShardJoin{RunID: "sharded-1", Index: 0, Count: 3, Timeout: time.Second}); err == nil {
		t.Fatal("a shard with another count joined")
	}
	// Each shard saves its stripe of 1,000 requests with lognormal TTFTs.
	rng := rand.New(rand.NewPCG(1, 2))
	all := make([]record.Record, 1000)
	for i := range all {
		all[i] = record.Record{Index: i, TTFTMs: 20 * math.Exp(rng.NormFloat64()), ITLMs: []float64{5 + rng.Float64()}}
		if i%97 == 0 {
			all[i].ErrorClass, all[i].TTFTMs = "http_5xx", 0
		}
	}
	for k := range n {
		var mine []record.Record
		for i := k; i < len(all); i += n {
			mine = append(mine, all[i])
		}
		allIn, err := ss.SaveShard(ctx, ShardInput{RunID: "sharded-1", Index: k, Records: mine,
			Health: ShardHealth{Host: "h", StartLate: time.Duration(k) * time.Microsecond, Requests: len(mine)}})
		if err != nil {
			t.Fatal(err)
		}
		if allIn != (k == n-1) {
			t.Fatalf("shard %d: allIn %v", k, allIn)
		}
		if k == 1 {
			// A restarted shard replaces its rows rather than adding to them.
			if _, err := ss.SaveShard(ctx, ShardInput{RunID: "sharded-1", Index: k, Records: mine}); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, err := st.Records(ctx, "sharded-1")
	if err != nil || len(recs) != len(all) {
		t.Fatalf("merged run has %d records (%v), want %d", len(recs), err, len(all))
	}
	for i, r := range recs {
		if r.Index != i {
			t.Fatalf("record %d has index %d: the run's order is the requests' global order", i, r.Index)
		}
	}
	if err := ss.FinishShardedRun(ctx, "sharded-1", record.Summary{Source: "bench", Target: "t", Started: time.Unix(100, 0)}); err != nil {
		t.Fatal(err)
	}
	run, err := st.Get(ctx, "sharded-1")
	if err != nil || run.Records != len(all) || run.Target != "t" || run.Labels["shards"] != "4" {
		t.Fatalf("run %+v, %v", run, err)
	}
	sr, err := ss.ShardRun(ctx, "sharded-1")
	if err != nil || len(sr.Shards) != n || len(sr.Missing) != 0 || sr.Start.IsZero() {
		t.Fatalf("shards %+v, %v", sr, err)
	}
	// Merged sketches against exact percentiles over the union.
	var sk []map[string][]byte
	for _, sh := range sr.Shards {
		sk = append(sk, sh.Sketches)
	}
	merged, err := MergeSketches(sk)
	if err != nil {
		t.Fatal(err)
	}
	var exact []float64
	for _, r := range all {
		if r.ErrorClass == "" {
			exact = append(exact, r.TTFTMs)
		}
	}
	sort.Float64s(exact)
	if got := merged["ttft_ms"].GetCount(); int(got) != len(exact) {
		t.Fatalf("merged sketch counts %v, want %d", got, len(exact))
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := exact[int(q*float64(len(exact)-1))]
		got, err := merged["ttft_ms"].GetValueAtQuantile(q)
		if err != nil {
			t.Fatal(err)
		}
		if rel := math.Abs(got-want) / want; rel > 0.01 {
			t.Errorf("P%v: merged sketch %.4f, exact %.4f (%.2f%% off, want ≤ 1%%)", q*100, got, want, 100*rel)
		}
	}
	if err := st.Delete(ctx, "sharded-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.ShardRun(ctx, "sharded-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("shards outlive their run: %v", err)
	}
}

func TestShardedRunSQLite(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "ttft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	shardSuite(t, st)
}

func TestShardedRunPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	st, err := Open(context.Background(), testutil.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	shardSuite(t, st)
	// The database's clock, read over loopback, is this machine's.
	off, rtt, err := st.(*sqlStore).clockOffset(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if off.Abs() > rtt+time.Millisecond {
		t.Errorf("clock offset to a database on this machine %v (round trip %v): the estimate is off", off, rtt)
	}
}

func TestShardJoinTimesOut(t *testing.T) {
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "ttft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.(ShardStore).Join(context.Background(), ShardJoin{RunID: "lonely", Index: 0, Count: 2, Timeout: 100 * time.Millisecond, PollEvery: 10 * time.Millisecond})
	if err == nil {
		t.Fatal("one of two shards started alone")
	}
}

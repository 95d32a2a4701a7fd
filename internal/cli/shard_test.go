package cli

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/store"
	"github.com/ttft-dev/ttft/internal/testutil"
)

func TestShardFlagsAndEnvironment(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		env        map[string]string
		idx, n     int
		runID, err string
	}{
		{"none", nil, nil, 0, 1, "", ""},
		{"spec", []string{"--shard", "2/5", "--run-id", "r1"}, nil, 2, 5, "r1", ""},
		{"index and count", []string{"--shard-index", "1", "--shard-count", "3"}, nil, 1, 3, "", ""},
		{"indexed job", nil, map[string]string{"JOB_COMPLETION_INDEX": "3", "TTFT_SHARD_COUNT": "4", "TTFT_RUN_ID": "job-7"}, 3, 4, "job-7", ""},
		{"flags beat env", []string{"--shard", "0/2"}, map[string]string{"JOB_COMPLETION_INDEX": "3", "TTFT_SHARD_COUNT": "4"}, 0, 2, "", ""},
		{"count without index", nil, map[string]string{"TTFT_SHARD_COUNT": "4"}, 0, 0, "", "which shard"},
		{"index out of range", []string{"--shard", "3/3"}, nil, 0, 0, "", "0 <= K < N"},
		{"not K/N", []string{"--shard", "3"}, nil, 0, 0, "", "K/N"},
		{"both forms", []string{"--shard", "0/2", "--shard-count", "2"}, nil, 0, 0, "", "give one"},
		{"index alone", []string{"--shard-index", "1"}, nil, 0, 0, "", "go together"},
		{"bad env", nil, map[string]string{"TTFT_SHARD_COUNT": "x", "JOB_COMPLETION_INDEX": "0"}, 0, 0, "", "positive integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o shardOptions
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			addShardFlags(fs, &o)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := o.resolveShard(fs, func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.idx != c.idx || o.n != c.n || o.RunID != c.runID {
				t.Fatalf("shard %d/%d run %q, want %d/%d run %q", o.idx, o.n, o.RunID, c.idx, c.n, c.runID)
			}
		})
	}
}

func FuzzParseShardSpec(f *testing.F) {
	for _, s := range []string{"0/1", "3/4", " 1 / 2 ", "4/4", "-1/3", "a/b", "", "/", "1/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, n, err := parseShardSpec(s)
		if err != nil {
			return
		}
		if n < 1 || k < 0 || k >= n {
			t.Fatalf("%q accepted as shard %d of %d", s, k, n)
		}
		if k2, n2, err := parseShardSpec(fmt.Sprintf("%d/%d", k, n)); err != nil || k2 != k || n2 != n {
			t.Fatalf("%q does not round-trip: %d/%d %v", s, k2, n2, err)
		}
	})
}

// cliEnv runs ttft in-process with env as its environment.
func cliEnv(env map[string]string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] }})
	return code, stdout.String(), stderr.String()
}

// shardedBench is the sharded-run check shared by the local-process test
// and the Kubernetes one: the merged run in the store against the single
// run (intended times, count, percentiles, start skew).
type shardedBench struct {
	dsn, runID string
	count      int
	requests   int
}

func (s shardedBench) check(t *testing.T, single []record.Record) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Records(ctx, s.runID)
	if err != nil {
		t.Fatal(err)
	}
	var measured []record.Record
	for _, r := range recs {
		if !r.Warmup {
			measured = append(measured, r)
		}
	}
	if len(measured) != s.requests {
		t.Fatalf("merged run has %d measured requests, want exactly %d", len(measured), s.requests)
	}
	// Same intended times as the single run: each shard's records keep the
	// single run's offsets exactly from that shard's origin, and the
	// shards' origins agree to the start skew.
	singleAt := map[int]time.Duration{}
	for _, r := range single {
		singleAt[r.Index] = r.Intended.Sub(single[0].Intended)
	}
	origins := map[int]time.Time{}
	for _, r := range measured {
		off, ok := singleAt[r.Index]
		if !ok {
			t.Fatalf("request %d is not in the single run", r.Index)
		}
		k := r.Index % s.count
		o := r.Intended.Add(-off)
		if prev, ok := origins[k]; !ok {
			origins[k] = o
		} else if !prev.Equal(o) {
			t.Fatalf("shard %d: request %d intended at %v from its origin, the single run at %v", k, r.Index, r.Intended.Sub(prev), off)
		}
	}
	var os []time.Time
	for _, o := range origins {
		os = append(os, o)
	}
	slices.SortFunc(os, func(a, b time.Time) int { return a.Compare(b) })
	if skew := os[len(os)-1].Sub(os[0]); skew > 2*time.Millisecond {
		t.Errorf("shards' schedules start %v apart, want ≤ 2 ms", skew)
	}
	sr, err := st.(store.ShardStore).ShardRun(ctx, s.runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sr.Missing) != 0 || len(sr.Shards) != s.count {
		t.Fatalf("shards %d, missing %v", len(sr.Shards), sr.Missing)
	}
	var late []time.Duration
	var sketches []map[string][]byte
	for _, sh := range sr.Shards {
		late = append(late, sh.Health.StartLate)
		sketches = append(sketches, sh.Sketches)
	}
	// The target is 2 ms (issue 18; measured 0.2–0.3 ms here when the
	// machine is otherwise quiet, see docs/scale-out.md). Under go test
	// ./... the shards share two cores with other packages' tests, and a
	// shard descheduled as it spins to the start wakes milliseconds late,
	// so the test holds a bound that catches a broken barrier (shards
	// starting on their own clocks are seconds apart) without failing on
	// the scheduler.
	skew := slices.Max(late) - slices.Min(late)
	t.Logf("start skew %v across shards (lateness %v; target ≤ 2 ms)", skew, late)
	if skew > 15*time.Millisecond {
		t.Errorf("start skew %v across shards (lateness %v), want ≤ 15 ms", skew, late)
	}
	// Percentiles: the stored summary (exact, from the union of the raw
	// records) and the merged sketches, both against the exact ones.
	var ttft []float64
	for _, r := range measured {
		if r.OK() {
			ttft = append(ttft, r.TTFTMs)
		}
	}
	sort.Float64s(ttft)
	run, err := st.Get(ctx, s.runID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Summary.Requests.Total != s.requests {
		t.Errorf("merged summary counts %d requests, want %d", run.Summary.Requests.Total, s.requests)
	}
	merged, err := store.MergeSketches(sketches)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q      float64
		stored float64
	}{{0.5, run.Summary.TTFT.P50}, {0.9, run.Summary.TTFT.P90}, {0.99, run.Summary.TTFT.P99}} {
		exact := stats.Quantile(ttft, c.q)
		if rel := math.Abs(c.stored-exact) / exact; rel > 0.01 {
			t.Errorf("P%g TTFT: stored summary %.4f ms, exact %.4f ms (%.2f%% off, want ≤ 1%%)", c.q*100, c.stored, exact, 100*rel)
		}
		// A sketch answers with a value of rank floor(q·(n−1)), not an
		// interpolation between two ranks (which, in the tail of a
		// hundred requests, can be ms apart): compare like with like.
		exactRank := ttft[int(c.q*float64(len(ttft)-1))]
		sk, err := merged["ttft_ms"].GetValueAtQuantile(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if rel := math.Abs(sk-exactRank) / exactRank; rel > 0.01 {
			t.Errorf("P%g TTFT: merged sketches %.4f ms, exact %.4f ms (%.2f%% off, want ≤ 1%%)", c.q*100, sk, exactRank, 100*rel)
		}
	}
}

func TestShardedBenchReproducesTheSingleRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs four benchmarks")
	}
	dsn := testutil.Postgres(t)
	srv, err := serve.Start(context.Background(), serve.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n, shards = 120, 3
	args := []string{"bench", "--target", srv.URL(), "--model", srv.ModelName(), "--rate", "200", "--arrival", "gamma", "--burstiness", "0.5",
		"--seed", "11", "-n", strconv.Itoa(n), "--max-tokens", "8", "--prompt-tokens", "64", "--no-progress", "--no-probe", "--db", dsn}
	base := map[string]string{"HOME": t.TempDir(), "GOGC": "100"} // GOGC: no process-wide GC switching between the in-process shards
	singleDir := filepath.Join(t.TempDir(), "single")
	if code, stdout, stderr := cliEnv(base, append(args, "--out", singleDir)...); code != 0 {
		t.Fatalf("single run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	single, err := record.ReadJSONL(filepath.Join(singleDir, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(single, func(i, j int) bool { return single[i].Index < single[j].Index })

	runID := "shard-test-1"
	var wg sync.WaitGroup
	outs := make([]string, shards)
	codes := make([]int, shards)
	for k := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As an Indexed Job's pod: the shard from the environment.
			env := map[string]string{"HOME": t.TempDir(), "GOGC": "100", "JOB_COMPLETION_INDEX": strconv.Itoa(k),
				"TTFT_SHARD_COUNT": strconv.Itoa(shards), "TTFT_RUN_ID": runID}
			code, stdout, stderr := cliEnv(env, append(args, "--shard-start-margin", "500ms")...)
			codes[k], outs[k] = code, stdout+stderr
		}()
	}
	wg.Wait()
	for k := range shards {
		if codes[k] != 0 {
			t.Fatalf("shard %d: exit %d\n%s", k, codes[k], outs[k])
		}
	}
	shardedBench{dsn: dsn, runID: runID, count: shards, requests: n}.check(t, single)

	// One run to every reader: runs show (with the shards' health),
	// compare and report.
	code, stdout, stderr := cliEnv(base, "runs", "show", runID, "--db", dsn)
	if code != 0 || !strings.Contains(stdout, "shards: 3") || !strings.Contains(stdout, "start skew across shards") || strings.Contains(stdout, "INCOMPLETE") {
		t.Fatalf("runs show: exit %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("ttft runs show %s:\n%s", runID, stdout[strings.Index(stdout, "shards:"):])
	var man record.Manifest
	if err := record.ReadJSON(filepath.Join(singleDir, "manifest.json"), &man); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := cliEnv(base, "compare", man.RunID, runID, "--db", dsn); code != 0 || !strings.Contains(stdout, runID) {
		t.Fatalf("compare: exit %d\n%s\n%s", code, stdout, stderr)
	}
	html := filepath.Join(t.TempDir(), "r.html")
	if code, stdout, stderr := cliEnv(base, "report", runID, "-o", html, "--db", dsn); code != 0 {
		t.Fatalf("report: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/store"
)

// Environment variables a shard reads when its flags are absent, so that a
// Kubernetes Indexed Job runs `ttft bench` with no wrapper script: the Job
// controller sets JOB_COMPLETION_INDEX in each pod, the manifest the count
// and the run ID.
const (
	envShardIndex  = "JOB_COMPLETION_INDEX"
	envShardIndex2 = "TTFT_SHARD_INDEX"
	envShardCount  = "TTFT_SHARD_COUNT"
	envRunID       = "TTFT_RUN_ID"
)

// shardOptions are bench's flags for one shard of a run spread over several
// load generators (see bench.Shard and store.ShardStore).
type shardOptions struct {
	Spec        string // K/N
	Index       int
	Count       int
	RunID       string
	StartMargin time.Duration
	JoinTimeout time.Duration
	k8s         k8sOptions // --render-k8s (k8s.go)

	// resolved
	idx, n int
	dsn    string
	st     store.Store
	joined store.ShardStart
}

func addShardFlags(f *pflag.FlagSet, o *shardOptions) {
	f.StringVar(&o.Spec, "shard", "", "run as shard K of N load generators (K/N, K from 0): each regenerates the whole seeded run and sends every N-th request; all meet in the results database (PostgreSQL) for one start and one run (default from $JOB_COMPLETION_INDEX and $TTFT_SHARD_COUNT)")
	f.IntVar(&o.Index, "shard-index", -1, "this shard's index, 0..N-1 (as --shard K/N)")
	f.IntVar(&o.Count, "shard-count", 0, "number of shards (as --shard K/N)")
	f.StringVar(&o.RunID, "run-id", "", "the run's ID, the same for every shard (default $TTFT_RUN_ID; required with --shard)")
	f.DurationVar(&o.StartMargin, "shard-start-margin", 2*time.Second, "sharded run: start this long after the last shard joins")
	f.DurationVar(&o.JoinTimeout, "shard-join-timeout", 10*time.Minute, "sharded run: give up when the other shards have not joined by then")
	addK8sFlags(f, &o.k8s)
}

// active reports whether this run is one shard of several.
func (o *shardOptions) active() bool { return o.n > 1 }

// parseShardSpec reads "K/N".
func parseShardSpec(s string) (int, int, error) {
	k, n, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("want K/N, got %q", s)
	}
	ki, err1 := strconv.Atoi(strings.TrimSpace(k))
	ni, err2 := strconv.Atoi(strings.TrimSpace(n))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("want K/N with integers, got %q", s)
	}
	if ni < 1 || ki < 0 || ki >= ni {
		return 0, 0, fmt.Errorf("want 0 <= K < N, got %q", s)
	}
	return ki, ni, nil
}

// resolveShard picks the shard from flags, else the environment. A run
// with no shard setting at all is the whole run (index 0 of 1).
func (o *shardOptions) resolveShard(fs *pflag.FlagSet, getenv func(string) string) error {
	changed := func(name string) bool { return fs != nil && fs.Changed(name) }
	switch {
	case o.Spec != "" && (changed("shard-index") || changed("shard-count")):
		return usageErr("--shard K/N and --shard-index/--shard-count say the same thing: give one")
	case o.Spec != "":
		k, n, err := parseShardSpec(o.Spec)
		if err != nil {
			return usageErr("--shard: %v", err)
		}
		o.idx, o.n = k, n
	case changed("shard-index") || changed("shard-count"):
		if !changed("shard-index") || !changed("shard-count") {
			return usageErr("--shard-index and --shard-count go together")
		}
		o.idx, o.n = o.Index, o.Count
	default:
		cs := getenv(envShardCount)
		if cs == "" {
			o.idx, o.n = 0, 1
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(cs))
		if err != nil || n < 1 {
			return usageErr("$%s must be a positive integer, got %q", envShardCount, cs)
		}
		is := getenv(envShardIndex)
		if is == "" {
			is = getenv(envShardIndex2)
		}
		if is == "" && n > 1 {
			return usageErr("$%s is %d but neither $%s nor $%s says which shard this is", envShardCount, n, envShardIndex, envShardIndex2)
		}
		k := 0
		if is != "" {
			if k, err = strconv.Atoi(strings.TrimSpace(is)); err != nil {
				return usageErr("$%s must be an integer, got %q", envShardIndex, is)
			}
		}
		o.idx, o.n = k, n
	}
	if o.n < 1 || o.idx < 0 || o.idx >= o.n {
		return usageErr("shard %d of %d: want 0 <= index < count", o.idx, o.n)
	}
	if o.RunID == "" {
		o.RunID = getenv(envRunID)
	}
	return nil
}

// setupShard is bench's hook after the run is set up: for a shard it takes
// the shared run ID, checks that the load can be split, opens the shared
// store and keeps this shard's files apart from the others'.
func setupShard(ctx context.Context, env *Env, o *benchOptions, b *benchRun) error {
	s := &o.shard
	if err := s.resolveShard(o.load.fs, env.getenv); err != nil {
		return err
	}
	if !s.active() {
		return nil
	}
	if s.RunID == "" {
		return usageErr("a sharded run needs one run ID for every shard: --run-id or $%s", envRunID)
	}
	if id := strings.ToLower(s.RunID); strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyz-") != "" || len(id) > 63 {
		return usageErr("--run-id %q: use at most 63 letters, digits and dashes", s.RunID)
	}
	if o.NoStore {
		return usageErr("the shards of a run meet in the results database: --shard needs it (drop --no-store)")
	}
	if !o.load.openLoop(b.src) && o.load.Concurrency < s.n {
		return usageErr("a closed loop of concurrency %d cannot be split over %d shards: each needs a worker", o.load.Concurrency, s.n)
	}
	s.dsn = o.DB
	if s.dsn == "" {
		s.dsn = defaultDSN(env)
	}
	if !store.IsPostgres(s.dsn) {
		fmt.Fprintf(env.Stderr, "ttft bench: warning: shards meet in %s, a SQLite file: only shards on this machine can reach it (use a postgres:// --db across machines)\n", s.dsn)
	}
	st, err := store.Open(ctx, s.dsn)
	if err != nil {
		return err
	}
	if _, ok := st.(store.ShardStore); !ok {
		st.Close()
		return usageErr("the results database %s cannot hold sharded runs", st.Describe())
	}
	s.st = st
	b.runID = strings.ToLower(s.RunID)
	if o.Out == "" {
		o.Out = filepath.Join(dataDir(env), "runs", fmt.Sprintf("%s-shard%d", b.runID, s.idx))
	}
	// The merged run is stored by the shards' own path below, not as this
	// shard's run.
	o.NoStore = true
	return nil
}

// benchShard is the runner's shard, with the barrier in the shared store.
func (s *shardOptions) benchShard(b *benchRun) bench.Shard {
	if !s.active() {
		return bench.Shard{}
	}
	return bench.Shard{Index: s.idx, Count: s.n, Start: func(ctx context.Context) (time.Time, error) {
		labels := map[string]string{"shards": strconv.Itoa(s.n)}
		for k, v := range b.man.Labels {
			labels[k] = v
		}
		man := b.man
		man.Labels = labels
		st, err := s.st.(store.ShardStore).Join(ctx, store.ShardJoin{
			RunID: b.runID, Index: s.idx, Count: s.n, Margin: s.StartMargin, Timeout: s.JoinTimeout,
			Manifest: man, Labels: labels, Source: "bench",
		})
		if err != nil {
			return time.Time{}, err
		}
		s.joined = st
		if !b.o.Quiet {
			fmt.Fprintf(b.env.Stderr, "ttft bench: shard %d of %d of run %s: all joined; start at %s (clock offset to the database %v, round trip %v)\n",
				s.idx, s.n, b.runID, st.DBStart.UTC().Format(time.RFC3339Nano), st.ClockOffset.Round(time.Microsecond), st.RTT.Round(time.Microsecond))
		}
		return st.Start, nil
	}}
}

// finishShard is bench's hook after the shard's own files are written: it
// stores the shard's records and health, and the shard that completes the
// run merges the union of the records into the run's summary.
func finishShard(ctx context.Context, env *Env, b *benchRun, sum *record.Summary, res bench.Result, keep error) error {
	s := &b.o.shard
	if !s.active() || s.st == nil {
		return keep
	}
	defer s.st.Close()
	host, _ := os.Hostname()
	h := store.ShardHealth{Host: host, ClockOffset: s.joined.ClockOffset, RTT: s.joined.RTT, StartLate: res.StartLate,
		Requests: sum.Requests.Total, Failed: sum.Requests.Failed, Errors: sum.Requests.Errors, Warnings: sum.Warnings}
	if sum.ReadDelay.Count > 0 {
		h.ReadDelayP99Ms = sum.ReadDelay.P99
	}
	ss := s.st.(store.ShardStore)
	allIn, err := ss.SaveShard(ctx, store.ShardInput{RunID: b.runID, Index: s.idx, Summary: *sum, Records: res.Records, Health: h})
	if err != nil {
		fmt.Fprintf(env.Stderr, "ttft bench: warning: shard %d is not in the results database (%v); its results are in %s\n", s.idx, err, b.dir)
		if keep == nil {
			keep = failErr("storing shard %d: %v", s.idx, err)
		}
		return keep
	}
	if !allIn {
		if !b.o.Quiet {
			fmt.Fprintf(env.Stderr, "ttft bench: shard %d of run %s stored; the run's summary is written by the last shard to finish\n", s.idx, b.runID)
		}
		return keep
	}
	merged, err := mergeShards(ctx, b, s.st)
	if err == nil {
		err = ss.FinishShardedRun(ctx, b.runID, merged)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "ttft bench: warning: merging run %s: %v\n", b.runID, err)
		if keep == nil {
			keep = failErr("merging the shards of run %s: %v", b.runID, err)
		}
		return keep
	}
	if !b.o.Quiet {
		fmt.Fprintf(env.Stderr, "ttft bench: all %d shards in: run %s has %d requests (%d failed)\n", s.n, b.runID, merged.Requests.Total, merged.Requests.Failed)
	}
	return keep
}

// mergeShards summarises the union of the shards' records as one run's:
// exact percentiles from the raw records, the same code as a single run.
func mergeShards(ctx context.Context, b *benchRun, st store.Store) (record.Summary, error) {
	recs, err := st.Records(ctx, b.runID)
	if err != nil {
		return record.Summary{}, err
	}
	cpu := b.cpuWarning
	b.cpuWarning = "" // one shard's CPU says nothing of the run's
	defer func() { b.cpuWarning = cpu }()
	sum := b.summarize(bench.Result{Records: recs}, nil)
	sr, err := st.(store.ShardStore).ShardRun(ctx, b.runID)
	if err != nil {
		return sum, err
	}
	for _, sh := range sr.Shards {
		for _, w := range sh.Health.Warnings {
			sum.Warnings = append(sum.Warnings, fmt.Sprintf("shard %d: %s", sh.Index, w))
		}
	}
	return sum, nil
}

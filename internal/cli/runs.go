package cli

// ttft runs (list, show, export, import, rm, prune) and ttft compare: the
// results store seen from the command line. RUN arguments accept a run ID,
// a unique prefix of one, "latest", or a run directory (read on the fly,
// not stored).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/report"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/store"
)

const dbFlagHelp = "results database: SQLite path or postgres:// URL (default $TTFT_DB, else ttft.db in $TTFT_DATA_DIR, $XDG_DATA_HOME/ttft or ~/.local/share/ttft)"

// storeOpener opens the store once, on first use, so that commands given
// only run directories never touch the database.
type storeOpener struct {
	env *Env
	dsn string
	st  store.Store
}

func (o *storeOpener) get(ctx context.Context) (store.Store, error) {
	if o.st != nil {
		return o.st, nil
	}
	dsn := o.dsn
	if dsn == "" {
		dsn = defaultDSN(o.env) // the same database bench and sim run write to
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	o.st = st
	return st, nil
}

func (o *storeOpener) close() {
	if o.st != nil {
		o.st.Close()
	}
}

// loadedRun is a RUN argument resolved and read.
type loadedRun struct {
	ID       string // empty for a directory
	Dir      string // empty for a stored run
	Meta     store.RunMeta
	Manifest json.RawMessage
	Summary  record.Summary
	Records  []record.Record
}

func (l *loadedRun) name() string {
	if n := l.Meta.Labels["name"]; n != "" {
		return n
	}
	if l.ID != "" {
		return l.ID
	}
	return filepath.Base(filepath.Clean(l.Dir))
}

func (l *loadedRun) reportRun() report.Run {
	return report.Run{Name: l.name(), Summary: l.Summary, Records: l.Records, Labels: runParams(l.Manifest, l.Meta.Labels)}
}

// runParams is what the report's sweep charts key on: the run's labels,
// plus the flags it was run with (manifest "flags", else long flags parsed
// from "args"), so a `ttft sweep --over concurrency=...` point is placed by
// its --concurrency without anyone labelling it. Flag names are normalised
// to label style (prompt-tokens → prompt_tokens); explicit labels win.
func runParams(manifest json.RawMessage, labels map[string]string) map[string]string {
	out := map[string]string{}
	var m record.Manifest
	if len(manifest) > 0 && json.Unmarshal(manifest, &m) == nil {
		args := m.Args
		for i := 0; i < len(args); i++ {
			a := args[i]
			if !strings.HasPrefix(a, "--") || a == "--" {
				continue
			}
			name, val, ok := strings.Cut(a[2:], "=")
			if !ok {
				if i+1 >= len(args) || strings.HasPrefix(args[i+1], "-") {
					continue // a boolean flag
				}
				val = args[i+1]
				i++
			}
			out[strings.ReplaceAll(name, "-", "_")] = val
		}
		for k, v := range m.Flags {
			out[strings.ReplaceAll(k, "-", "_")] = v
		}
	}
	for k, v := range labels {
		out[k] = v
	}
	return out
}

// loadRun resolves one RUN argument. withRecords=false skips the
// per-request rows of stored runs (list-like commands).
func loadRun(ctx context.Context, o *storeOpener, arg string, withRecords bool) (*loadedRun, error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		in, err := store.LoadDir(arg)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		l := &loadedRun{Dir: arg, Summary: in.Summary, Records: in.Records}
		l.Meta.Source = in.Source
		if raw, ok := in.Manifest.(json.RawMessage); ok {
			l.Manifest = raw
			var m record.Manifest
			if json.Unmarshal(raw, &m) == nil {
				l.Meta.Labels = m.Labels
			}
		}
		return l, nil
	}
	st, err := o.get(ctx)
	if err != nil {
		return nil, err
	}
	id, err := st.Resolve(ctx, arg)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, usageErr("%v (a RUN is a run ID, a unique prefix of one, \"latest\", or a run directory; see 'ttft runs list')", err)
		}
		return nil, usageErr("%v", err)
	}
	r, err := st.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	l := &loadedRun{ID: id, Meta: r.RunMeta, Manifest: r.Manifest, Summary: r.Summary}
	if withRecords {
		if l.Records, err = st.Records(ctx, id); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// expandRunArgs replaces a directory that holds run directories (the
// output of ttft sweep) by those directories, in name order.
func expandRunArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if st, err := os.Stat(a); err != nil || !st.IsDir() || store.IsRunDir(a) {
			out = append(out, a)
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			out = append(out, a)
			continue
		}
		var subs []string
		for _, e := range entries {
			if p := filepath.Join(a, e.Name()); e.IsDir() && store.IsRunDir(p) {
				subs = append(subs, p)
			}
		}
		if len(subs) == 0 {
			out = append(out, a) // LoadDir will say what is missing
			continue
		}
		out = append(out, subs...)
	}
	return out
}

func loadRuns(ctx context.Context, o *storeOpener, args []string) ([]*loadedRun, error) {
	var out []*loadedRun
	for _, a := range expandRunArgs(args) {
		l, err := loadRun(ctx, o, a, true)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	nameByParams(out)
	// Two runs with the same name would be indistinguishable in tables.
	seen := map[string]int{}
	for _, l := range out {
		seen[l.name()]++
	}
	for i, l := range out {
		if seen[l.name()] > 1 {
			if l.Meta.Labels == nil {
				l.Meta.Labels = map[string]string{}
			}
			l.Meta.Labels["name"] = fmt.Sprintf("%s#%d", l.name(), i+1)
		}
	}
	return out, nil
}

func newRunsCmd(env *Env) *cobra.Command {
	o := &storeOpener{env: env}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, show, export, import, delete and prune stored runs",
		Long: `Every ttft bench, sim run and sweep is stored in a results database:
SQLite by default (a per-user file), PostgreSQL with --db postgres://...
Run IDs are 8 characters; any unique prefix, or "latest", works where a
RUN is expected. The run directory (requests.jsonl, summary.json,
manifest.json) stays the portable format: export and import move runs
between directories and databases.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&o.dsn, "db", "", dbFlagHelp)
	cmd.AddCommand(runsListCmd(env, o), runsShowCmd(env, o), runsExportCmd(env, o), runsImportCmd(env, o), runsRmCmd(env, o), runsPruneCmd(env, o))
	return cmd
}

func runsListCmd(env *Env, o *storeOpener) *cobra.Command {
	var source string
	var labels []string
	var limit int
	var jsonOut bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List stored runs, newest first",
		Example: `  ttft runs list
  ttft runs list --source sim --label concurrency=8 --limit 5
  ttft runs list --json | jq '.[0].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			defer o.close()
			for _, kv := range labels {
				if !strings.Contains(kv, "=") {
					return usageErr("runs list: --label %q: want KEY=VALUE", kv)
				}
			}
			if limit < 0 {
				return usageErr("runs list: --limit must be >= 0")
			}
			st, err := o.get(cmd.Context())
			if err != nil {
				return err
			}
			list, err := st.List(cmd.Context(), store.ListOptions{Limit: limit, Source: source, Labels: parseLabels(labels)})
			if err != nil {
				return err
			}
			if jsonOut {
				if list == nil {
					list = []store.RunMeta{}
				}
				return writeJSONTo(env.Stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintf(env.Stderr, "no runs in %s\n", st.Describe())
				return nil
			}
			return printRunList(env.Stdout, list)
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "only runs from this source (bench, sim, gateway)")
	f.StringArrayVar(&labels, "label", nil, "only runs with this `KEY=VALUE` label (repeatable)")
	f.IntVar(&limit, "limit", 0, "show at most N runs (0: all)")
	f.BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func printRunList(w io.Writer, list []store.RunMeta) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTARTED\tSOURCE\tTARGET\tMODEL\tLOAD\tREQUESTS\tLABELS")
	for _, m := range list {
		n := fmt.Sprint(m.Records)
		if m.RecordsPruned {
			n += " (pruned)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Started.Local().Format("2006-01-02 15:04"), m.Source,
			dash(m.Target), dash(m.Model), dash(report.LoadText(m.Labels)), n, fmtLabels(userLabels(m.Labels)))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		if k != "dir" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, " ")
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runsShowCmd(env *Env, o *storeOpener) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show RUN",
		Short: "Show a run's metadata and summary",
		Example: `  ttft runs show latest
  ttft runs show 3fk2 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			l, err := loadRun(cmd.Context(), o, args[0], false)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSONTo(env.Stdout, struct {
					store.RunMeta
					Manifest json.RawMessage `json:"manifest,omitempty"`
					Summary  record.Summary  `json:"summary"`
					Shards   *store.ShardRun `json:"shards,omitempty"`
				}{l.Meta, l.Manifest, l.Summary, shardsOf(cmd.Context(), o, l.ID)})
			}
			w := env.Stdout
			if l.ID != "" {
				fmt.Fprintf(w, "run %s  stored %s  started %s  source %s\n", l.ID, l.Meta.Created.Local().Format(time.RFC3339),
					l.Meta.Started.Local().Format(time.RFC3339), l.Meta.Source)
				if l.Meta.RecordsPruned {
					fmt.Fprintf(w, "per-request records: pruned by retention (the summary is kept)\n")
				} else {
					fmt.Fprintf(w, "per-request records: %d\n", l.Meta.Records)
				}
			} else {
				fmt.Fprintf(w, "run directory %s (not stored)\n", l.Dir)
			}
			if s := report.LoadText(runParams(l.Manifest, l.Meta.Labels)); s != "" {
				fmt.Fprintf(w, "load: %s\n", s)
			}
			if s := fmtLabels(userLabels(l.Meta.Labels)); s != "" {
				fmt.Fprintf(w, "labels: %s\n", s)
			}
			var m record.Manifest
			_ = json.Unmarshal(l.Manifest, &m)
			printSummary(w, &l.Summary, &m, l.Dir)
			if sr := shardsOf(cmd.Context(), o, l.ID); sr != nil {
				printShards(w, sr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print metadata, manifest and summary as JSON")
	return cmd
}

func runsExportCmd(env *Env, o *storeOpener) *cobra.Command {
	var asCSV bool
	cmd := &cobra.Command{
		Use:   "export RUN DIR",
		Short: "Write a stored run as a run directory (requests.jsonl, summary.json, manifest.json), or as CSV",
		Example: `  ttft runs export latest ./runs/baseline
  ttft runs export 3fk2 /tmp/x && ttft runs import /tmp/x --db postgres://ci@db/ttft
  ttft runs export latest ./csv --csv      # requests.csv and summary.csv`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			ctx := cmd.Context()
			if asCSV {
				// A RUN here may also be a run directory.
				l, err := loadRun(ctx, o, args[0], true)
				if err != nil {
					return err
				}
				if err := rundir.WriteCSV(args[1], &l.Summary, l.Records); err != nil {
					return usageErr("runs export: %v", err)
				}
				fmt.Fprintf(env.Stdout, "exported %s to %s (%s, %s)\n", l.name(), args[1], rundir.RequestsCSV, rundir.SummaryCSV)
				return nil
			}
			st, err := o.get(ctx)
			if err != nil {
				return err
			}
			id, err := st.Resolve(ctx, args[0])
			if err != nil {
				return usageErr("runs export: %v", err)
			}
			if err := st.Export(ctx, id, args[1]); err != nil {
				return usageErr("runs export: %v", err)
			}
			fmt.Fprintf(env.Stdout, "exported %s to %s\n", id, args[1])
			return nil
		},
	}
	cmd.Flags().BoolVar(&asCSV, "csv", false, "write requests.csv (one row per request) and summary.csv (one row per latency metric) instead")
	return cmd
}

func runsImportCmd(env *Env, o *storeOpener) *cobra.Command {
	return &cobra.Command{
		Use:     "import DIR...",
		Short:   "Store run directories; each is one transaction (a bad file stores nothing)",
		Example: `  ttft runs import ./runs/baseline ./runs/fp8`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			ctx := cmd.Context()
			st, err := o.get(ctx)
			if err != nil {
				return err
			}
			for _, dir := range args {
				id, err := st.Import(ctx, dir)
				if err != nil {
					return usageErr("runs import: %v", err)
				}
				fmt.Fprintf(env.Stdout, "%s\t%s\n", id, dir)
			}
			return nil
		},
	}
}

func runsRmCmd(env *Env, o *storeOpener) *cobra.Command {
	return &cobra.Command{
		Use:     "rm RUN...",
		Aliases: []string{"delete"},
		Short:   "Delete stored runs and their records",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			ctx := cmd.Context()
			st, err := o.get(ctx)
			if err != nil {
				return err
			}
			// Resolve everything first: a typo deletes nothing.
			var ids []string
			for _, a := range args {
				if a == "latest" {
					return usageErr("runs rm: give an explicit ID, not \"latest\"")
				}
				id, err := st.Resolve(ctx, a)
				if err != nil {
					return usageErr("runs rm: %v", err)
				}
				ids = append(ids, id)
			}
			for _, id := range ids {
				if err := st.Delete(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(env.Stdout, "deleted %s\n", id)
			}
			return nil
		},
	}
}

func runsPruneCmd(env *Env, o *storeOpener) *cobra.Command {
	var rawAfter, runsAfter string
	var dry bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Apply the retention policy: drop old per-request rows, keep summaries longer",
		Long: `Tiered retention, after the article's observability practice (raw spans
7 days, trace metadata 90 days): per-request rows of runs older than
--raw-after are deleted (the run and its summary stay, so compare and
report still show its table); whole runs older than --runs-after are
deleted. Ages count from the run's start. 0 keeps that tier forever.`,
		Example: `  ttft runs prune --dry-run
  ttft runs prune --raw-after 30d --runs-after 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			defer o.close()
			raw, err := store.ParseAge(rawAfter)
			if err != nil {
				return usageErr("runs prune: --raw-after: %v", err)
			}
			all, err := store.ParseAge(runsAfter)
			if err != nil {
				return usageErr("runs prune: --runs-after: %v", err)
			}
			st, err := o.get(cmd.Context())
			if err != nil {
				return err
			}
			res, err := st.Prune(cmd.Context(), store.Policy{RawAfter: raw, RunsAfter: all, DryRun: dry}, time.Now())
			if err != nil {
				return err
			}
			verb := "deleted"
			if dry {
				verb = "would delete"
			}
			fmt.Fprintf(env.Stdout, "%s %d runs, and the per-request rows of %d more (%d rows)\n", verb, len(res.RunsDeleted), len(res.RecordsDropped), res.Rows)
			for _, id := range res.RunsDeleted {
				fmt.Fprintf(env.Stdout, "  run %s\n", id)
			}
			for _, id := range res.RecordsDropped {
				fmt.Fprintf(env.Stdout, "  rows of %s\n", id)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&rawAfter, "raw-after", "7d", "delete per-request rows of runs older than this (e.g. 7d, 2w, 36h; 0 = never)")
	f.StringVar(&runsAfter, "runs-after", "90d", "delete whole runs older than this (0 = never)")
	f.BoolVar(&dry, "dry-run", false, "say what would be deleted, delete nothing")
	return cmd
}

func newCompareCmd(env *Env) *cobra.Command {
	o := &storeOpener{env: env}
	var jsonOut bool
	var seed int64
	cmd := &cobra.Command{
		Use:   "compare RUN RUN...",
		Short: "Compare runs side by side with bootstrap CIs, a Mann–Whitney test and a verdict",
		Long: `Prints each run's failed requests (count, error classes, first message),
the article's table for each run (target/model, mean TTFT, std, P50, P95,
P99, ITL, throughput), then each run against the first: the difference of
TTFT mean, P95 and P99 and of mean ITL, with a bootstrap 95% confidence
interval and bootstrap p-value, a Mann–Whitney U test of each
distribution (TTFT, ITL), and a verdict per row from that row's own test.
Measured and simulated runs compare alike. A RUN is a
stored run ID, a unique prefix, "latest", or a run directory; a directory
of run directories (the output of ttft sweep) stands for all of them.`,
		Example: `  ttft compare runs/baseline runs/fp8
  ttft compare 3fk2 latest --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			runs, err := loadRuns(cmd.Context(), o, args)
			if err != nil {
				return err
			}
			if len(runs) < 2 {
				return usageErr("compare needs at least two runs (got %d)", len(runs))
			}
			rr := make([]report.Run, len(runs))
			for i, l := range runs {
				rr[i] = l.reportRun()
			}
			cmp := report.Compare(rr, report.CompareOptions{Seed: seed})
			if jsonOut {
				return writeJSONTo(env.Stdout, cmp)
			}
			return cmp.WriteText(env.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dsn, "db", "", dbFlagHelp)
	f.BoolVar(&jsonOut, "json", false, "print the table, differences and verdicts as JSON")
	f.Int64Var(&seed, "seed", 1, "bootstrap seed (results are reproducible for a given seed)")
	return cmd
}

// nameByParams names unlabelled run directories by the parameters that
// differ between the runs ("concurrency=4 prompt_tokens=1024" rather than
// "point-003"), when one to three parameters do and every run is a
// directory. Stored runs keep their IDs, which can be typed back.
func nameByParams(runs []*loadedRun) {
	if len(runs) < 2 {
		return
	}
	for _, l := range runs {
		if l.Dir == "" {
			return // mixed with stored runs: keep IDs and directory names
		}
	}
	skip := map[string]bool{"out": true, "dir": true, "name": true, "label": true, "db": true}
	params := make([]map[string]string, len(runs))
	keys := map[string]bool{}
	for i, l := range runs {
		params[i] = runParams(l.Manifest, l.Meta.Labels)
		for k := range params[i] {
			keys[k] = true
		}
	}
	var varying []string
	for k := range keys {
		if skip[k] {
			continue
		}
		first, differs := params[0][k], false
		for _, p := range params[1:] {
			if p[k] != first {
				differs = true
			}
		}
		if differs {
			varying = append(varying, k)
		}
	}
	if len(varying) == 0 || len(varying) > 3 {
		return
	}
	sort.Strings(varying)
	for i, l := range runs {
		if l.Meta.Labels["name"] != "" {
			continue
		}
		parts := make([]string, 0, len(varying))
		for _, k := range varying {
			if v := params[i][k]; v != "" && len(v) <= 24 {
				parts = append(parts, k+"="+v)
			}
		}
		if len(parts) == 0 {
			continue
		}
		if l.Meta.Labels == nil {
			l.Meta.Labels = map[string]string{}
		}
		l.Meta.Labels["name"] = strings.Join(parts, " ")
	}
}

// userLabels are a run's labels less those that describe its load (shown
// as the load instead).
func userLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l))
	for k, v := range l {
		switch k {
		case "loop", "concurrency", "rate", "arrival", "max_concurrency", "prompt_tokens", "max_tokens", "workload":
			if l["loop"] != "" {
				continue
			}
		}
		out[k] = v
	}
	return out
}

// shardsOf is a stored run's shards, or nil for a run made by one process
// (or one read from a directory).
func shardsOf(ctx context.Context, o *storeOpener, id string) *store.ShardRun {
	if id == "" {
		return nil
	}
	st, err := o.get(ctx)
	if err != nil {
		return nil
	}
	ss, ok := st.(store.ShardStore)
	if !ok {
		return nil
	}
	sr, err := ss.ShardRun(ctx, id)
	if err != nil {
		return nil
	}
	return sr
}

// printShards is the per-shard health of a sharded run: whether each shard
// finished, its clock offset to the database (the shards' start is on the
// database's clock), how late it woke for the start, its client read delay
// (a shard short of CPU reads late) and its errors.
func printShards(w io.Writer, sr *store.ShardRun) {
	start := "not yet: waiting for every shard to join"
	if !sr.Start.IsZero() {
		start = sr.Start.Local().Format("2006-01-02 15:04:05.000000")
	}
	fmt.Fprintf(w, "\nshards: %d, common start %s (database clock)\n", sr.Count, start)
	if len(sr.Missing) > 0 {
		fmt.Fprintf(w, "INCOMPLETE: shard(s) %v have not finished; the summary above is not the whole run's\n", sr.Missing)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tHOST\tSTATE\tREQUESTS\tFAILED\tCLOCK OFFSET\tDB RTT\tSTART LATE\tREAD DELAY P99\tERRORS")
	for _, sh := range sr.Shards {
		state := "running"
		if !sh.Finished.IsZero() {
			state = "done"
		}
		h := sh.Health
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%.3f ms\t%s\n", sh.Index, dash(h.Host), state, h.Requests, h.Failed,
			fmtMs(h.ClockOffset), fmtMs(h.RTT), fmtMs(h.StartLate), h.ReadDelayP99Ms, dash(fmtErrors(h.Errors)))
	}
	_ = tw.Flush()
	var late []time.Duration
	for _, sh := range sr.Shards {
		if !sh.Finished.IsZero() {
			late = append(late, sh.Health.StartLate)
		}
	}
	if len(late) > 1 {
		fmt.Fprintf(w, "start skew across shards: %s\n", fmtMs(slices.Max(late)-slices.Min(late)))
	}
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/1e6) }

func fmtErrors(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

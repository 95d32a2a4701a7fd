package cli

// ttft sweep: one bench (or sim run) per point of a parameter grid, or a
// bisection search for the highest load that still meets a scenario's SLOs.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/sweep"
)

type sweepOptions struct {
	Over      []string
	Sim       bool
	Out       string
	Grid      string // "X,Y": the batch × context table over two --over params
	NoStop    bool
	Search    string
	Lo, Hi    float64
	Tolerance float64
	Repeats   int
	MaxRuns   int
	// Auto is GuideLLM's sweep profile: synchronous, then maximum
	// throughput at AutoConcurrency, then AutoRates open-loop rates
	// between the two (sweep_auto: runAuto).
	Auto            bool
	AutoRates       int
	AutoConcurrency int
}

func newSweepCmd(env *Env) *cobra.Command {
	o := &sweepOptions{}
	cmd := &cobra.Command{
		Use:   "sweep [flags] -- [bench or sim run flags]",
		Short: "Run a benchmark per point of a parameter grid, or search for the highest load meeting the SLOs",
		Long: `Run "ttft bench" (or "ttft sim run" with --sim) once per point and summarise
the points together. Flags after "--" go to every run; each point adds its own
--NAME=VALUE settings. Each run's files go to OUT/point-NNN.

  --over NAME=V1,V2,...   sweep a flag (repeat for a grid; the last varies fastest)
  --grid X,Y              with two --over parameters, print the batch × context
                          table: TTFT P50/P95 per cell and the deviation from a
                          linear prediction (latency = a + b·X·Y fitted on the
                          edge cells)
  --search NAME           bisect NAME (rate, concurrency...) between --lo and --hi
                          for the highest value at which every SLO of the run's
                          --scenario holds; probes near the boundary are repeated
                          (--repeats) and decided by majority

  --auto                  GuideLLM's sweep: a synchronous run (one request at a
                          time), a maximum-throughput run (--auto-concurrency in
                          flight), then --auto-rates open-loop rates evenly
                          between the two throughputs

A point whose queue grows without bound (throughput below the offered rate,
schedule lag, TTFT rising through the run) is flagged as saturated and the
larger values of the last parameter are skipped (--no-stop to run them).`,
		Example: `  ttft sweep --over concurrency=1,8,16,32 -- --requests 200
  ttft sweep --sim --over concurrency=1,8,16,32 --over prompt-tokens=512,1024,2048 --grid concurrency,prompt-tokens -- --requests 500
  ttft sweep --search rate --lo 0.5 --hi 64 -- --scenario code --requests 300 --target http://localhost:8000
  ttft sweep --auto -- --duration 60s --target http://localhost:8000`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSweep(cmd.Context(), env, o, args)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.Over, "over", nil, "NAME=V1,V2,...: a flag of bench/sim run and its values (repeatable)")
	f.BoolVar(&o.Sim, "sim", false, "run \"ttft sim run\" per point instead of \"ttft bench\"")
	f.StringVarP(&o.Out, "out", "o", "", "directory for the sweep (default: a new directory under the ttft data directory)")
	f.StringVar(&o.Grid, "grid", "", "X,Y: print TTFT per cell of two --over parameters with the deviation from a linear prediction")
	f.BoolVar(&o.NoStop, "no-stop", false, "keep running larger values after a point saturates")
	f.StringVar(&o.Search, "search", "", "bisect this flag for the highest value meeting every SLO (needs --scenario in the run flags)")
	f.Float64Var(&o.Lo, "lo", 1, "search: lower bound (must meet the SLOs)")
	f.Float64Var(&o.Hi, "hi", 64, "search: upper bound")
	f.Float64Var(&o.Tolerance, "tolerance", 0.05, "search: stop when (hi-lo)/lo is below this")
	f.IntVar(&o.Repeats, "repeats", 3, "search: runs per probe near the boundary (majority decides)")
	f.IntVar(&o.MaxRuns, "max-runs", 30, "search: cap on the number of runs")
	f.BoolVar(&o.Auto, "auto", false, "sweep from synchronous to maximum throughput and the rates between (GuideLLM's sweep profile)")
	f.IntVar(&o.AutoRates, "auto-rates", 8, "auto: open-loop rates between the synchronous and the maximum throughput")
	f.IntVar(&o.AutoConcurrency, "auto-concurrency", 64, "auto: requests in flight for the maximum-throughput run")
	return cmd
}

func runSweep(ctx context.Context, env *Env, o *sweepOptions, passthrough []string) error {
	modes := 0
	for _, on := range []bool{len(o.Over) > 0, o.Search != "", o.Auto} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return usageErr("sweep: give one of --over NAME=V1,V2,... (a grid), --search NAME (an SLO search) or --auto (synchronous to maximum throughput)")
	}
	for _, a := range passthrough {
		if a == "--out" || a == "-o" || strings.HasPrefix(a, "--out=") {
			return usageErr("sweep: set --out before \"--\"; each point writes to OUT/point-NNN")
		}
	}
	out := o.Out
	if out == "" {
		out = filepath.Join(dataDir(env), "sweeps", newRunID(time.Now()))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return usageErr("--out: %v", err)
	}
	n := 0
	runPoint := func(ctx context.Context, p sweep.Point) (sweep.Outcome, error) {
		dir := filepath.Join(out, fmt.Sprintf("point-%03d", n))
		n++
		args := []string{"bench"}
		if o.Sim {
			args = []string{"sim", "run"}
		}
		args = append(args, passthrough...)
		args = append(args, p.Args()...)
		// Each point is stored labelled with its settings, so that
		// "ttft runs list --label concurrency=8" finds it.
		for _, st := range p.Settings {
			args = append(args, "--label", st.Name+"="+st.Value)
		}
		args = append(args, "--out", dir)
		if !o.Sim {
			return runBenchPoint(ctx, env, args[1:], dir)
		}
		return runSubcommand(ctx, env, args, dir)
	}

	if o.Search != "" {
		return runSearch(ctx, env, o, out, runPoint)
	}
	if o.Auto {
		return runAuto(ctx, env, o, out, passthrough, runPoint)
	}

	var params []sweep.Param
	for _, spec := range o.Over {
		p, err := sweep.ParseParam(spec)
		if err != nil {
			return usageErr("%v", err)
		}
		params = append(params, p)
	}
	points := sweep.Grid(params)
	fmt.Fprintf(env.Stderr, "ttft sweep: %d points; results in %s\n", len(points), out)
	// A usage error at one point (a bad flag after "--") is the same at
	// every point: stop at once.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var usage error
	guarded := func(ctx context.Context, p sweep.Point) (sweep.Outcome, error) {
		oc, err := runPoint(ctx, p)
		var ee *exitError
		if errors.As(err, &ee) && ee.code == ExitUsage {
			usage = err
			cancel()
		}
		return oc, err
	}
	results, err := sweep.Run(sctx, points, guarded, sweep.Options{
		StopOnSaturation: !o.NoStop,
		OnResult: func(r sweep.Result) {
			fmt.Fprintf(env.Stderr, "  %s: %s\n", r.Point.Label(), pointLine(r))
		},
	})
	if usage != nil {
		return usage
	}
	if werr := writeSweepJSON(filepath.Join(out, rundir.SweepFile), results, nil); werr != nil && err == nil {
		err = werr
	}
	if ctx.Err() != nil {
		// Ctrl-C: what ran is written and shown, and the exit says so.
		printSweepTable(env.Stdout, results)
		cut := "before its first point"
		if n := len(results); n > 0 && results[n-1].Outcome.Incomplete {
			cut = fmt.Sprintf("during %s, kept as incomplete", results[n-1].Point.Label())
		}
		return &exitError{code: 130, err: fmt.Errorf("sweep interrupted %s: %d of %d points in %s", cut, len(results), len(points), out)}
	}
	printSweepTable(env.Stdout, results)
	if o.Grid != "" {
		x, y, ok := strings.Cut(o.Grid, ",")
		if !ok {
			return usageErr("--grid %q: want X,Y (two --over names)", o.Grid)
		}
		cells, gerr := sweep.LinearDeviation(results, strings.TrimSpace(x), strings.TrimSpace(y))
		if gerr != nil {
			return usageErr("--grid: %v", gerr)
		}
		printGrid(env.Stdout, cells, x, y)
	}
	if len(params) == 1 {
		printCurve(env.Stdout, results)
	}
	if err != nil {
		return err
	}
	for _, r := range results {
		if r.Err != nil {
			return failErr("sweep: %s failed: %v", r.Point.Label(), r.Err)
		}
	}
	return nil
}

// runSubcommand runs one "ttft sim run" point in-process and reads its
// summary (a virtual-clock run needs no watching). A completed run whose
// gate failed (exit 1) still counts as a point.
func runSubcommand(ctx context.Context, env *Env, args []string, dir string) (sweep.Outcome, error) {
	var stderr bytes.Buffer
	sub := &Env{Args: args, Stdin: env.Stdin, Stdout: io.Discard, Stderr: &stderr, Getenv: env.Getenv}
	// A small root with only the commands a point runs (going through the
	// full root would make the command table refer to itself).
	root := &cobra.Command{Use: "ttft", SilenceUsage: true, SilenceErrors: true}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%s: %v", c.CommandPath(), err)
	})
	root.AddCommand(newBenchCmd(sub), newSimCmd(sub))
	root.SetArgs(args)
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	code := ExitOK
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(&stderr, "ttft:", err)
		code = ExitUsage
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
	}
	if code == ExitUsage {
		return sweep.Outcome{}, usageErr("ttft %s: %s", strings.Join(args, " "), lastLine(stderr.String()))
	}
	var sum record.Summary
	if err := record.ReadJSON(filepath.Join(dir, rundir.SummaryFile), &sum); err != nil {
		if ctx.Err() != nil {
			return sweep.Outcome{}, ctx.Err()
		}
		return sweep.Outcome{}, fmt.Errorf("exit %d, no summary: %s", code, lastLine(stderr.String()))
	}
	recs, _ := record.ReadJSONL(filepath.Join(dir, rundir.RequestsFile))
	return sweep.Outcome{Summary: sum, Records: recs, Dir: dir}, nil
}

// runBenchPoint runs one live point with bench's runner, in-process: its
// run directory is written as by "ttft bench", and its records also come
// here as they finish, so that a point whose queue clearly grows without
// bound is cut short (as by Ctrl-C: the summary of what completed is still
// written). A completed run whose gate failed (exit 1) still counts.
func runBenchPoint(ctx context.Context, env *Env, args []string, dir string) (sweep.Outcome, error) {
	o := &benchOptions{}
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addBenchFlags(fs, o)
	cmdline := "ttft bench " + strings.Join(args, " ")
	if err := fs.Parse(args); err != nil {
		return sweep.Outcome{}, usageErr("%s: %v", cmdline, err)
	}
	if fs.NArg() > 0 {
		return sweep.Outcome{}, usageErr("%s: unexpected argument %q", cmdline, fs.Arg(0))
	}
	o.args, o.flags, o.NoProgress = append([]string{"bench"}, args...), recordedFlags(fs), true
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &saturationWatch{stop: cancel}
	o.onRecord = w.observe
	var stderr bytes.Buffer
	sub := &Env{Args: o.args, Stdin: env.Stdin, Stdout: io.Discard, Stderr: &stderr, Getenv: env.Getenv}
	sum, err := runBench(runCtx, sub, o)
	var ee *exitError
	if err != nil && (!errors.As(err, &ee) || ee.code == ExitUsage) || sum.Schema == "" {
		if ctx.Err() != nil {
			return sweep.Outcome{}, ctx.Err()
		}
		if errors.As(err, &ee) && ee.code == ExitUsage {
			return sweep.Outcome{}, usageErr("%s: %v", cmdline, err)
		}
		return sweep.Outcome{}, fmt.Errorf("%s: %v", cmdline, err)
	}
	recs, why := w.result()
	return sweep.Outcome{Summary: sum, Records: recs, Dir: dir, StoppedEarly: why}, nil
}

// saturationWatch keeps a live point's records as they finish and stops
// the point once sweep.EarlySaturation fires (checked every 20 records).
type saturationWatch struct {
	mu   sync.Mutex
	recs []record.Record
	why  string
	stop func()
}

func (w *saturationWatch) observe(r *record.Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, *r)
	if w.why != "" || len(w.recs)%20 != 0 {
		return
	}
	if why := sweep.EarlySaturation(w.recs); why != "" {
		w.why = why
		w.stop()
	}
}

func (w *saturationWatch) result() ([]record.Record, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recs, w.why
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimPrefix(s, "ttft: ")
}

func runSearch(ctx context.Context, env *Env, o *sweepOptions, out string, runPoint sweep.RunFunc) error {
	name := strings.TrimPrefix(o.Search, "--")
	integer := name == "concurrency" || name == "max-concurrency" || strings.HasSuffix(name, "tokens") || name == "sessions"
	var results []sweep.Result
	var usage error
	pass := func(ctx context.Context, v float64) (bool, error) {
		val := strconv.FormatFloat(v, 'g', 6, 64)
		p := sweep.Point{Index: len(results), Settings: []sweep.Setting{{Name: name, Value: val}}}
		oc, err := runPoint(ctx, p)
		r := sweep.Result{Point: p, Outcome: oc, Err: err}
		results = append(results, r)
		if err != nil {
			var ee *exitError
			if errors.As(err, &ee) && ee.code == ExitUsage {
				usage = err
			}
			return false, err
		}
		if len(oc.Summary.SLO) == 0 {
			usage = usageErr("sweep --search: the runs report no SLO verdicts; add --scenario NAME|FILE after \"--\"")
			return false, usage
		}
		ok := true
		for _, v := range oc.Summary.SLO {
			ok = ok && v.Pass
		}
		fmt.Fprintf(env.Stderr, "  %s=%s: %s\n", name, val, verdictLine(oc.Summary.SLO))
		return ok, nil
	}
	fmt.Fprintf(env.Stderr, "ttft sweep: searching %s in [%g, %g]; results in %s\n", name, o.Lo, o.Hi, out)
	res, err := sweep.Search(ctx, sweep.SearchOptions{Lo: o.Lo, Hi: o.Hi, Integer: integer, Tolerance: o.Tolerance, Repeats: o.Repeats, MaxRuns: o.MaxRuns}, pass)
	if werr := writeSweepJSON(filepath.Join(out, rundir.SweepFile), results, &res); werr != nil && err == nil {
		err = werr
	}
	if usage != nil {
		return usage
	}
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return usageErr("sweep --search: %v", err)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\truns\tpassed\tverdict\n", name)
	for _, p := range res.Probes {
		v := "FAIL"
		if p.Pass {
			v = "PASS"
		}
		fmt.Fprintf(tw, "%g\t%d\t%d\t%s\n", p.Value, p.Runs, p.Passes, v)
	}
	_ = tw.Flush()
	if res.Best > 0 {
		fmt.Fprintf(env.Stdout, "highest %s meeting every SLO: %g\n", name, res.Best)
	} else {
		fmt.Fprintf(env.Stdout, "no %s in [%g, %g] meets every SLO\n", name, o.Lo, o.Hi)
	}
	if res.Note != "" {
		fmt.Fprintln(env.Stdout, "note:", res.Note)
	}
	if res.Best == 0 {
		return failErr("sweep --search: the SLOs fail at every probed %s", name)
	}
	return nil
}

func verdictLine(vs []record.SLOVerdict) string {
	var parts []string
	for _, v := range vs {
		s := "PASS"
		if !v.Pass {
			s = "FAIL"
		}
		parts = append(parts, fmt.Sprintf("%s %.1f/%.0f ms %s", v.Name, v.ValueMs, v.LimitMs, s))
	}
	return strings.Join(parts, ", ")
}

func pointLine(r sweep.Result) string {
	switch {
	case r.Skipped:
		return "skipped (an earlier point saturated)"
	case r.Err != nil:
		return "error: " + r.Err.Error()
	}
	s := r.Outcome.Summary
	line := fmt.Sprintf("TTFT P50 %.1f ms, P95 %.1f ms, %.2f req/s", s.JudgedTTFT().P50, s.JudgedTTFT().P95, s.Throughput.RequestsPerS)
	if len(s.SLO) > 0 {
		line += "; " + verdictLine(s.SLO)
	}
	if r.Saturated != "" {
		line += "; SATURATED: " + r.Saturated
	}
	return line
}

type sweepPointJSON struct {
	Index     int               `json:"index"`
	Settings  map[string]string `json:"settings"`
	Dir       string            `json:"dir,omitempty"`
	Error     string            `json:"error,omitempty"`
	Skipped   bool              `json:"skipped,omitempty"`
	Saturated string            `json:"saturated,omitempty"`
	// Incomplete: the sweep was interrupted during this point.
	Incomplete bool            `json:"incomplete,omitempty"`
	Summary    *record.Summary `json:"summary,omitempty"`
}

func writeSweepJSON(path string, results []sweep.Result, search *sweep.SearchResult) error {
	doc := struct {
		Schema string              `json:"schema"`
		Points []sweepPointJSON    `json:"points"`
		Search *sweep.SearchResult `json:"search,omitempty"`
	}{Schema: "ttft.sweep/v1", Search: search}
	for _, r := range results {
		p := sweepPointJSON{Index: r.Point.Index, Settings: map[string]string{}, Dir: r.Outcome.Dir, Skipped: r.Skipped, Saturated: r.Saturated, Incomplete: r.Outcome.Incomplete}
		for _, s := range r.Point.Settings {
			p.Settings[s.Name] = s.Value
		}
		if r.Err != nil {
			p.Error = r.Err.Error()
		} else if !r.Skipped {
			sum := r.Outcome.Summary
			p.Summary = &sum
		}
		doc.Points = append(doc.Points, p)
	}
	return record.WriteJSON(path, doc)
}

func printSweepTable(w io.Writer, results []sweep.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "point\tok/failed\tTTFT p50\tTTFT p95\tTTFT p99\tITL p50\tE2E p95\treq/s\tout tok/s\tnote")
	for _, r := range results {
		if r.Skipped || r.Err != nil {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t%s\n", r.Point.Label(), pointLine(r))
			continue
		}
		s := r.Outcome.Summary
		note := ""
		if len(s.SLO) > 0 {
			note = "SLO PASS"
			for _, v := range s.SLO {
				if !v.Pass {
					note = "SLO FAIL"
				}
			}
		}
		if r.Saturated != "" {
			note = strings.TrimSpace(note + " saturated")
		}
		if r.Outcome.Incomplete {
			note = strings.TrimSpace(note + " incomplete (interrupted)")
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%.2f\t%.0f\t%s\n", r.Point.Label(),
			s.Requests.Completed, s.Requests.Failed, s.JudgedTTFT().P50, s.JudgedTTFT().P95, s.JudgedTTFT().P99, s.ITL.P50, s.E2E.P95,
			s.Throughput.RequestsPerS, s.Throughput.OutputTokensPerS, note)
	}
	_ = tw.Flush()
}

func printGrid(w io.Writer, cells []sweep.Cell, x, y string) {
	fmt.Fprintf(w, "\nTTFT by %s × %s (deviation from latency = a + b·%s·%s fitted on the edge cells)\n", x, y, x, y)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\t%s\tP50 ms\tvs linear\tP95 ms\tvs linear\n", x, y)
	for _, c := range cells {
		if c.Missing {
			fmt.Fprintf(tw, "%g\t%g\t-\t\t-\t\n", c.X, c.Y)
			continue
		}
		fmt.Fprintf(tw, "%g\t%g\t%.1f\t%+.1f%%\t%.1f\t%+.1f%%\n", c.X, c.Y, c.P50, c.DevP50Pct, c.P95, c.DevP95Pct)
	}
	_ = tw.Flush()
}

// printCurve draws TTFT P50 (o) and P95 (x) against the swept value.
func printCurve(w io.Writer, results []sweep.Result) {
	var maxV float64
	for _, r := range results {
		if r.Err == nil && !r.Skipped {
			maxV = max(maxV, r.Outcome.Summary.JudgedTTFT().P95)
		}
	}
	if maxV <= 0 {
		return
	}
	const width = 50
	fmt.Fprintf(w, "\nTTFT (o = P50, x = P95; full width = %.1f ms)\n", maxV)
	for _, r := range results {
		if r.Err != nil || r.Skipped {
			continue
		}
		s := r.Outcome.Summary
		line := []byte(strings.Repeat(" ", width+1))
		p50 := int(s.JudgedTTFT().P50 / maxV * width)
		p95 := int(s.JudgedTTFT().P95 / maxV * width)
		for i := 0; i < p50; i++ {
			line[i] = '-'
		}
		line[p50] = 'o'
		line[p95] = 'x'
		fmt.Fprintf(w, "%-24s |%s\n", r.Point.Label(), strings.TrimRight(string(line), " "))
	}
}

// runAuto is the automatic sweep (GuideLLM's sweep profile): a synchronous
// run (concurrency 1) and a maximum-throughput run (--auto-concurrency in
// flight) bound the useful loads; --auto-rates open-loop rates evenly
// between their throughputs follow, lowest first, and stop at the first one
// that over-saturates (its queue grows without bound: throughput below the
// offered rate, schedule lag, TTFT rising through the run; --no-stop runs
// the rest anyway).
func runAuto(ctx context.Context, env *Env, o *sweepOptions, out string, passthrough []string, runPoint sweep.RunFunc) error {
	for _, a := range passthrough {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "rate" || name == "r" || name == "concurrency" || name == "c" || name == "rate-ramp" || name == "request-rate") {
			return usageErr("sweep --auto chooses the load of every run; drop %s after \"--\"", a)
		}
	}
	if o.AutoRates < 1 || o.AutoConcurrency < 2 {
		return usageErr("sweep --auto: --auto-rates must be at least 1 and --auto-concurrency at least 2")
	}
	fmt.Fprintf(env.Stderr, "ttft sweep --auto: synchronous, throughput at concurrency %d, then %d rates between; results in %s\n", o.AutoConcurrency, o.AutoRates, out)
	var results []sweep.Result
	show := func(r sweep.Result) {
		results = append(results, r)
		fmt.Fprintf(env.Stderr, "  %s: %s\n", r.Point.Label(), pointLine(r))
	}
	finish := func(err error) error {
		if werr := writeSweepJSON(filepath.Join(out, rundir.SweepFile), results, nil); werr != nil && err == nil {
			err = werr
		}
		printSweepTable(env.Stdout, results)
		return err
	}
	bound := func(label string, c int) (float64, error) {
		p := sweep.Point{Index: len(results), Settings: []sweep.Setting{{Name: "concurrency", Value: strconv.Itoa(c)}}}
		oc, err := runPoint(ctx, p)
		show(sweep.Result{Point: p, Outcome: oc, Err: err})
		if err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				return 0, err
			}
			return 0, failErr("sweep --auto: the %s run failed: %v", label, err)
		}
		return oc.Summary.Throughput.RequestsPerS, nil
	}
	syncRate, err := bound("synchronous", 1)
	if err != nil {
		return finish(err)
	}
	maxRate, err := bound("maximum-throughput", o.AutoConcurrency)
	if err != nil {
		return finish(err)
	}
	rates, err := sweep.AutoRates(syncRate, maxRate, o.AutoRates)
	if err != nil {
		return finish(failErr("sweep --auto: %v", err))
	}
	points := make([]sweep.Point, len(rates))
	for i, r := range rates {
		points[i] = sweep.Point{Index: len(results) + i, Settings: []sweep.Setting{{Name: "rate", Value: strconv.FormatFloat(r, 'g', -1, 64)}}}
	}
	rr, err := sweep.Run(ctx, points, runPoint, sweep.Options{StopOnSaturation: !o.NoStop, OnResult: func(r sweep.Result) {
		fmt.Fprintf(env.Stderr, "  %s: %s\n", r.Point.Label(), pointLine(r))
	}})
	results = append(results, rr...)
	if err = finish(err); err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: fmt.Errorf("sweep interrupted: %d points in %s", len(results), out)}
		}
		return err
	}
	best := 0.0
	for _, r := range rr {
		if r.Err == nil && !r.Skipped && r.Saturated == "" {
			v, _ := strconv.ParseFloat(r.Point.Settings[0].Value, 64)
			best = max(best, v)
		}
	}
	fmt.Fprintf(env.Stdout, "\nsynchronous %.3g req/s, maximum throughput %.3g req/s (concurrency %d)\n", syncRate, maxRate, o.AutoConcurrency)
	if best > 0 {
		fmt.Fprintf(env.Stdout, "highest rate without over-saturation: %g req/s\n", best)
	} else {
		fmt.Fprintln(env.Stdout, "every swept rate over-saturated the server")
	}
	for _, r := range rr {
		if r.Err != nil {
			return failErr("sweep: %s failed: %v", r.Point.Label(), r.Err)
		}
	}
	return nil
}

package cli

// ttft fit, ttft fit efficiency, ttft pareto and ttft rdd: the article's
// analyses (§2.4 latency model, §2.2 hardware efficiency, §4.4 cost/latency
// front, §4.1 threshold effect). The maths lives in internal/stats and the
// reading, pricing and shaping of inputs and results in internal/analysis;
// this file turns flags into a request, makes the call and prints tables or
// JSON.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/analysis"
	"github.com/ttft-dev/ttft/internal/stats"
)

// storeRuns reads stored runs for the analyses through the CLI's store
// opener (so the database is opened only when a RUN is not a path).
type storeRuns struct{ o *storeOpener }

func (s storeRuns) Run(ctx context.Context, ref string) (analysis.StoredRun, error) {
	l, err := loadRun(ctx, s.o, ref, false)
	if err != nil {
		return analysis.StoredRun{}, err
	}
	return analysis.StoredRun{Name: l.name(), Summary: l.Summary, Labels: l.Meta.Labels, Manifest: l.Manifest}, nil
}

// analysisInputs is standard input and the results store, for the analyses.
func analysisInputs(env *Env, so *storeOpener) analysis.Inputs {
	return analysis.Inputs{Stdin: env.Stdin, Store: storeRuns{so}}
}

// analysisErr makes an analysis' error a usage error of command cmd,
// naming the flag of an *analysis.OptionError (its options are named as
// the flags are).
func analysisErr(cmd string, err error) error {
	if oe, ok := errors.AsType[*analysis.OptionError](err); ok {
		return usageErr("%s: --%s: %v", cmd, oe.Option, oe.Err)
	}
	return usageErr("%s: %v", cmd, err)
}

// fmtNum prints a number compactly, "-" for NaN and "±inf" for infinities.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "+inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	a := math.Abs(v)
	switch {
	case a != 0 && (a < 1e-3 || a >= 1e7):
		return strconv.FormatFloat(v, 'e', 3, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	default:
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
}

func fmtCI(ci [2]float64) string { return "[" + fmtNum(ci[0]) + ", " + fmtNum(ci[1]) + "]" }

// ---------------------------------------------------------------- fit

type fitOptions struct {
	db           string
	metric, stat string
	predict      []string
	jsonOut      bool
}

func newFitCmd(env *Env) *cobra.Command {
	var o fitOptions
	cmd := &cobra.Command{
		Use:   "fit SWEEP.csv|RUN...",
		Short: "Fit latency(batch, context) to the article's nonlinear model and a linear baseline",
		Long: `Fit latency as a function of batch size b and context length ctx to

  latency = a·b^α·ctx^β + γ·b·ctx/1024 + δ/(1+exp(−(b·ctx/κ − 5)))

by Levenberg–Marquardt, with 95% confidence intervals of the parameters,
R², residuals, and a linear baseline c0 + c1·b + c2·ctx + c3·b·ctx (OLS)
for comparison.

Inputs are CSV files with columns batch, context and latency_ms (aliases:
batch_size/concurrency, ctx/prompt_tokens, latency/ttft_ms; other columns
are ignored; "-" reads standard input) and/or runs (directories, or stored
run IDs, unique prefixes or "latest") whose manifest.json labels carry the sweep point (batch: "batch", "batch_size",
"concurrency" or "max_num_seqs"; context: "context", "context_tokens",
"ctx" or "prompt_tokens") and whose summary.json gives the latency
(--metric, --stat).`,
		Example: `  ttft fit sweep.csv --predict 32,2048
  ttft fit runs/sweep-*/ --metric ttft --stat p95 --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runFit(cmd.Context(), env, o, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", dbFlagHelp)
	f.StringVar(&o.metric, "metric", "ttft", "latency read from run directories: ttft, ttfb, ttfc, itl, tpot, e2e")
	f.StringVar(&o.stat, "stat", "p50", "statistic read from run directories: mean, p50, p90, p95, p99")
	f.StringArrayVar(&o.predict, "predict", nil, "predict latency at `b,ctx` (repeatable)")
	f.BoolVar(&o.jsonOut, "json", false, "print JSON instead of tables")
	cmd.AddCommand(newEfficiencyCmd(env))
	return cmd
}

func parsePredict(ss []string) ([]analysis.FitPoint, error) {
	var out []analysis.FitPoint
	for _, s := range ss {
		bs, cs, ok := strings.Cut(s, ",")
		b, err1 := strconv.ParseFloat(strings.TrimSpace(bs), 64)
		c, err2 := strconv.ParseFloat(strings.TrimSpace(cs), 64)
		if !ok || err1 != nil || err2 != nil || !(b > 0) || !(c > 0) {
			return nil, fmt.Errorf("--predict %q: want two positive numbers b,ctx such as 32,2048", s)
		}
		out = append(out, analysis.FitPoint{Batch: b, Context: c})
	}
	return out, nil
}

func runFit(ctx context.Context, env *Env, o fitOptions, args []string) error {
	q := analysis.Statistic{Metric: o.metric, Stat: o.stat}
	if err := q.Check(); err != nil {
		return analysisErr("fit", err)
	}
	preds, err := parsePredict(o.predict)
	if err != nil {
		return usageErr("fit: %v", err)
	}
	so := &storeOpener{env: env, dsn: o.db}
	defer so.close()
	pts, err := analysis.ReadFitPoints(ctx, analysisInputs(env, so), expandRunArgs(args), q)
	if err != nil {
		return usageErr("fit: %v", err)
	}
	res, err := analysis.Fit(pts, preds)
	if err != nil {
		return usageErr("%v", err) // stats says "fitting latency: ..."
	}
	if o.jsonOut {
		return analysis.WriteJSON(env.Stdout, res)
	}
	printFit(env.Stdout, res)
	return nil
}

// printFit writes both models, every point's residuals under them (by
// batch, then context) and the predictions.
func printFit(w io.Writer, res *analysis.FitResult) {
	fit := res.Fit
	fmt.Fprintf(w, "Latency model fitted to %d points (ms)\n\n", len(fit.Points))
	printFitResult(w, "nonlinear", fit.Nonlinear)
	fmt.Fprintln(w)
	printFitResult(w, "linear baseline", fit.Linear)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tcontext\tobserved\tnonlinear\tresidual\tlinear\tresidual\tnonlinear vs linear\t")
	order := make([]int, len(fit.Points))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := fit.Points[a], fit.Points[b]
		if pa.Batch != pb.Batch {
			return cmp.Compare(pa.Batch, pb.Batch)
		}
		return cmp.Compare(pa.Context, pb.Context)
	})
	for _, i := range order {
		p := fit.Points[i]
		nl, lin := fit.Nonlinear.Fitted[i], fit.Linear.Fitted[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\t\n", fmtNum(p.Batch), fmtNum(p.Context), fmtNum(p.LatencyMs),
			fmtNum(nl), fmtNum(fit.Nonlinear.Residuals[i]), fmtNum(lin), fmtNum(fit.Linear.Residuals[i]), 100*(nl-lin)/lin)
	}
	tw.Flush()
	if len(res.Predictions) > 0 {
		fmt.Fprintln(w, "\npredictions:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  batch\tcontext\tnonlinear ms\t95% CI\tlinear ms\t95% CI\tnonlinear vs linear")
		for _, p := range res.Predictions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\n", fmtNum(p.Batch), fmtNum(p.Context), fmtNum(p.Nonlinear), fmtCI(p.CI95),
				fmtNum(p.Linear), fmtCI(p.LinearCI), 100*p.VsLinear)
		}
		tw.Flush()
	}
}

func printFitResult(w io.Writer, title string, r stats.FitResult) {
	fmt.Fprintf(w, "%s: %s\n", title, r.Model)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  param\tvalue\tSE\t95% CI")
	for _, p := range r.Params {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Name, fmtNum(p.Value), fmtNum(p.SE), fmtCI(p.CI95))
	}
	tw.Flush()
	conv := ""
	if r.Iterations > 0 {
		conv = fmt.Sprintf(", %d iterations", r.Iterations)
	}
	fmt.Fprintf(w, "  R² %.4f, adjusted R² %.4f, RMSE %s ms, %d points, %d degrees of freedom%s\n", r.R2, r.AdjR2, fmtNum(r.RMSE), r.N, r.DoF, conv)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

// ---------------------------------------------------------- efficiency

type efficiencyOptions struct {
	db                           string
	model, gpu, dtype, kvDtype   string
	gpus                         int
	itl, ttft, prompt, batch, cx float64
	jsonOut                      bool
}

func newEfficiencyCmd(env *Env) *cobra.Command {
	var o efficiencyOptions
	cmd := &cobra.Command{
		Use:   "efficiency [RUN]",
		Short: "Achieved memory-bandwidth and compute utilisation from measured ITL and TTFT",
		Long: `Estimate how much of the GPU's peak memory bandwidth decode achieves (bytes
read per step — the weights once plus every sequence's KV cache — divided
by the median ITL) and how much of its peak compute prefill achieves
(2·params·n + 2·layers·n²·hidden FLOPs divided by TTFT), as in the article's
§2.2 table. Architectures and GPU datasheets come from the simulator's
catalog (see "ttft model"). Give a run directory (its summary's median ITL
and TTFT, mean prompt length, and a "concurrency" label as the batch) or
the numbers as flags. TTFT includes network and queueing time, so the
compute figure is a lower bound; measure an idle server.`,
		Example: `  ttft fit efficiency --model llama-3-8b --gpu a100-80gb --itl-ms 14.3 --context 512
  ttft fit efficiency runs/vllm-70b --model llama-3-70b --gpu a100 --gpus 4`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runEfficiency(cmd.Context(), env, o, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", dbFlagHelp)
	f.StringVar(&o.model, "model", "", "model architecture from the catalog (required)")
	f.StringVar(&o.gpu, "gpu", "", "GPU from the catalog (required)")
	f.IntVar(&o.gpus, "gpus", 1, "GPUs per replica (tensor parallel)")
	f.StringVar(&o.dtype, "dtype", "bf16", "weight dtype: bf16, fp16, fp8, int8")
	f.StringVar(&o.kvDtype, "kv-dtype", "", "KV-cache dtype (default: --dtype, or bf16 for int8 weights)")
	f.Float64Var(&o.itl, "itl-ms", 0, "decode step time (median ITL) in ms")
	f.Float64Var(&o.ttft, "ttft-ms", 0, "prefill time (TTFT on an idle server) in ms")
	f.Float64Var(&o.prompt, "prompt-tokens", 0, "prompt length of the TTFT measurement")
	f.Float64Var(&o.batch, "batch", 0, "sequences decoding together (default 1, or the run's concurrency label)")
	f.Float64Var(&o.cx, "context", 0, "mean tokens in each sequence's KV cache during decode")
	f.BoolVar(&o.jsonOut, "json", false, "print JSON")
	return cmd
}

func runEfficiency(ctx context.Context, env *Env, o efficiencyOptions, args []string) error {
	if o.model == "" || o.gpu == "" {
		return usageErr("fit efficiency: --model and --gpu are required")
	}
	req := analysis.EfficiencyRequest{Model: o.model, GPU: o.gpu, GPUs: o.gpus, Dtype: o.dtype, KVDtype: o.kvDtype,
		Measure: stats.HWMeasure{ITLMs: o.itl, TTFTMs: o.ttft, PromptTokens: o.prompt, Batch: o.batch, Context: o.cx}}
	if len(args) == 1 {
		req.Run = args[0]
	}
	so := &storeOpener{env: env, dsn: o.db}
	defer so.close()
	res, err := analysis.Efficiency(ctx, analysisInputs(env, so), req)
	if err != nil {
		return analysisErr("fit efficiency", err)
	}
	if o.jsonOut {
		return analysis.WriteJSON(env.Stdout, res.Efficiency)
	}
	return printEfficiency(env.Stdout, res)
}

func printEfficiency(w io.Writer, res *analysis.EfficiencyResult) error {
	e, x := res.Efficiency, res.Measure
	fmt.Fprintf(w, "%s on %d× %s (%s weights, %s KV cache)\n", res.Model, res.GPUs, res.GPU, res.Dtype, res.KVDtype)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  phase\tmeasured\twork\tachieved\tpeak\tutilisation")
	if !math.IsNaN(e.AchievedGBs) {
		fmt.Fprintf(tw, "  decode\tITL %.2f ms (batch %g, context %.0f)\t%.2f GB/step\t%.0f GB/s\t%.0f GB/s\t%.1f%%\n",
			x.ITLMs, math.Max(x.Batch, 1), x.Context, e.BytesPerStep/1e9, e.AchievedGBs, e.PeakGBs, 100*e.BandwidthUtil)
	}
	if !math.IsNaN(e.AchievedTFLOPS) {
		fmt.Fprintf(tw, "  prefill\tTTFT %.1f ms (%.0f tokens)\t%.3g TFLOP\t%.1f TFLOPS\t%.0f TFLOPS\t%.1f%%\n",
			x.TTFTMs, x.PromptTokens, e.PrefillFLOPs/1e12, e.AchievedTFLOPS, e.PeakTFLOPS, 100*e.ComputeUtil)
	}
	return tw.Flush()
}

// -------------------------------------------------------------- pareto

type paretoOptions struct {
	db, svg              string
	prices, metric, stat string
	sloMs                float64
	jsonOut              bool
}

func newParetoCmd(env *Env) *cobra.Command {
	var o paretoOptions
	cmd := &cobra.Command{
		Use:   "pareto RUN...",
		Short: "Cost per token and per request against latency; mark the Pareto-optimal configurations",
		Long: `For each run (a run directory with summary.json and a manifest.json
whose labels say what served it, or a stored run: an ID, a unique prefix
of one, or "latest"), compute the hourly cost, cost per million output tokens
and per request, throughput and a latency statistic, and mark the
configurations no other beats on both cost and latency.

Self-hosted runs carry labels gpu (a catalog GPU such as a10g, l4,
a100-80gb, h100), gpus (per replica, default 1) and replicas (default 1);
they cost gpus × replicas × USD per GPU-hour, spread over the measured
throughput (so measure at saturation for capacity costs). Runs without a
gpu label are priced as hosted APIs by their model (USD per million input
and output tokens). GPU prices come from the simulator's catalog, API
prices from an embedded list; --prices FILE overrides both (YAML
"gpus: {a10g: 1.01}" / "apis: {gpt-4o: {input: 2.5, output: 10}}", or CSV
"kind,name,price,output"). A "name" label names the row.`,
		Example: `  ttft pareto runs/a10g-bs8 runs/l4-bs16 runs/a10g-bs16 --slo-ms 150
  ttft pareto runs/* --prices my-prices.yaml --stat p99 --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runPareto(cmd.Context(), env, o, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.db, "db", "", dbFlagHelp)
	f.StringVar(&o.prices, "prices", "", "price list `FILE` (YAML or CSV) overriding the defaults")
	f.StringVar(&o.metric, "metric", "ttft", "latency axis: ttft, ttfb, ttfc, itl, tpot, e2e")
	f.StringVar(&o.stat, "stat", "p95", "statistic of the latency axis: mean, p50, p90, p95, p99")
	f.Float64Var(&o.sloMs, "slo-ms", 0, "also name the cheapest configuration whose latency is within this many ms")
	f.StringVar(&o.svg, "svg", "", "also write the cost/latency plot to `FILE` (self-contained SVG)")
	f.BoolVar(&o.jsonOut, "json", false, "print JSON (the points, front and pick)")
	return cmd
}

func runPareto(ctx context.Context, env *Env, o paretoOptions, args []string) error {
	so := &storeOpener{env: env, dsn: o.db}
	defer so.close()
	res, err := analysis.Pareto(ctx, analysisInputs(env, so), analysis.ParetoRequest{
		Runs: expandRunArgs(args), Latency: analysis.Statistic{Metric: o.metric, Stat: o.stat}, Prices: o.prices, SLOMs: o.sloMs})
	if err != nil {
		return analysisErr("pareto", err)
	}
	if o.svg != "" {
		if err := os.WriteFile(o.svg, []byte(res.SVG()), 0o644); err != nil {
			return failErr("pareto: writing the plot: %v", err)
		}
	}
	if o.jsonOut {
		return analysis.WriteJSON(env.Stdout, res)
	}
	printPareto(env.Stdout, res)
	return nil
}

// printPareto writes the configurations by cost, the front and the pick.
func printPareto(w io.Writer, res *analysis.ParetoResult) {
	marked := res.Points
	order := make([]int, len(marked))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		pa, pb := marked[a], marked[b]
		switch {
		case pa.Cost < pb.Cost:
			return -1
		case pa.Cost > pb.Cost:
			return 1
		}
		return 0
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tconfiguration\tpriced as\t$/hour\treq/s\tout tok/s\t$/M out tokens\tµ$/request\t%s ms\n", res.AxisLabel())
	for _, i := range order {
		p := marked[i]
		mark := ""
		if p.Optimal {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, p.Name, p.Labels["priced_as"], fmtNum(p.CostPerHour), fmtNum(p.Throughput),
			fmtNum(p.TokensPerS), fmtNum(p.Cost), fmtNum(p.CostPerRequest*1e6), fmtNum(p.Latency))
	}
	tw.Flush()
	var names []string
	for _, p := range res.Front {
		names = append(names, p.Name)
	}
	fmt.Fprintf(w, "\n* Pareto-optimal (no configuration is both cheaper and faster): %s\n", strings.Join(names, " → "))
	if res.SLOMs > 0 {
		if pick := res.Pick; pick != nil {
			fmt.Fprintf(w, "cheapest with %s %s ≤ %g ms: %s ($%s per M output tokens, %s ms)\n", strings.ToUpper(res.Metric), res.Stat, res.SLOMs, pick.Name, fmtNum(pick.Cost), fmtNum(pick.Latency))
		} else {
			fmt.Fprintf(w, "no configuration has %s %s ≤ %g ms\n", strings.ToUpper(res.Metric), res.Stat, res.SLOMs)
		}
	}
}

// ----------------------------------------------------------------- rdd

type rddOptions struct {
	running, outcome, covariates string
	treatment                    string
	cutoff, bandwidth, donut     float64
	placebos                     []float64
	noPlacebos, jsonOut          bool
	synth                        int
	effect                       float64
	seed                         int64
	out                          string
}

func newRDDCmd(env *Env) *cobra.Command {
	var o rddOptions
	cmd := &cobra.Command{
		Use:   "rdd SESSIONS.csv",
		Short: "Regression discontinuity: the effect of crossing a TTFT threshold on an outcome such as retention",
		Long: `Estimate the jump in an outcome (e.g. next-day retention, 0/1) where TTFT
crosses a cutoff, from a CSV of sessions: a local-linear regression on each
side with a triangular kernel and the Imbens–Kalyanaraman MSE-optimal
bandwidth, a conventional and a robust bias-corrected 95% interval
(Calonico–Cattaneo–Titiunik with pilot bandwidth = main bandwidth), an
optional donut that drops sessions within ±D ms of the cutoff, McCrary's
density test, covariate balance (standardised jump at the cutoff),
placebo cutoffs, and the naive regression estimate beside them — the
article's §4.1 table. With --treatment COL the design is fuzzy: crossing
the cutoff changes the chance of treatment, and the effect of treatment is
the outcome's jump divided by the treatment's (local IV); placebos then
show the outcome's jump.

The CSV has a header; --running names the TTFT column, --outcome the
outcome, and every other column is a covariate unless --covariates lists
them ("none" for none). Empty cells are missing values.

--synth N writes N synthetic sessions with a known effect instead (see
docs/analyses.md for the generating model).`,
		Example: `  ttft rdd --synth 200000 --effect -0.028 --seed 1 -o sessions.csv
  ttft rdd sessions.csv --cutoff 300 --donut 20`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runRDD(env, o, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.running, "running", "ttft_ms", "running-variable column (TTFT in ms)")
	f.StringVar(&o.outcome, "outcome", "retained", "outcome column")
	f.StringVar(&o.covariates, "covariates", "", "comma-separated covariate columns (default: all others; \"none\" for none)")
	f.StringVar(&o.treatment, "treatment", "", "treatment column for a fuzzy design (effect = outcome jump / treatment jump)")
	f.Float64Var(&o.cutoff, "cutoff", 300, "cutoff on the running variable")
	f.Float64Var(&o.bandwidth, "bandwidth", 0, "bandwidth (0: Imbens–Kalyanaraman)")
	f.Float64Var(&o.donut, "donut", 0, "drop sessions within ± this distance of the cutoff (the article's ±20 ms band)")
	f.Float64SliceVar(&o.placebos, "placebo", nil, "placebo cutoffs (default: cutoff ± 1 and 2 bandwidths)")
	f.BoolVar(&o.noPlacebos, "no-placebos", false, "skip the placebo cutoffs")
	f.BoolVar(&o.jsonOut, "json", false, "print JSON")
	f.IntVar(&o.synth, "synth", 0, "write `N` synthetic sessions to -o instead of analysing")
	f.Float64Var(&o.effect, "effect", -0.028, "with --synth: the true jump in retention at the cutoff")
	f.Int64Var(&o.seed, "seed", 1, "with --synth: random seed")
	f.StringVarP(&o.out, "output", "o", "", "with --synth: output CSV (\"-\" for standard output)")
	return cmd
}

func runRDD(env *Env, o rddOptions, args []string) error {
	if o.synth != 0 {
		return runRDDSynth(env, o, args)
	}
	if len(args) != 1 {
		return usageErr("rdd: give a sessions CSV (or --synth N -o FILE to make one)")
	}
	t, err := analysis.Inputs{Stdin: env.Stdin}.ReadTable(args[0])
	if err != nil {
		return usageErr("rdd: %v", err)
	}
	res, err := analysis.RDD(t, analysis.RDDRequest{Running: o.running, Outcome: o.outcome, Covariates: o.covariates, Treatment: o.treatment,
		Options: stats.RDDOptions{Cutoff: o.cutoff, Bandwidth: o.bandwidth, Donut: o.donut, Placebos: o.placebos, NoPlacebos: o.noPlacebos}})
	if err != nil {
		if _, ok := errors.AsType[*analysis.OptionError](err); ok {
			return analysisErr("rdd", err)
		}
		return usageErr("%s: %v", t.Name, err) // stats says "rdd: ..."
	}
	if o.jsonOut {
		return analysis.WriteJSON(env.Stdout, res.Result)
	}
	printRDD(env.Stdout, res.Result, o, t.Name, res.BinaryOutcome)
	return nil
}

// runRDDSynth writes --synth N synthetic sessions with a known effect.
func runRDDSynth(env *Env, o rddOptions, args []string) error {
	if len(args) > 0 {
		return usageErr("rdd: --synth writes data; it takes no input file")
	}
	if o.synth < 0 || o.synth > 50_000_000 {
		return usageErr("rdd: --synth %d: want 1 to 50000000 sessions", o.synth)
	}
	if o.out == "" {
		return usageErr("rdd: --synth needs -o FILE (or -o - for standard output)")
	}
	if math.Abs(o.effect) >= 0.4 {
		return usageErr("rdd: --effect %g: want a retention change between -0.4 and 0.4", o.effect)
	}
	t := stats.SynthSessions(o.synth, o.effect, o.cutoff, o.seed)
	if o.out == "-" {
		return t.WriteCSV(env.Stdout)
	}
	f, err := os.Create(o.out)
	if err != nil {
		return usageErr("rdd: %v", err)
	}
	if err := t.WriteCSV(f); err != nil {
		f.Close()
		return failErr("rdd: writing %s: %v", o.out, err)
	}
	if err := f.Close(); err != nil {
		return failErr("rdd: writing %s: %v", o.out, err)
	}
	fmt.Fprintf(env.Stderr, "wrote %d sessions to %s (true effect %+g at %g ms)\n", o.synth, o.out, o.effect, o.cutoff)
	return nil
}

// printRDD writes the article's §4.1 table; a binary outcome's effects
// read as percentage points.
func printRDD(w io.Writer, r stats.RDDResult, o rddOptions, name string, binary bool) {
	val := func(v float64) string {
		if math.IsNaN(v) {
			return "-"
		}
		if binary {
			return fmt.Sprintf("%+.2f pp", 100*v)
		}
		return fmtNum(v)
	}
	ci := func(c [2]float64) string {
		if math.IsNaN(c[0]) || math.IsNaN(c[1]) {
			return "-"
		}
		if binary {
			return fmt.Sprintf("[%+.2f, %+.2f] pp", 100*c[0], 100*c[1])
		}
		return fmtCI(c)
	}
	pv := func(p float64) string {
		switch {
		case math.IsNaN(p):
			return "-"
		case p < 0.001:
			return "<0.001"
		}
		return fmt.Sprintf("%.3f", p)
	}
	fmt.Fprintf(w, "Regression discontinuity (%s) of %s at %s = %g (%s, %d sessions)\n", r.Design, o.outcome, o.running, r.Cutoff, name, r.N)
	fmt.Fprintf(w, "bandwidth %s (%s)", fmtNum(r.Bandwidth), r.BandwidthRule)
	if r.Donut > 0 {
		fmt.Fprintf(w, ", donut ±%g", r.Donut)
	}
	fmt.Fprintf(w, "; %d sessions below and %d above within it\n", r.NBelow, r.NAbove)
	fmt.Fprintf(w, "outcome at the cutoff: %s from below, %s from above\n\n", fmtNum(r.LevelBelow), fmtNum(r.LevelAbove))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "estimate\teffect\t95% CI\tp")
	if r.FirstStage != nil {
		fs := *r.FirstStage
		fmt.Fprintf(tw, "first stage: jump in %s\t%+.3f\t%s\t%s\n", o.treatment, fs.Value, fmtCI(fs.CI95), pv(fs.PValue))
	}
	fmt.Fprintf(tw, "RDD local linear (conventional)\t%s\t%s\t%s\n", val(r.Conventional.Value), ci(r.Conventional.CI95), pv(r.Conventional.PValue))
	fmt.Fprintf(tw, "RDD robust bias-corrected\t%s\t%s\t%s\n", val(r.Robust.Value), ci(r.Robust.CI95), pv(r.Robust.PValue))
	fmt.Fprintf(tw, "naive %s\t%s\t%s\t%s\n", r.NaiveMethod, val(r.Naive.Value), ci(r.Naive.CI95), pv(r.Naive.PValue))
	tw.Flush()
	fmt.Fprintf(w, "\nMcCrary density test: log-density jump %s (SE %s), p = %s\n", fmtNum(r.Density.Theta), fmtNum(r.Density.SE), pv(r.Density.PValue))
	if len(r.Balance) > 0 {
		fmt.Fprintln(w, "covariate balance at the cutoff (standardised jump; |SMD| < 0.1 is balanced):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  covariate\tmean below\tmean above\tSMD\tp")
		for _, b := range r.Balance {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%+.3f\t%s\n", b.Name, fmtNum(b.MeanBelow), fmtNum(b.MeanAbove), b.SMD, pv(b.Jump.PValue))
		}
		tw.Flush()
	}
	if len(r.Placebos) > 0 {
		fmt.Fprintln(w, "placebo cutoffs (no jump expected):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  cutoff\teffect\t95% CI\tp\tsessions")
		for _, p := range r.Placebos {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\n", fmtNum(p.Cutoff), val(p.Estimate.Value), ci(p.Estimate.CI95), pv(p.Estimate.PValue), p.N)
		}
		tw.Flush()
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

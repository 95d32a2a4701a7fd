package cli

// ttft fit, ttft fit efficiency, ttft pareto and ttft rdd: the article's
// analyses (§2.4 latency model, §2.2 hardware efficiency, §4.4 cost/latency
// front, §4.1 threshold effect). The maths lives in internal/stats; this
// file reads inputs, calls it and prints tables or JSON.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/stats/pricing"
)

// Labels read from manifest.json for sweep points, in order of preference.
var (
	batchLabels   = []string{"batch", "batch_size", "concurrency", "max_num_seqs"}
	contextLabels = []string{"context", "context_tokens", "ctx", "prompt_tokens"}
)

// CSV column names accepted for sweep points, in order of preference.
var (
	batchCols   = []string{"batch", "batch_size", "b", "concurrency"}
	contextCols = []string{"context", "ctx", "context_tokens", "prompt_tokens"}
	latencyCols = []string{"latency_ms", "latency", "ttft_ms", "ttft_p50_ms", "p50_ms"}
)

// analysisRun is a run directory as the analyses read it.
type analysisRun struct {
	Dir      string
	Name     string
	Summary  record.Summary
	Manifest record.Manifest
	Labels   map[string]string
}

// loadAnalysisRun reads DIR/summary.json (required) and DIR/manifest.json
// (optional: without it the run has no labels). A path to a summary.json
// file is accepted too.
func loadAnalysisRun(path string) (*analysisRun, error) {
	dir := path
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reading run %s: %w", path, err)
	} else if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	r := &analysisRun{Dir: dir, Name: filepath.Base(filepath.Clean(dir))}
	if err := record.ReadJSON(filepath.Join(dir, rundir.SummaryFile), &r.Summary); err != nil {
		return nil, err
	}
	mp := filepath.Join(dir, rundir.ManifestFile)
	if _, err := os.Stat(mp); err == nil {
		if err := record.ReadJSON(mp, &r.Manifest); err != nil {
			return nil, err
		}
	}
	r.Labels = r.Manifest.Labels
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	if n := r.Labels["name"]; n != "" {
		r.Name = n
	}
	return r, nil
}

// looksLikePath reports whether a RUN argument that does not exist was
// meant as a file (so the error should be about the file, and the results
// store is not opened — or created — for a typo).
func looksLikePath(arg string) bool {
	return strings.ContainsAny(arg, `/\`) || strings.HasSuffix(strings.ToLower(arg), ".csv") || strings.HasSuffix(strings.ToLower(arg), ".json")
}

// resolveAnalysisRun reads a run directory (or summary.json) directly, and
// anything else that is not a path as a stored run — an ID, a unique
// prefix of one, or "latest" — through the results store.
func resolveAnalysisRun(ctx context.Context, o *storeOpener, arg string) (*analysisRun, error) {
	if _, err := os.Stat(arg); err == nil || looksLikePath(arg) {
		return loadAnalysisRun(arg)
	}
	l, err := loadRun(ctx, o, arg, false)
	if err != nil {
		return nil, err
	}
	r := &analysisRun{Dir: arg, Name: l.name(), Summary: l.Summary, Labels: l.Meta.Labels}
	if len(l.Manifest) > 0 {
		if err := json.Unmarshal(l.Manifest, &r.Manifest); err != nil {
			return nil, fmt.Errorf("run %s: stored manifest: %w", arg, err)
		}
	}
	if r.Labels == nil {
		r.Labels = r.Manifest.Labels
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	return r, nil
}

// label returns the first of keys found in the manifest's labels, else in
// its recorded command-line flags (where "prompt_tokens" is spelt
// "prompt-tokens"): a single bench or sim run says its concurrency and
// prompt length only there.
func (r *analysisRun) label(keys []string) (string, string, bool) {
	for _, k := range keys {
		if v, ok := r.Labels[k]; ok && v != "" {
			return k, v, true
		}
	}
	for _, k := range keys {
		for _, fk := range []string{k, strings.ReplaceAll(k, "_", "-")} {
			if v, ok := r.Manifest.Flags[fk]; ok && v != "" {
				return "--" + fk, v, true
			}
		}
	}
	return "", "", false
}

func (r *analysisRun) model() string {
	if r.Manifest.Model != "" {
		return r.Manifest.Model
	}
	return r.Summary.Model
}

// summaryMetric picks a latency distribution out of a summary.
func summaryMetric(s *record.Summary, metric string) (record.Metric, error) {
	switch strings.ToLower(metric) {
	case "ttft":
		return s.TTFT, nil
	case "ttfb":
		return s.TTFB, nil
	case "ttfc":
		return s.TTFC, nil
	case "itl":
		return s.ITL, nil
	case "tpot":
		return s.TPOT, nil
	case "e2e":
		return s.E2E, nil
	}
	return record.Metric{}, fmt.Errorf("unknown metric %q (want ttft, ttfb, ttfc, itl, tpot or e2e)", metric)
}

func metricStat(m record.Metric, stat string) (float64, error) {
	switch strings.ToLower(stat) {
	case "mean":
		return m.Mean, nil
	case "p50", "median":
		return m.P50, nil
	case "p90":
		return m.P90, nil
	case "p95":
		return m.P95, nil
	case "p99":
		return m.P99, nil
	case "p99_9", "p999":
		return m.P999, nil
	case "max":
		return m.Max, nil
	}
	return 0, fmt.Errorf("unknown statistic %q (want mean, p50, p90, p95, p99, p99_9 or max)", stat)
}

// writeAnalysisJSON writes v as indented JSON with NaN and ±Inf as null
// (encoding/json refuses them, and an undetermined interval is a fact
// worth keeping).
func writeAnalysisJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(jsonable(reflect.ValueOf(v)), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func jsonable(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if e, ok := v.Interface().(error); ok {
			return e.Error()
		}
		return jsonable(v.Elem())
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Struct:
		if t, ok := v.Interface().(time.Time); ok {
			return t
		}
		m := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omit") && fv.IsZero() {
				continue
			}
			m[name] = jsonable(fv)
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonable(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		it := v.MapRange()
		for it.Next() {
			out[fmt.Sprint(it.Key().Interface())] = jsonable(it.Value())
		}
		return out
	}
	return v.Interface()
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

func openInput(env *Env, path string) (io.ReadCloser, string, error) {
	if path == "-" {
		if env.Stdin == nil {
			return nil, "", errors.New("no standard input")
		}
		return io.NopCloser(env.Stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

func firstCol(t *stats.Table, names []string, what string) ([]float64, error) {
	for _, n := range names {
		if c, ok := t.Col(n); ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no %s column (want one of %s; columns: %s)", t.Name, what, strings.Join(names, ", "), strings.Join(t.Columns, ", "))
}

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

type fitPrediction struct{ b, ctx float64 }

func parsePredict(ss []string) ([]fitPrediction, error) {
	var out []fitPrediction
	for _, s := range ss {
		bs, cs, ok := strings.Cut(s, ",")
		b, err1 := strconv.ParseFloat(strings.TrimSpace(bs), 64)
		c, err2 := strconv.ParseFloat(strings.TrimSpace(cs), 64)
		if !ok || err1 != nil || err2 != nil || !(b > 0) || !(c > 0) {
			return nil, fmt.Errorf("--predict %q: want two positive numbers b,ctx such as 32,2048", s)
		}
		out = append(out, fitPrediction{b, c})
	}
	return out, nil
}

func readFitPoints(ctx context.Context, env *Env, so *storeOpener, args []string, metric, stat string) ([]stats.LatencyPoint, error) {
	var pts []stats.LatencyPoint
	for _, a := range expandRunArgs(args) {
		st, statErr := os.Stat(a)
		if (statErr == nil && st.IsDir()) || (statErr != nil && a != "-" && !looksLikePath(a)) {
			r, err := resolveAnalysisRun(ctx, so, a)
			if err != nil {
				return nil, err
			}
			bk, bv, ok1 := r.label(batchLabels)
			ck, cv, ok2 := r.label(contextLabels)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("run %s: manifest.json labels (or flags) need a batch (%s) and a context (%s); labels are %v",
					a, strings.Join(batchLabels, "/"), strings.Join(contextLabels, "/"), r.Labels)
			}
			b, err := strconv.ParseFloat(bv, 64)
			if err != nil {
				return nil, fmt.Errorf("run %s: %s=%q is not a number", a, bk, bv)
			}
			c, err := strconv.ParseFloat(cv, 64)
			if err != nil {
				return nil, fmt.Errorf("run %s: %s=%q is not a number", a, ck, cv)
			}
			m, err := summaryMetric(&r.Summary, metric)
			if err != nil {
				return nil, err
			}
			v, err := metricStat(m, stat)
			if err != nil {
				return nil, err
			}
			if m.Count == 0 {
				return nil, fmt.Errorf("run %s: summary.json has no %s measurements", a, metric)
			}
			pts = append(pts, stats.LatencyPoint{Batch: b, Context: c, LatencyMs: v, Label: a})
			continue
		}
		rc, name, err := openInput(env, a)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", a, err)
		}
		t, err := stats.ReadNumericCSV(rc, name)
		rc.Close()
		if err != nil {
			return nil, err
		}
		bc, err := firstCol(t, batchCols, "batch")
		if err != nil {
			return nil, err
		}
		cc, err := firstCol(t, contextCols, "context")
		if err != nil {
			return nil, err
		}
		lc, err := firstCol(t, latencyCols, "latency")
		if err != nil {
			return nil, err
		}
		for i := range t.Rows() {
			pts = append(pts, stats.LatencyPoint{Batch: bc[i], Context: cc[i], LatencyMs: lc[i], Label: fmt.Sprintf("%s row %d", name, i+1)})
		}
	}
	return pts, nil
}

func runFit(ctx context.Context, env *Env, o fitOptions, args []string) error {
	if _, err := metricStat(record.Metric{}, o.stat); err != nil {
		return usageErr("fit: --stat: %v", err)
	}
	if _, err := summaryMetric(&record.Summary{}, o.metric); err != nil {
		return usageErr("fit: --metric: %v", err)
	}
	preds, err := parsePredict(o.predict)
	if err != nil {
		return usageErr("fit: %v", err)
	}
	so := &storeOpener{env: env, dsn: o.db}
	defer so.close()
	pts, err := readFitPoints(ctx, env, so, args, o.metric, o.stat)
	if err != nil {
		return usageErr("fit: %v", err)
	}
	fit, err := stats.FitLatency(pts)
	if err != nil {
		return usageErr("%v", err)
	}
	var out []stats.Prediction
	for _, p := range preds {
		out = append(out, fit.Predict(p.b, p.ctx))
	}
	if o.jsonOut {
		return writeAnalysisJSON(env.Stdout, struct {
			Fit         stats.LatencyFit   `json:"fit"`
			Predictions []stats.Prediction `json:"predictions,omitempty"`
		}{fit, out})
	}
	w := env.Stdout
	fmt.Fprintf(w, "Latency model fitted to %d points (ms)\n\n", len(pts))
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
	if len(out) > 0 {
		fmt.Fprintln(w, "\npredictions:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  batch\tcontext\tnonlinear ms\t95% CI\tlinear ms\t95% CI\tnonlinear vs linear")
		for _, p := range out {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\n", fmtNum(p.Batch), fmtNum(p.Context), fmtNum(p.Nonlinear), fmtCI(p.CI95),
				fmtNum(p.Linear), fmtCI(p.LinearCI), 100*p.VsLinear)
		}
		tw.Flush()
	}
	return nil
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

func dtypeBytes(d string) (float64, error) {
	switch strings.ToLower(d) {
	case "bf16", "fp16", "float16", "bfloat16":
		return 2, nil
	case "fp8", "int8":
		return 1, nil
	case "fp32", "float32":
		return 4, nil
	case "int4", "fp4":
		return 0.5, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want bf16, fp16, fp8, int8, int4 or fp32)", d)
}

func runEfficiency(ctx context.Context, env *Env, o efficiencyOptions, args []string) error {
	if o.model == "" || o.gpu == "" {
		return usageErr("fit efficiency: --model and --gpu are required")
	}
	cat := sim.DefaultCatalog()
	m, err := cat.Model(o.model)
	if err != nil {
		return usageErr("fit efficiency: %v", err)
	}
	g, err := cat.GPU(o.gpu)
	if err != nil {
		return usageErr("fit efficiency: %v", err)
	}
	wb, err := dtypeBytes(o.dtype)
	if err != nil {
		return usageErr("fit efficiency: --dtype: %v", err)
	}
	kvd := o.kvDtype
	if kvd == "" {
		kvd = o.dtype
		if strings.EqualFold(kvd, "int8") || strings.EqualFold(kvd, "int4") {
			kvd = "bf16"
		}
	}
	kb, err := dtypeBytes(kvd)
	if err != nil {
		return usageErr("fit efficiency: --kv-dtype: %v", err)
	}
	tflops := g.TFLOPS[strings.ToLower(o.dtype)]
	if tflops == 0 {
		tflops = g.TFLOPS["bf16"]
	}
	if tflops == 0 {
		tflops = g.TFLOPS["fp16"]
	}
	x := stats.HWMeasure{ITLMs: o.itl, TTFTMs: o.ttft, PromptTokens: o.prompt, Batch: o.batch, Context: o.cx}
	if len(args) == 1 {
		so := &storeOpener{env: env, dsn: o.db}
		defer so.close()
		r, err := resolveAnalysisRun(ctx, so, args[0])
		if err != nil {
			return usageErr("fit efficiency: %v", err)
		}
		s := r.Summary
		done := float64(s.Requests.Completed)
		if x.ITLMs == 0 {
			x.ITLMs = s.ITL.P50
		}
		if x.TTFTMs == 0 {
			x.TTFTMs = s.TTFT.P50
		}
		if done > 0 {
			prompt := float64(s.Tokens.Prompt)
			if s.Tokens.PromptUsage > 0 {
				prompt = float64(s.Tokens.PromptUsage)
			}
			out := float64(s.Tokens.OutputUsage)
			if out == 0 {
				out = float64(s.Tokens.OutputEvents)
			}
			if x.PromptTokens == 0 {
				x.PromptTokens = prompt / done
			}
			if x.Context == 0 {
				x.Context = (prompt + out/2) / done
			}
		}
		if x.Batch == 0 {
			if _, v, ok := r.label([]string{"concurrency"}); ok {
				if b, err := strconv.ParseFloat(v, 64); err == nil {
					x.Batch = b
				}
			}
		}
	}
	params := m.ParamsB
	if m.ActiveParamsB > 0 {
		params = m.ActiveParamsB
	}
	e, err := stats.HardwareEfficiency(
		stats.HWModel{ParamsB: params, Layers: m.Layers, Hidden: m.Heads * m.HeadDim, KVHeads: m.KVHeads, HeadDim: m.HeadDim, WeightBytes: wb, KVBytes: kb},
		stats.HWDevice{BandwidthGBs: g.BandwidthGBs, TFLOPS: tflops, GPUs: o.gpus}, x)
	if err != nil {
		return usageErr("fit efficiency: %v", err)
	}
	if o.jsonOut {
		return writeAnalysisJSON(env.Stdout, e)
	}
	w := env.Stdout
	fmt.Fprintf(w, "%s on %d× %s (%s weights, %s KV cache)\n", m.Name, max(o.gpus, 1), g.Name, o.dtype, kvd)
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

func loadPrices(path string) (*pricing.List, error) {
	l := pricing.Default()
	for _, g := range sim.DefaultCatalog().GPUs {
		if g.PricePerHour > 0 {
			l.GPUs[pricing.Norm(g.Name)] = g.PricePerHour
		}
	}
	if path == "" {
		return l, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading prices: %w", err)
	}
	defer f.Close()
	user, err := pricing.Parse(f, path)
	if err != nil {
		return nil, err
	}
	l.Merge(user)
	return l, nil
}

// paretoPoint prices one run.
func paretoPoint(r *analysisRun, prices *pricing.List, cat *sim.Catalog, metric, stat string) (stats.ParetoPoint, error) {
	m, err := summaryMetric(&r.Summary, metric)
	if err != nil {
		return stats.ParetoPoint{}, err
	}
	lat, err := metricStat(m, stat)
	if err != nil {
		return stats.ParetoPoint{}, err
	}
	if m.Count == 0 {
		return stats.ParetoPoint{}, fmt.Errorf("run %s: no %s measurements in summary.json", r.Dir, metric)
	}
	s := r.Summary
	p := stats.ParetoPoint{Name: r.Name, Latency: lat, Throughput: s.Throughput.RequestsPerS, TokensPerS: s.Throughput.OutputTokensPerS, Labels: map[string]string{}}
	if gpu := r.Labels["gpu"]; gpu != "" {
		name := gpu
		price, ok := prices.GPU(gpu)
		if g, err := cat.GPU(gpu); err == nil {
			name = g.Name
			if v, ok2 := prices.GPU(g.Name); ok2 && !ok {
				price, ok = v, true
			}
		}
		if !ok {
			return p, fmt.Errorf("run %s: no price for GPU %q (add it to --prices: gpus: {%s: USD_PER_HOUR})", r.Dir, gpu, pricing.Norm(gpu))
		}
		n := 1
		for _, k := range []string{"gpus", "replicas"} {
			if v := r.Labels[k]; v != "" {
				x, err := strconv.Atoi(v)
				if err != nil || x < 1 {
					return p, fmt.Errorf("run %s: label %s=%q is not a positive integer", r.Dir, k, v)
				}
				n *= x
			}
		}
		p.CostPerHour, p.Cost, p.CostPerRequest = stats.GPUCost(price, n, s.Throughput.RequestsPerS, s.Throughput.OutputTokensPerS)
		p.Labels["priced_as"] = fmt.Sprintf("%d× %s at $%.2f/h", n, name, price)
		return p, nil
	}
	model := r.model()
	ap, ok := prices.API(model)
	if !ok {
		return p, fmt.Errorf("run %s: no gpu label and no API price for model %q (label the run with gpu=..., or add apis: {%s: {input: X, output: Y}} to --prices)", r.Dir, model, pricing.Norm(model))
	}
	in := float64(s.Tokens.PromptUsage)
	if in == 0 {
		in = float64(s.Tokens.Prompt)
	}
	out := float64(s.Tokens.OutputUsage)
	if out == 0 {
		out = float64(s.Tokens.OutputTokenizer)
	}
	if out == 0 {
		out = float64(s.Tokens.OutputEvents)
	}
	p.CostPerHour, p.Cost, p.CostPerRequest = stats.APICost(ap.Input, ap.Output, s.Requests.Completed, in, out, s.Throughput.RequestsPerS)
	p.Labels["priced_as"] = fmt.Sprintf("%s at $%g/$%g per M tokens", model, ap.Input, ap.Output)
	return p, nil
}

func runPareto(ctx context.Context, env *Env, o paretoOptions, args []string) error {
	if _, err := metricStat(record.Metric{}, o.stat); err != nil {
		return usageErr("pareto: --stat: %v", err)
	}
	if _, err := summaryMetric(&record.Summary{}, o.metric); err != nil {
		return usageErr("pareto: --metric: %v", err)
	}
	prices, err := loadPrices(o.prices)
	if err != nil {
		return usageErr("pareto: %v", err)
	}
	cat := sim.DefaultCatalog()
	so := &storeOpener{env: env, dsn: o.db}
	defer so.close()
	var pts []stats.ParetoPoint
	for _, a := range expandRunArgs(args) {
		r, err := resolveAnalysisRun(ctx, so, a)
		if err != nil {
			return usageErr("pareto: %v", err)
		}
		p, err := paretoPoint(r, prices, cat, o.metric, o.stat)
		if err != nil {
			return usageErr("pareto: %v", err)
		}
		pts = append(pts, p)
	}
	marked := stats.MarkPareto(pts)
	front := stats.ParetoFront(pts)
	var pick *stats.ParetoPoint
	if o.sloMs > 0 {
		if p, ok := stats.CheapestWithin(pts, o.sloMs); ok {
			pick = &p
		}
	}
	if o.svg != "" {
		axis := fmt.Sprintf("%s %s (ms)", strings.ToUpper(o.metric), strings.ToUpper(o.stat))
		if err := os.WriteFile(o.svg, []byte(paretoSVG(marked, front, axis, o.sloMs)), 0o644); err != nil {
			return failErr("pareto: writing the plot: %v", err)
		}
	}
	if o.jsonOut {
		return writeAnalysisJSON(env.Stdout, struct {
			Metric string              `json:"metric"`
			Stat   string              `json:"stat"`
			Points []stats.ParetoPoint `json:"points"`
			Front  []stats.ParetoPoint `json:"front"`
			SLOMs  float64             `json:"slo_ms,omitempty"`
			Pick   *stats.ParetoPoint  `json:"pick,omitempty"`
		}{o.metric, o.stat, marked, front, o.sloMs, pick})
	}
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
	w := env.Stdout
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\tconfiguration\tpriced as\t$/hour\treq/s\tout tok/s\t$/M out tokens\tµ$/request\t%s %s ms\n", strings.ToUpper(o.metric), strings.ToUpper(o.stat))
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
	for _, p := range front {
		names = append(names, p.Name)
	}
	fmt.Fprintf(w, "\n* Pareto-optimal (no configuration is both cheaper and faster): %s\n", strings.Join(names, " → "))
	if o.sloMs > 0 {
		if pick != nil {
			fmt.Fprintf(w, "cheapest with %s %s ≤ %g ms: %s ($%s per M output tokens, %s ms)\n", strings.ToUpper(o.metric), o.stat, o.sloMs, pick.Name, fmtNum(pick.Cost), fmtNum(pick.Latency))
		} else {
			fmt.Fprintf(w, "no configuration has %s %s ≤ %g ms\n", strings.ToUpper(o.metric), o.stat, o.sloMs)
		}
	}
	return nil
}

// paretoSVG draws the cost/latency plane: every configuration as a dot
// (filled when Pareto-optimal), the front as a staircase, and the SLO as a
// dashed line. Plain SVG with no scripts or external references, so it
// embeds in reports and issue comments.
func paretoSVG(points, front []stats.ParetoPoint, yLabel string, slo float64) string {
	const W, H, L, R, T, B = 720.0, 440.0, 80.0, 30.0, 30.0, 60.0
	var xs, ys []float64
	for _, p := range points {
		if !math.IsNaN(p.Cost) && !math.IsInf(p.Cost, 0) && !math.IsNaN(p.Latency) && !math.IsInf(p.Latency, 0) {
			xs = append(xs, p.Cost)
			ys = append(ys, p.Latency)
		}
	}
	if slo > 0 {
		ys = append(ys, slo)
	}
	if len(xs) == 0 {
		xs, ys = []float64{0, 1}, []float64{0, 1}
	}
	span := func(v []float64) (float64, float64) {
		lo, hi := slices.Min(v), slices.Max(v)
		pad := (hi - lo) * 0.08
		if pad == 0 {
			pad = math.Max(math.Abs(hi)*0.1, 1)
		}
		return math.Max(0, lo-pad), hi + pad
	}
	x0, x1 := span(xs)
	y0, y1 := span(ys)
	px := func(v float64) float64 { return L + (v-x0)/(x1-x0)*(W-L-R) }
	py := func(v float64) float64 { return H - B - (v-y0)/(y1-y0)*(H-T-B) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n",
		L, H-B, W-R, H-B, L, T, L, H-B)
	for i := 0; i <= 4; i++ {
		xv := x0 + (x1-x0)*float64(i)/4
		yv := y0 + (y1-y0)*float64(i)/4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(xv), H-B+18, fmtNum(xv))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", L-6, py(yv)+4, fmtNum(yv))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">cost (USD per million output tokens)</text>`+"\n", (L+W-R)/2, H-14)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (T+H-B)/2, html.EscapeString(yLabel))
	if slo > 0 {
		fmt.Fprintf(&b, `<line class="slo" x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#c0392b" stroke-dasharray="6 4"/>`+"\n", L, py(slo), W-R, py(slo))
	}
	if len(front) > 0 {
		var pts []string
		for i, p := range front {
			if i > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Cost), py(front[i-1].Latency)))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.Cost), py(p.Latency)))
		}
		fmt.Fprintf(&b, `<polyline class="front" points="%s" fill="none" stroke="#2471a3" stroke-width="2"/>`+"\n", strings.Join(pts, " "))
	}
	for _, p := range points {
		if math.IsNaN(p.Cost) || math.IsInf(p.Cost, 0) || math.IsNaN(p.Latency) || math.IsInf(p.Latency, 0) {
			continue
		}
		fill := "white"
		if p.Optimal {
			fill = "#2471a3"
		}
		fmt.Fprintf(&b, `<circle class="point" cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="#2471a3"><title>%s</title></circle>`+"\n",
			px(p.Cost), py(p.Latency), fill, html.EscapeString(fmt.Sprintf("%s: $%s/M tokens, %s ms", p.Name, fmtNum(p.Cost), fmtNum(p.Latency))))
		// Labels of points near the right edge go to their left.
		lx, anchor := px(p.Cost)+8, "start"
		if lx > W-R-140 {
			lx, anchor = px(p.Cost)-8, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`+"\n", lx, py(p.Latency)-6, anchor, html.EscapeString(p.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
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
	if len(args) != 1 {
		return usageErr("rdd: give a sessions CSV (or --synth N -o FILE to make one)")
	}
	rc, name, err := openInput(env, args[0])
	if err != nil {
		return usageErr("rdd: reading %s: %v", args[0], err)
	}
	t, err := stats.ReadNumericCSV(rc, name)
	rc.Close()
	if err != nil {
		return usageErr("rdd: %v", err)
	}
	x, err := t.MustCol(o.running)
	if err != nil {
		return usageErr("rdd: --running: %v", err)
	}
	y, err := t.MustCol(o.outcome)
	if err != nil {
		return usageErr("rdd: --outcome: %v", err)
	}
	var covs []stats.Column
	switch {
	case strings.EqualFold(o.covariates, "none"):
	case o.covariates != "":
		for _, c := range strings.Split(o.covariates, ",") {
			c = strings.TrimSpace(c)
			d, err := t.MustCol(c)
			if err != nil {
				return usageErr("rdd: --covariates: %v", err)
			}
			covs = append(covs, stats.Column{Name: c, Data: d})
		}
	default:
		for j, c := range t.Columns {
			if !strings.EqualFold(c, o.running) && !strings.EqualFold(c, o.outcome) && !strings.EqualFold(c, o.treatment) {
				covs = append(covs, stats.Column{Name: c, Data: t.Data[j]})
			}
		}
	}
	var treatment []float64
	if o.treatment != "" {
		if treatment, err = t.MustCol(o.treatment); err != nil {
			return usageErr("rdd: --treatment: %v", err)
		}
	}
	res, err := stats.RDD(x, y, covs, stats.RDDOptions{Cutoff: o.cutoff, Bandwidth: o.bandwidth, Donut: o.donut,
		Placebos: o.placebos, NoPlacebos: o.noPlacebos, Treatment: treatment})
	if err != nil {
		return usageErr("%s: %v", name, err)
	}
	if o.jsonOut {
		return writeAnalysisJSON(env.Stdout, res)
	}
	printRDD(env.Stdout, res, o, name, y)
	return nil
}

func printRDD(w io.Writer, r stats.RDDResult, o rddOptions, name string, y []float64) {
	binary := true
	for _, v := range y {
		if !math.IsNaN(v) && v != 0 && v != 1 {
			binary = false
			break
		}
	}
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

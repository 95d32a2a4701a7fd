package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/analysis"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/store"
)

func runAnalysisCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// writeRun writes a run directory with the given summary and labels.
func writeRun(t *testing.T, dir string, s record.Summary, model string, labels map[string]string) string {
	t.Helper()
	s.Schema = record.SummarySchema
	if err := record.WriteJSON(filepath.Join(dir, "summary.json"), s); err != nil {
		t.Fatal(err)
	}
	m := record.Manifest{Schema: record.ManifestSchema, Tool: "ttft", Command: "sweep", Source: "sim", Model: model, Labels: labels}
	if err := record.WriteJSON(filepath.Join(dir, "manifest.json"), m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFitCommandFromCSVAndRuns(t *testing.T) {
	truth := []float64{0.05, 0.82, 0.67, 0.31, 8.9, 20000}
	rng := rand.New(rand.NewPCG(1, 2))
	var csv strings.Builder
	csv.WriteString("batch,context,latency_ms,note\n")
	tmp := t.TempDir()
	var runArgs []string
	for _, b := range []float64{1, 2, 4, 8, 16, 32, 64} {
		for _, c := range []float64{256, 512, 1024, 2048, 4096, 8192} {
			v := stats.LatencyModel(truth, b, c) + 0.3*rng.NormFloat64()
			if b <= 8 {
				fmt.Fprintf(&csv, "%g,%g,%g,7\n", b, c, v)
				continue
			}
			// The larger batches come as run directories.
			dir := filepath.Join(tmp, fmt.Sprintf("b%g-c%g", b, c))
			writeRun(t, dir, record.Summary{TTFT: record.Metric{Count: 100, P50: v, P95: 2 * v}}, "m",
				map[string]string{"concurrency": fmt.Sprint(b), "prompt_tokens": fmt.Sprint(c)})
			runArgs = append(runArgs, dir)
		}
	}
	csvPath := filepath.Join(tmp, "sweep.csv")
	if err := os.WriteFile(csvPath, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runAnalysisCLI(t, append([]string{"fit", csvPath, "--predict", "32,2048", "--json"}, runArgs...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Fit struct {
			Points    []any `json:"points"`
			Nonlinear struct {
				R2     float64 `json:"r2"`
				Params []struct {
					Name string     `json:"name"`
					CI95 [2]float64 `json:"ci95"`
				} `json:"params"`
			} `json:"nonlinear"`
		} `json:"fit"`
		Predictions []struct {
			Nonlinear float64 `json:"nonlinear_ms"`
		} `json:"predictions"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(got.Fit.Points) != 42 || got.Fit.Nonlinear.R2 < 0.999 {
		t.Errorf("%d points, R² %v", len(got.Fit.Points), got.Fit.Nonlinear.R2)
	}
	// A directory of run directories (ttft sweep's output) stands for them
	// all, as in report and compare.
	if code, out, errs := runAnalysisCLI(t, "fit", csvPath, tmp, "--json"); code != ExitOK || strings.Count(out, `"batch"`) != 42 {
		t.Errorf("fit CSV + directory of runs: exit %d, %d points\n%s", code, strings.Count(out, `"batch"`), errs)
	}
	if p := got.Predictions[0].Nonlinear; math.Abs(p-stats.LatencyModel(truth, 32, 2048)) > 2 {
		t.Errorf("prediction at 32×2048 = %v, want about %v", p, stats.LatencyModel(truth, 32, 2048))
	}
	// A single run without sweep labels is placed by its recorded flags.
	flagRun := filepath.Join(tmp, "flags-run")
	writeRun(t, flagRun, record.Summary{TTFT: record.Metric{Count: 10, P50: 12}}, "m", nil)
	m := record.Manifest{Schema: record.ManifestSchema, Tool: "ttft", Command: "sim run", Source: "sim",
		Flags: map[string]string{"concurrency": "3", "prompt-tokens": "700"}}
	if err := record.WriteJSON(filepath.Join(flagRun, "manifest.json"), m); err != nil {
		t.Fatal(err)
	}
	pts, err := analysis.ReadFitPoints(context.Background(), analysis.Inputs{}, []string{flagRun}, analysis.Statistic{Metric: "ttft", Stat: "p50"})
	if err != nil || len(pts) != 1 || pts[0].Batch != 3 || pts[0].Context != 700 || pts[0].LatencyMs != 12 {
		t.Errorf("run placed by flags: %+v, %v", pts, err)
	}
	// The table form names the models and the prediction.
	code, out, _ = runAnalysisCLI(t, "fit", csvPath, "--predict", "32,2048")
	if code != ExitOK || !strings.Contains(out, "linear baseline") || !strings.Contains(out, "predictions:") || !strings.Contains(out, "kappa") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
}

func TestFitCommandErrors(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad.csv")
	os.WriteFile(bad, []byte("batch,context,latency_ms\n1,2,x\n"), 0o644)
	nocol := filepath.Join(tmp, "nocol.csv")
	os.WriteFile(nocol, []byte("b2,context,latency_ms\n1,2,3\n"), 0o644)
	run := writeRun(t, filepath.Join(tmp, "run"), record.Summary{TTFT: record.Metric{Count: 1, P50: 1}}, "m", map[string]string{"gpu": "l4"})
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"fit", bad}, `bad.csv:2: column "latency_ms": "x" is not a number`},
		{[]string{"fit", nocol}, "no batch column"},
		{[]string{"fit", run}, "labels (or flags) need a batch"},
		{[]string{"fit", bad, "--predict", "3"}, "--predict \"3\""},
		{[]string{"fit", bad, "--stat", "p42"}, `unknown statistic "p42"`},
		{[]string{"fit", filepath.Join(tmp, "missing.csv")}, "missing.csv"},
	}
	for _, tc := range cases {
		code, _, errs := runAnalysisCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestRDDCommandSynthRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	csv := filepath.Join(tmp, "sessions.csv")
	code, _, errs := runAnalysisCLI(t, "rdd", "--synth", "80000", "--effect", "-0.028", "--seed", "3", "-o", csv)
	if code != ExitOK {
		t.Fatalf("synth: exit %d: %s", code, errs)
	}
	code, out, errs := runAnalysisCLI(t, "rdd", csv, "--donut", "20", "--json")
	if code != ExitOK {
		t.Fatalf("rdd: exit %d: %s", code, errs)
	}
	var r struct {
		Robust  struct{ CI95 [2]float64 } `json:"robust"`
		Density struct {
			PValue float64 `json:"p_value"`
		} `json:"density"`
		Balance  []struct{ Name string } `json:"balance"`
		Placebos []any                   `json:"placebos"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Robust.CI95[0] > -0.028 || -0.028 > r.Robust.CI95[1] {
		t.Errorf("robust CI %v misses the true -0.028", r.Robust.CI95)
	}
	if len(r.Balance) != 3 || len(r.Placebos) != 4 {
		t.Errorf("balance %v, %d placebos", r.Balance, len(r.Placebos))
	}
	code, out, _ = runAnalysisCLI(t, "rdd", csv, "--covariates", "mobile", "--no-placebos")
	for _, want := range []string{"RDD robust bias-corrected", "naive logistic regression", "McCrary density test", "mobile", " pp"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("table lacks %q (exit %d):\n%s", want, code, out)
		}
	}
}

func TestRDDCommandErrors(t *testing.T) {
	tmp := t.TempDir()
	csv := filepath.Join(tmp, "s.csv")
	os.WriteFile(csv, []byte("ttft_ms,retained\n100,1\n400,0\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"rdd"}, "give a sessions CSV"},
		{[]string{"rdd", csv, "--outcome", "churned"}, `no column "churned"`},
		{[]string{"rdd", csv}, "need at least 20 sessions on each side"},
		{[]string{"rdd", "--synth", "10"}, "needs -o FILE"},
	}
	for _, tc := range cases {
		code, _, errs := runAnalysisCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestParetoCommandArticleExample runs §4.4's configurations through the
// command: A10G×1 bs=8 at 42 QPS and 12.7 µ$/token, L4×1 bs=16 at 38 QPS
// and 9.3 µ$/token, plus a dominated A10G bs=16, and a hosted API.
func TestParetoCommandArticleExample(t *testing.T) {
	tmp := t.TempDir()
	prices := filepath.Join(tmp, "prices.yaml")
	os.WriteFile(prices, []byte("gpus:\n  a10g: 1.01\n  l4: 0.80\n"), 0o644)
	mk := func(name, gpu string, rps, tps, p95 float64) string {
		return writeRun(t, filepath.Join(tmp, name), record.Summary{
			Throughput: record.Throughput{RequestsPerS: rps, OutputTokensPerS: tps},
			TTFT:       record.Metric{Count: 1000, P95: p95},
		}, "llama-3-8b", map[string]string{"gpu": gpu, "gpus": "1", "name": name})
	}
	a := mk("a10g-x1-bs8", "a10g", 42, 1.01/3600/12.7e-6, 120)
	l := mk("l4-x1-bs16", "l4", 38, 0.80/3600/9.3e-6, 180)
	d := mk("a10g-x1-bs16", "a10g", 44, 1.01/3600/13.0e-6, 190)
	api := writeRun(t, filepath.Join(tmp, "gpt"), record.Summary{
		Requests:   record.Requests{Completed: 100},
		Throughput: record.Throughput{RequestsPerS: 2},
		Tokens:     record.Tokens{PromptUsage: 100_000, OutputUsage: 20_000},
		TTFT:       record.Metric{Count: 100, P95: 342},
	}, "gpt-4-turbo-2024-04-09", nil)
	code, out, errs := runAnalysisCLI(t, "pareto", a, l, d, api, "--prices", prices, "--slo-ms", "150", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Points []stats.ParetoPoint `json:"points"`
		Front  []stats.ParetoPoint `json:"front"`
		Pick   *stats.ParetoPoint  `json:"pick"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := map[string]float64{"a10g-x1-bs8": 12.7, "l4-x1-bs16": 9.3, "a10g-x1-bs16": 13.0, "gpt": 80}
	for _, p := range r.Points {
		if math.Abs(p.Cost-want[p.Name]) > 1e-6 {
			t.Errorf("%s: $%v per M output tokens, want %v", p.Name, p.Cost, want[p.Name])
		}
		if (p.Name == "a10g-x1-bs16" || p.Name == "gpt") == p.Optimal {
			t.Errorf("%s: optimal=%v", p.Name, p.Optimal)
		}
	}
	if len(r.Front) != 2 || r.Pick == nil || r.Pick.Name != "a10g-x1-bs8" {
		t.Errorf("front %+v, pick %+v", r.Front, r.Pick)
	}
	svg := filepath.Join(tmp, "front.svg")
	code, out, _ = runAnalysisCLI(t, "pareto", a, l, d, "--prices", prices, "--svg", svg, "--slo-ms", "150")
	if code != ExitOK || !strings.Contains(out, "l4-x1-bs16 → a10g-x1-bs8") || !strings.Contains(out, "1× a10g at $1.01/h") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
	// The plot is well-formed XML with a dot per run, the front and the SLO.
	// It is the report's Pareto chart, which marks its parts by what they
	// are rather than by class: a labelled dot per run (and a dot per
	// front point over it), the front as the one path, the SLO as the one
	// dashed line, and the axis titles.
	raw, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(raw))
	counts := map[string]int{}
	texts := map[string]int{}
	inText := false
	for {
		tok, err := dec.Token()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("plot is not XML: %v", err)
			}
			break
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			counts[tok.Name.Local]++
			inText = tok.Name.Local == "text"
			for _, at := range tok.Attr {
				if at.Name.Local == "stroke-dasharray" {
					counts["dashed "+tok.Name.Local]++
				}
			}
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts[string(tok)]++
			}
		}
	}
	if counts["circle"] != 3+2 || counts["path"] != 1 || counts["dashed line"] != 1 {
		t.Errorf("plot elements %v", counts)
	}
	for _, want := range []string{"a10g-x1-bs8", "l4-x1-bs16", "a10g-x1-bs16", "SLO 150 ms", "cost (USD per million output tokens)", "TTFT P95 (ms)"} {
		if texts[want] != 1 {
			t.Errorf("plot has %d labels %q: %v", texts[want], want, texts)
		}
	}
	// A GPU without a price and a model without one are usage errors.
	odd := writeRun(t, filepath.Join(tmp, "odd"), record.Summary{TTFT: record.Metric{Count: 1, P95: 1}}, "my-model", nil)
	if code, _, errs := runAnalysisCLI(t, "pareto", odd); code != ExitUsage || !strings.Contains(errs, `no API price for model "my-model"`) {
		t.Errorf("exit %d: %s", code, errs)
	}
}

func TestFitEfficiencyCommand(t *testing.T) {
	// §2.2: A100 at 1120 of 2039 GB/s. Llama-3-8B bf16, batch 1, 512 tokens.
	bytes := 8.03e9*2 + 512*2*32*8*128*2
	itl := bytes / 1120e9 * 1000
	code, out, errs := runAnalysisCLI(t, "fit", "efficiency", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--itl-ms", fmt.Sprint(itl), "--context", "512", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var e stats.HWEfficiency
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if math.Abs(e.AchievedGBs-1120) > 1 || math.Abs(e.BandwidthUtil-1120.0/2039) > 1e-3 {
		t.Errorf("achieved %v GB/s (%v)", e.AchievedGBs, e.BandwidthUtil)
	}
	if code, _, errs := runAnalysisCLI(t, "fit", "efficiency", "--model", "nope", "--gpu", "a100"); code != ExitUsage || !strings.Contains(errs, `unknown model "nope"`) {
		t.Errorf("exit %d: %s", code, errs)
	}
}

func TestRDDCommandFuzzy(t *testing.T) {
	tmp := t.TempDir()
	path := filepath.Join(tmp, "fuzzy.csv")
	var b strings.Builder
	b.WriteString("ttft_ms,retained,saw_fallback\n")
	rng := rand.New(rand.NewPCG(5, 6))
	for range 60_000 {
		x := math.Exp(math.Log(270) + 0.3*rng.NormFloat64())
		d := 0
		if (x >= 300 && rng.Float64() < 0.9) || (x < 300 && rng.Float64() < 0.1) {
			d = 1
		}
		y := 0
		if rng.Float64() < 0.5-0.1*float64(d) {
			y = 1
		}
		fmt.Fprintf(&b, "%.1f,%d,%d\n", x, y, d)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	code, out, errs := runAnalysisCLI(t, "rdd", path, "--treatment", "saw_fallback", "--no-placebos")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"Regression discontinuity (fuzzy)", "first stage: jump in saw_fallback", "naive logistic"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "covariate balance") {
		t.Errorf("the treatment column was taken as a covariate:\n%s", out)
	}
}

// TestParetoCommandStoredRuns reads runs from the results store by ID and
// "latest", beside a run directory.
func TestParetoCommandStoredRuns(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "ttft.db")
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	save := func(name, gpu string, tps, p95 float64) string {
		id, err := st.Save(context.Background(), store.RunInput{
			Manifest: record.Manifest{Schema: record.ManifestSchema, Tool: "ttft", Source: "sim", Labels: map[string]string{"gpu": gpu, "name": name}},
			Summary: record.Summary{Schema: record.SummarySchema, Source: "sim",
				Throughput: record.Throughput{RequestsPerS: 10, OutputTokensPerS: tps}, TTFT: record.Metric{Count: 10, P95: p95}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := save("stored-l4", "l4", 1000, 200)
	save("stored-h100", "h100", 8000, 80)
	st.Close()
	dir := writeRun(t, filepath.Join(tmp, "dir-a10g"), record.Summary{
		Throughput: record.Throughput{RequestsPerS: 10, OutputTokensPerS: 900}, TTFT: record.Metric{Count: 10, P95: 300},
	}, "m", map[string]string{"gpu": "a10g"})
	code, out, errs := runAnalysisCLI(t, "pareto", "--db", db, id, "latest", dir, "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r struct {
		Points []stats.ParetoPoint `json:"points"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var names []string
	for _, p := range r.Points {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "stored-l4,stored-h100,dir-a10g" {
		t.Errorf("points %v", names)
	}
	if code, _, errs := runAnalysisCLI(t, "pareto", "--db", db, "nosuchrun"); code != ExitUsage || !strings.Contains(errs, "nosuchrun") {
		t.Errorf("unknown run: exit %d, %s", code, errs)
	}
}

func FuzzParsePredict(f *testing.F) {
	f.Add("32,2048")
	f.Add(" 1.5 , 1e3")
	f.Add("0,5")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePredict([]string{s})
		if err != nil {
			if !strings.Contains(err.Error(), "--predict") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		if len(p) != 1 || !(p[0].Batch > 0) || !(p[0].Context > 0) || math.IsInf(p[0].Batch, 0) || math.IsInf(p[0].Context, 0) {
			t.Fatalf("accepted %q as %+v", s, p)
		}
	})
}

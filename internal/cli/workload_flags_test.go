package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

func parseWorkload(t *testing.T, args ...string) (*workloadOptions, *Env, *bytes.Buffer) {
	t.Helper()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var o workloadOptions
	addWorkloadFlags(fs, &o)
	fs.Float64("rate", 0, "")
	fs.Int("concurrency", 1, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	return &o, &Env{Stderr: &stderr}, &stderr
}

func TestWorkloadBuildDefaults(t *testing.T) {
	o, env, _ := parseWorkload(t)
	src, sc, tok, err := o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	if sc != nil || tok.Name() != "cl100k_base" {
		t.Fatalf("scenario %v tokenizer %s", sc, tok.Name())
	}
	r, err := src.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.PromptTokens != 128 || tok.Count(r.Prompt) != 128 || r.MaxTokens != 128 || r.MinTokens != 0 || len(r.Messages) != 1 {
		t.Fatalf("%+v", r)
	}
}

func TestWorkloadBuildFlags(t *testing.T) {
	o, env, _ := parseWorkload(t, "--prompt-tokens", "37", "--max-tokens", "9", "--ignore-eos", "--tokenizer", "o200k_base", "--seed", "5")
	src, _, tok, err := o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := src.Next(context.Background())
	if tok.Name() != "o200k_base" || tok.Count(r.Prompt) != 37 || r.MaxTokens != 9 || r.MinTokens != 9 {
		t.Fatalf("%s %d %d %d", tok.Name(), tok.Count(r.Prompt), r.MaxTokens, r.MinTokens)
	}
}

func TestWorkloadBuildScenario(t *testing.T) {
	o, env, _ := parseWorkload(t, "--scenario", "code")
	src, sc, tok, err := o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	if sc == nil || sc.Name != "code" || len(sc.SLOs) != 2 {
		t.Fatalf("%+v", sc)
	}
	r, _ := src.Next(context.Background())
	if r.Scenario != "code" || r.Group == "" || !r.HasAt || r.PromptTokens < 1536+32 || tok.Count(r.Prompt) != r.PromptTokens {
		t.Fatalf("%+v", r)
	}
	// --concurrency replaces the scenario's arrival process.
	o, env, _ = parseWorkload(t, "--scenario", "chat", "--concurrency", "4", "--max-tokens", "5")
	src, sc, _, err = o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = src.Next(context.Background())
	if r.HasAt || r.MaxTokens != 5 || sc.OutputTokens != workload.FixedDist(5) {
		t.Fatalf("%+v", r)
	}
}

func TestWorkloadBuildSessionsPrefixDataset(t *testing.T) {
	o, env, _ := parseWorkload(t, "--sessions", "2", "--turns", "2", "--prompt-tokens", "8", "--max-tokens", "4")
	src, _, _, err := o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	fb, ok := src.(workload.FeedbackSource)
	if !ok {
		t.Fatal("sessions source is not a FeedbackSource")
	}
	n := 0
	for {
		r, err := fb.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		fb.Done(r, workload.Result{OK: true, Text: "fine"})
	}
	if n != 4 {
		t.Fatalf("%d turns, want 4", n)
	}

	o, env, _ = parseWorkload(t, "--prefix-groups", "3", "--prefix-tokens", "20", "--prompt-tokens", "5")
	src, _, _, err = o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := src.Next(context.Background())
	if r.PromptTokens != 25 || r.Group == "" {
		t.Fatalf("%+v", r)
	}

	p := filepath.Join(t.TempDir(), "d.jsonl")
	os.WriteFile(p, []byte("{\"prompt\": \"hi there\", \"output_tokens\": 3}\nnot json\n"), 0o644)
	o, env, _ = parseWorkload(t, "--dataset", p)
	if _, _, _, err = o.build(env); err == nil || !strings.Contains(err.Error(), "d.jsonl:2:") {
		t.Fatalf("stop on bad line: %v", err)
	}
	o, env, stderr := parseWorkload(t, "--dataset", p, "--on-bad-line", "skip")
	src, _, _, err = o.build(env)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "skipped 1 malformed") {
		t.Errorf("no warning: %q", stderr.String())
	}
	r, _ = src.Next(context.Background())
	if r.Prompt != "hi there" || r.MaxTokens != 3 {
		t.Fatalf("%+v", r)
	}
}

func TestWorkloadBuildErrors(t *testing.T) {
	cases := [][]string{
		{"--prompt-tokens", "0"},
		{"--max-tokens", "0"},
		{"--min-tokens", "500"},
		{"--ignore-eos", "--min-tokens", "3"},
		{"--tokenizer", "nosuch"},
		{"--scenario", "nosuch"},
		{"--dataset", "/nonexistent/file.jsonl"},
		{"--dataset", "x.jsonl", "--sessions", "2"},
		{"--on-bad-line", "maybe", "--dataset", "testdata/none"},
	}
	for _, args := range cases {
		o, env, _ := parseWorkload(t, args...)
		_, _, _, err := o.build(env)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// Length distributions from the command line: every request's lengths
// follow the distribution asked for, as a scenario's would.
func TestWorkloadLengthDistributionFlags(t *testing.T) {
	cases := []struct {
		name           string
		args           []string
		pLo, pHi       int // observed prompt lengths must lie in [pLo, pHi]
		oLo, oHi       int
		wantSpread     bool // and not all equal
		forcedOutputTo bool // MinTokens == MaxTokens (--ignore-eos)
	}{
		{"vLLM range ratio", []string{"--prompt-tokens", "100", "--max-tokens", "40", "--random-range-ratio", "0.5"}, 50, 150, 20, 60, true, false},
		{"uniform prompt, fixed output", []string{"--prompt-tokens-dist", "uniform:10,30", "--max-tokens", "7"}, 10, 30, 7, 7, true, false},
		{"normal clamped", []string{"--prompt-tokens-dist", "normal:60,40,20,80", "--output-tokens-dist", "lognormal:16,0.5,4,64", "--ignore-eos"}, 20, 80, 4, 64, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, env, _ := parseWorkload(t, c.args...)
			src, _, _, err := o.build(env)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for range 200 {
				req, err := src.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if req.PromptTokens < c.pLo || req.PromptTokens > c.pHi || req.MaxTokens < c.oLo || req.MaxTokens > c.oHi {
					t.Fatalf("request %d: prompt %d (want %d–%d), output %d (want %d–%d)", req.Index, req.PromptTokens, c.pLo, c.pHi, req.MaxTokens, c.oLo, c.oHi)
				}
				if c.forcedOutputTo != (req.MinTokens == req.MaxTokens) {
					t.Fatalf("request %d: min_tokens %d max_tokens %d, forced %v", req.Index, req.MinTokens, req.MaxTokens, c.forcedOutputTo)
				}
				seen[req.PromptTokens] = true
			}
			if c.wantSpread && len(seen) < 5 {
				t.Errorf("only %d distinct prompt lengths in 200 requests", len(seen))
			}
		})
	}
	for _, bad := range [][]string{
		{"--prompt-tokens-dist", "normal:10"},
		{"--prompt-tokens-dist", "gauss:1,2"},
		{"--prompt-tokens", "5", "--prompt-tokens-dist", "uniform:1,9"},
		{"--random-range-ratio", "1"},
		{"--random-range-ratio", "0.2", "--output-tokens-dist", "30"},
		{"--output-tokens-dist", "uniform:5,9", "--same-prompt"},
	} {
		o, env, _ := parseWorkload(t, bad...)
		if _, _, _, err := o.build(env); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

func TestParseDistFlagForms(t *testing.T) {
	cases := []struct {
		spec string
		want workload.Dist
		ok   bool
	}{
		{"128", workload.FixedDist(128), true},
		{"fixed:64", workload.FixedDist(64), true},
		{"uniform:100,500", workload.Dist{Kind: "uniform", Min: 100, Max: 500}, true},
		{"normal:500,100", workload.Dist{Kind: "normal", Mean: 500, Std: 100}, true},
		{"lognormal:300,0.5,20,2000", workload.Dist{Kind: "lognormal", Median: 300, Sigma: 0.5, Min: 20, Max: 2000}, true},
		{"uniform:5", workload.Dist{}, false},
		{"uniform:9,5", workload.Dist{}, false},
		{"fixed:1.5", workload.Dist{}, false},
		{"normal:1,2,3", workload.Dist{}, false},
		{"", workload.Dist{}, false},
	}
	for _, c := range cases {
		got, err := workload.ParseDist(c.spec)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseDist(%q) = %+v, %v; want %+v ok %v", c.spec, got, err, c.want, c.ok)
		}
	}
}

// --rate-ramp on the simulator's virtual clock: the intended send times
// follow the ramp (few requests in its slow first half, most in its fast
// second half), and a ramp with a load flag of its own is refused.
func TestSimRunRateRamp(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "sim", "run", "--rate-ramp", "1:19:20s", "-n", "200", "--prompt-tokens", "32", "--max-tokens", "8",
		"--out", out, "--no-store")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 200 {
		t.Fatalf("requests.jsonl: %d records, %v", len(recs), err)
	}
	start := recs[0].Intended
	for _, r := range recs {
		if r.Intended.Before(start) {
			start = r.Intended
		}
	}
	firstHalf, secondHalf := 0, 0
	for _, r := range recs {
		switch at := r.Intended.Sub(start); {
		case at < 10*time.Second:
			firstHalf++
		case at < 20*time.Second:
			secondHalf++
		}
	}
	// Λ(10 s) = 55 and Λ(20 s) − Λ(10 s) = 145 expected arrivals.
	if firstHalf < 30 || firstHalf > 80 || secondHalf < 110 {
		t.Errorf("arrivals %d in the first 10 s and %d in the next 10 s, want ≈ 55 and ≈ 145", firstHalf, secondHalf)
	}
	for _, bad := range [][]string{
		{"sim", "run", "--rate-ramp", "1:5:10s", "--rate", "3", "-n", "5"},
		{"sim", "run", "--rate-ramp", "1:5", "-n", "5"},
	} {
		if code, _, _ := runCLI(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

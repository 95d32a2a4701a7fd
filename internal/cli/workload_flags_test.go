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

	"github.com/spf13/pflag"

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

package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/cli"
	"github.com/ttft-dev/ttft/internal/gguf"
)

// TestOllamaCalibrate is `ttft sim calibrate` end to end on a real engine:
// Ollama on the CPU serving the generated model, described to the
// simulator as a model config (the GGUF's own shapes) and a CPU device,
// swept by `ttft bench` over prompt lengths and concurrencies; the
// calibration fits on part of the sweep and predicts the rest, and every
// held-out point's median TTFT must come out within the bound below.
//
// The device is one x86 core (the Modelfile pins num_thread 1): 80 GFLOPS
// FP32 (2 FMA ports × 8 lanes × 2 FLOP × 2.5 GHz, AVX2) and 10 GB/s (one
// core's share of DRAM bandwidth). Those are datasheet-style peaks; the fit
// finds what fraction of them Ollama reaches, plus its per-step and
// per-request costs. OLLAMA_NUM_PARALLEL=1 (Start) serves one request at a
// time, so the calibration is told --max-num-seqs 1 and a concurrency C run
// queues C−1 requests in the engine, as the simulator's closed loop does.
func TestOllamaCalibrate(t *testing.T) {
	bin := Binary(t)
	o := Start(t, bin)
	c := gguf.DefaultConfig()
	o.Create(t, "calib", c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := o.Chat(ctx, "calib", chatMsgs("warm up"), 2); err != nil {
		t.Fatalf("warm-up: %v\n%s", err, o.LogTail())
	}
	// A measurement whose host was disturbed mid-sweep (another process
	// taking the core for seconds) is taken again, up to twice; a model
	// or fit that is wrong fails all three. Twice, because under CI the
	// other packages' tests share the two cores with this sweep, and a
	// second sweep was seen disturbed as well (a 352-token prompt slower
	// than a 448-token one, TPOT 4.0 against 2.5 ms).
	problems := calibrateOnce(t, ctx, o, c)
	for try := 2; len(problems) > 0 && try <= 3; try++ {
		t.Logf("sweep %d missed (%s); measuring again", try-1, strings.Join(problems, "; "))
		problems = calibrateOnce(t, ctx, o, c)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// calibrateOnce runs the sweep with ttft bench, calibrates on part of it
// with ttft sim calibrate and returns what the held-out points miss by.
func calibrateOnce(t *testing.T, ctx context.Context, o *Ollama, c gguf.Config) []string {
	t.Helper()
	dir := t.TempDir()
	catPath := filepath.Join(dir, "ollama-cpu.yaml")
	if err := os.WriteFile(catPath, []byte(ollamaCatalog(c)), 0o644); err != nil {
		t.Fatal(err)
	}

	// Ordered as calibrate orders them (by load, then as given), so that
	// --holdout-every 3 holds out the 3rd and 6th: a prompt length and a
	// concurrency between fitted ones (interpolation, as a user's sweep
	// would be used). Six fitted runs give 18 figures for the six factors,
	// so one noisy run on a busy machine cannot steer the fit alone.
	// Prompts stay under 512 tokens with the template: llama.cpp prefills
	// in batches of 512 (num_batch), and beyond one batch the measured
	// TTFT steps up more than the FLOPs do (a 526-token prompt took
	// 3.4× a 270-token one here), a regime the roofline does not model.
	sweep := []struct{ prompt, conc, requests int }{
		{48, 1, 16}, {128, 1, 16}, {256, 1, 16}, {352, 1, 16}, {448, 1, 16},
		{256, 2, 16}, {256, 3, 18}, {256, 4, 24},
	}
	var runs []string
	for i, s := range sweep {
		out := filepath.Join(dir, fmt.Sprintf("run%d-p%d-c%d", i, s.prompt, s.conc))
		args := []string{"bench", "--target", o.URL, "--model", "calib",
			"--requests", strconv.Itoa(s.requests), "--concurrency", strconv.Itoa(s.conc), "--warmup", strconv.Itoa(s.conc),
			"--prompt-tokens", strconv.Itoa(s.prompt), "--max-tokens", "16",
			"--out", out, "--no-store", "--no-progress", "--seed", strconv.Itoa(i + 1)}
		var stdout, stderr bytes.Buffer
		if code := cli.Main(ctx, cli.Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != cli.ExitOK {
			t.Fatalf("ttft %v: exit %d\nstdout:\n%s\nstderr:\n%s\nserver log:\n%s", args, code, stdout.String(), stderr.String(), o.LogTail())
		}
		runs = append(runs, out)
	}

	args := append([]string{"sim", "calibrate", "--catalog", catPath, "--model", "ttft-synth", "--gpu", "ollama-cpu-1t",
		"--engine-profile", "llamacpp", "--max-num-seqs", "1", "--max-model-len", strconv.Itoa(c.Ctx),
		"--holdout-every", "3", "--out", filepath.Join(dir, "fitted.yaml")}, runs...)
	var stdout, stderr bytes.Buffer
	if code := cli.Main(ctx, cli.Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != cli.ExitOK {
		t.Fatalf("ttft %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	t.Logf("ttft sim calibrate:\n%s", stdout.String())

	// Held-out rows: "| RUN | held-out | closed C | P/O | meas / pred | ±E% | ..."
	held := regexp.MustCompile(`(?m)^\| \S+ \| held-out \| [^|]+\| [^|]+\| [^|]+\| ([+-][0-9.]+)% \|`)
	ms := held.FindAllStringSubmatch(stdout.String(), -1)
	if len(ms) != 2 {
		t.Fatalf("found %d held-out rows in the calibration table, want 2", len(ms))
	}
	// The target is 15 % on held-out points. On a busy 2-core
	// machine a run's median moves by ±10 % between repetitions and now and then by far
	// more (other processes share the core Ollama's one thread runs on):
	// in five runs at load average 5–7 the median of the two held-out
	// errors was 6–16 %, one point reached 20.5 %. The bounds leave that
	// noise room — median 20 %, each point 30 % — and still fail a model or
	// fit that is wrong (before attention had its own efficiency: +50 %).
	var sum float64
	var problems []string
	for _, m := range ms {
		e, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += math.Abs(e)
		if math.Abs(e) > 30 {
			problems = append(problems, fmt.Sprintf("held-out TTFT error %+.1f%%, want within ±30%%: %s", e, strings.TrimSpace(m[0])))
		}
	}
	if med := sum / float64(len(ms)); med > 20 {
		problems = append(problems, fmt.Sprintf("median held-out |TTFT error| %.1f%%, want ≤ 20%%", med))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "fitted.yaml")); err != nil || !strings.Contains(string(b), "name: calibrated") {
		t.Errorf("fitted profile not written (%v):\n%s", err, b)
	}
	return problems
}

// ollamaCatalog describes the generated model (its shapes, from the GGUF's
// config) and one CPU core as a simulator catalog.
func ollamaCatalog(c gguf.Config) string {
	return fmt.Sprintf(`models:
  - {name: ttft-synth, params_b: %g, layers: %d, hidden: %d, heads: %d, kv_heads: %d, head_dim: %d, vocab: %d, intermediate: %d, max_model_len: %d}
gpus:
  - {name: ollama-cpu-1t, vendor: intel, class: cpu, tflops: {bf16: 0.08, fp16: 0.08}, memory_gb: 8, bandwidth_gbs: 10, interconnect_gbs: 1, price_per_hour: 0}
`, float64(c.Params())/1e9, c.Layers, c.Dim, c.Heads, c.KVHeads, c.HeadDim(), c.Vocab, c.FF, c.Ctx)
}

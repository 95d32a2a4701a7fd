package enginetest

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/cli"
	"github.com/ttft-dev/ttft/internal/gguf"
	"github.com/ttft-dev/ttft/internal/record"
)

// TestOllamaPromptLengthBasis: against Ollama serving a model whose
// vocabulary splits most words (1,000 tokens: a cl100k_base word is about
// five of its tokens), `ttft bench --prompt-tokens 500` with the default
// server basis calibrates from the prompt usage of one-token requests
// (Ollama has no /tokenize) and the engine then sees 500 prompt tokens
// within 3 % on average (8 % for any one prompt, whose words vary); with
// --prompt-length-basis local it sees several times more, the behaviour
// before calibration.
func TestOllamaPromptLengthBasis(t *testing.T) {
	bin := Binary(t)
	o := Start(t, bin)
	c := gguf.DefaultConfig()
	c.Vocab = 1000
	v := o.Create(t, "splitty", c)
	// The chat template's own tokens (BOS, "user: ", "\nassistant:"), which
	// come on top of the message as in vllm bench.
	overhead := expectedPromptTokens(v, chatMsgs("the model")) - len(v.Tokenize("the model", false))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := o.Chat(ctx, "splitty", chatMsgs("warm up"), 2); err != nil {
		t.Fatalf("warm-up: %v\n%s", err, o.LogTail())
	}
	// The calibration relies on Ollama having no /tokenize; if a later
	// version adds one, the /tokenize path is taken and this notes it.
	if resp, err := http.Post(o.URL+"/tokenize", "application/json", strings.NewReader(`{"model":"splitty","prompt":"hi"}`)); err == nil {
		resp.Body.Close()
		t.Logf("POST /tokenize: HTTP %d", resp.StatusCode)
	}
	const asked = 500
	run := func(t *testing.T, basis string, requests int) ([]int, string) {
		out := t.TempDir()
		args := []string{"bench", "--target", o.URL, "--model", "splitty",
			"--requests", strconv.Itoa(requests), "--concurrency", "1", "--max-tokens", "2",
			"--prompt-tokens", strconv.Itoa(asked), "--prompt-length-basis", basis,
			"--out", out, "--no-store", "--no-progress", "--seed", "3"}
		var stdout, stderr bytes.Buffer
		code := cli.Main(ctx, cli.Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
		if code != cli.ExitOK {
			t.Fatalf("ttft %v: exit %d\nstdout:\n%s\nstderr:\n%s\nserver log:\n%s", args, code, stdout.String(), stderr.String(), o.LogTail())
		}
		recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var usage []int
		for _, r := range recs {
			if r.Warmup {
				continue
			}
			if !r.OK() {
				t.Fatalf("request %d failed: %s %s", r.Index, r.ErrorClass, r.Error)
			}
			usage = append(usage, r.PromptTokensUsage)
		}
		return usage, stderr.String()
	}

	t.Run("server", func(t *testing.T) {
		usage, stderr := run(t, "server", 6)
		if !strings.Contains(stderr, "prompt lengths: the server (usage) counts") {
			t.Errorf("no calibration reported:\n%s", stderr)
		}
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "prompt lengths:") {
				t.Log(l)
			}
		}
		sum := 0
		for i, u := range usage {
			sum += u - overhead
			if off := float64(u-overhead-asked) / asked; off > 0.08 || off < -0.08 {
				t.Errorf("request %d: Ollama saw %d prompt tokens (%d of them the template's), want %d within 8%%", i, u, overhead, asked)
			}
		}
		mean := float64(sum) / float64(len(usage))
		t.Logf("server basis: Ollama prompt tokens %v (template %d each), message mean %.1f for --prompt-tokens %d", usage, overhead, mean, asked)
		if off := (mean - asked) / asked; off > 0.03 || off < -0.03 {
			t.Errorf("mean message prompt tokens %.1f, want %d within 3%%", mean, asked)
		}
	})
	t.Run("local", func(t *testing.T) {
		usage, stderr := run(t, "local", 2)
		if strings.Contains(stderr, "prompt lengths:") {
			t.Errorf("the local basis calibrated:\n%s", stderr)
		}
		t.Logf("local basis: Ollama prompt tokens %v for --prompt-tokens %d", usage, asked)
		for i, u := range usage {
			if u < 2*asked {
				t.Errorf("request %d: %d prompt tokens; this vocabulary should make well over %d of %d cl100k_base tokens", i, u, 2*asked, asked)
			}
		}
	})
}

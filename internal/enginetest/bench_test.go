package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/cli"
	"github.com/ttft-dev/ttft/internal/gguf"
	"github.com/ttft-dev/ttft/internal/record"
)

// testBench runs `ttft bench` in-process against Ollama's OpenAI-compatible
// endpoint and reconciles what it recorded with the engine:
//
//   - every request completes, finish_reason "length";
//   - output: usage = token events = bench's offline cl100k count =
//     --max-tokens (the model never samples end-of-sequence, streams one
//     chunk per token and only generates single-token words);
//   - prompt: usage = bench's own count (cl100k words are single pieces in the
//     synthesized vocabulary) + the chat template's fixed overhead, exactly;
//   - TTFT: bench's median agrees with Ollama's native prompt_eval_duration
//     for fresh prompts of the same size within 50 ms + 35 % (different
//     requests, so machine noise counts twice; the same-request comparison
//     is ClientTTFTMatchesPromptEvalDuration).
func testBench(ctx context.Context, t *testing.T, o *Ollama, v *gguf.Vocab) {
	const requests, promptTokens, maxTokens = 4, 300, 8
	out := t.TempDir()
	args := []string{"bench", "--target", o.URL, "--model", model,
		"--requests", strconv.Itoa(requests), "--concurrency", "1",
		"--prompt-tokens", strconv.Itoa(promptTokens), "--max-tokens", strconv.Itoa(maxTokens),
		"--out", out, "--no-store", "--no-progress", "--quiet", "--seed", "7"}
	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, cli.Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	if code != cli.ExitOK {
		t.Fatalf("ttft %v: exit %d\nstdout:\n%s\nstderr:\n%s\nserver log:\n%s", args, code, stdout.String(), stderr.String(), o.LogTail())
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// The template's overhead: BOS, "user:", "\nassistant:" around the text.
	overhead := expectedPromptTokens(v, chatMsgs("the")) - 1
	var ttfts []float64
	measured := 0
	for _, r := range recs {
		if r.Warmup {
			continue
		}
		measured++
		if !r.OK() {
			t.Errorf("request %d failed: %s %s", r.Index, r.ErrorClass, r.Error)
			continue
		}
		if r.FinishReason != "length" {
			t.Errorf("request %d: finish_reason %q, want length", r.Index, r.FinishReason)
		}
		// The model only generates words that are one cl100k_base token
		// after a space, so bench's offline count agrees too.
		if r.OutputTokensUsage != maxTokens || r.OutputEvents != maxTokens || r.OutputTokensTokenizer != maxTokens {
			t.Errorf("request %d: output_tokens_usage %d, output_events %d, output_tokens_tokenizer %d, want all %d",
				r.Index, r.OutputTokensUsage, r.OutputEvents, r.OutputTokensTokenizer, maxTokens)
		}
		if r.PromptTokens != promptTokens || r.PromptTokensUsage != promptTokens+overhead {
			t.Errorf("request %d: prompt_tokens %d (want %d), prompt_tokens_usage %d (want %d + %d template tokens)",
				r.Index, r.PromptTokens, promptTokens, r.PromptTokensUsage, promptTokens, overhead)
		}
		ttfts = append(ttfts, r.TTFTMs)
	}
	if measured != requests {
		t.Fatalf("%d measured records, want %d", measured, requests)
	}
	if len(ttfts) == 0 {
		return
	}
	// The engine's view for fresh prompts of the same size, on the native API.
	var peds []float64
	for i := 0; i < 3; i++ {
		r, err := o.Chat(ctx, model, chatMsgs(Words(v, promptTokens, uint64(500+i))), 2)
		if err != nil {
			t.Fatal(err)
		}
		peds = append(peds, float64(r.PromptEvalDuration)/float64(time.Millisecond))
	}
	slices.Sort(ttfts)
	slices.Sort(peds)
	bm, pm := ttfts[len(ttfts)/2], peds[len(peds)/2]
	t.Logf("bench median TTFT %.1f ms (%v), native prompt_eval_duration median %.1f ms (%v)", bm, ttfts, pm, peds)
	if tol := 50 + 0.35*pm; bm < pm-tol || bm > pm+tol {
		t.Errorf("bench median TTFT %.1f ms vs Ollama prompt_eval_duration %.1f ms: differ by more than %s", bm, pm, fmt.Sprintf("%.0f ms", tol))
	}
}

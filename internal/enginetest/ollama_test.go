package enginetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gguf"
)

const model = "tiny"

func chatMsgs(text string) []Message { return []Message{{Role: "user", Content: text}} }

// expectedPromptTokens predicts the engine's prompt_eval_count: the chat
// template rendered, tokenized by the model's own vocabulary, plus BOS.
func expectedPromptTokens(v *gguf.Vocab, msgs []Message) int {
	cm := make([]gguf.ChatMessage, len(msgs))
	for i, m := range msgs {
		cm[i] = gguf.ChatMessage{Role: m.Role, Content: m.Content}
	}
	return len(v.Tokenize(gguf.RenderChat(cm), true))
}

func median(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestOllama runs every check that needs one engine against a single
// `ollama serve`, so the suite pays the start-up and model load once.
func TestOllama(t *testing.T) {
	bin := Binary(t)
	o := Start(t, bin)
	v := o.Create(t, model, gguf.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Load the model before anything is timed.
	if _, err := o.Chat(ctx, model, chatMsgs("warm up"), 2); err != nil {
		t.Fatalf("warm-up: %v\n%s", err, o.LogTail())
	}

	t.Run("OpenAIStreamAndTokenCounts", func(t *testing.T) { testOpenAIStream(ctx, t, o, v) })
	t.Run("ClientTTFTMatchesPromptEvalDuration", func(t *testing.T) { testNativeTimings(ctx, t, o, v) })
	t.Run("PrefixCachingLowersTTFT", func(t *testing.T) { testPrefixCaching(ctx, t, o, v) })
	t.Run("Bench", func(t *testing.T) { testBench(ctx, t, o, v) })
}

// Ollama's OpenAI-compatible stream: completes with [DONE], one content chunk
// per token, finish_reason "length" at max_tokens (the synthesized model never
// samples end-of-sequence), usage that matches our own tokenizer exactly.
func testOpenAIStream(ctx context.Context, t *testing.T, o *Ollama, v *gguf.Vocab) {
	const maxTokens = 12
	for i, n := range []int{1, 50, 300} {
		msgs := chatMsgs(Words(v, n, uint64(100+i)))
		r, err := o.StreamChat(ctx, model, msgs, maxTokens)
		if err != nil {
			t.Fatalf("prompt of %d words: %v\n%s", n, err, o.LogTail())
		}
		if !r.SawDone || r.FinishReason != "length" {
			t.Errorf("%d words: [DONE] %v, finish_reason %q (want length)", n, r.SawDone, r.FinishReason)
		}
		if r.OutputTokens != maxTokens || r.ContentChunks != maxTokens {
			t.Errorf("%d words: usage.completion_tokens %d, content chunks %d, want both %d (text %q)", n, r.OutputTokens, r.ContentChunks, maxTokens, r.Text)
		}
		if want := expectedPromptTokens(v, msgs); r.PromptTokens != want {
			t.Errorf("%d words: usage.prompt_tokens %d, our tokenizer predicts %d", n, r.PromptTokens, want)
		}
		// Output is whole vocabulary words: our tokenizer counts it exactly.
		if got := len(v.Tokenize(strings.TrimPrefix(r.Text, " "), false)); got != maxTokens {
			t.Errorf("%d words: output %q re-tokenizes to %d tokens, want %d", n, r.Text, got, maxTokens)
		}
		if r.TTFT <= 0 || r.TTFT > r.E2E {
			t.Errorf("%d words: TTFT %v, E2E %v", n, r.TTFT, r.E2E)
		}
	}
}

// The engine's own prompt_eval_duration (runner start to first sampled
// token) is an independent measure of TTFT: a client's TTFT for the same
// request adds only HTTP, templating and the server's proxying.
func testNativeTimings(ctx context.Context, t *testing.T, o *Ollama, v *gguf.Vocab) {
	const words, rounds = 300, 3
	var diffs, peds []time.Duration
	for i := 0; i < rounds; i++ {
		msgs := chatMsgs(Words(v, words, uint64(200+i)))
		ttft, r, err := o.StreamNative(ctx, model, msgs, 4)
		if err != nil {
			t.Fatal(err)
		}
		if want := expectedPromptTokens(v, msgs); r.PromptEvalCount != want || r.EvalCount != 4 || r.DoneReason != "length" {
			t.Errorf("prompt_eval_count %d (want %d), eval_count %d (want 4), done_reason %q", r.PromptEvalCount, want, r.EvalCount, r.DoneReason)
		}
		ped := time.Duration(r.PromptEvalDuration)
		t.Logf("%d-token prompt: client TTFT %v, prompt_eval_duration %v, load %v", r.PromptEvalCount, ttft, ped, time.Duration(r.LoadDuration))
		diffs = append(diffs, ttft-ped)
		peds = append(peds, ped)
	}
	// Tolerance: the client can never see the token before the engine
	// sampled it (allow 2 ms for the two processes' clocks), and the
	// overhead is 5-15 ms on a quiet machine, 20-60 ms on a 2-core box at
	// load average 20; 100 ms leaves room for CI running other packages.
	d := median(diffs)
	if d < -2*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("median client TTFT - prompt_eval_duration = %v, want within [-2ms, 100ms] (diffs %v)", d, diffs)
	}
	if median(peds) < 5*time.Millisecond {
		t.Errorf("median prompt_eval_duration %v for %d tokens: the model does no real work?", median(peds), words)
	}
}

// A repeated long prefix is served from the runner's KV cache: TTFT drops.
func testPrefixCaching(ctx context.Context, t *testing.T, o *Ollama, v *gguf.Vocab) {
	const prefixWords, rounds = 600, 2
	var fresh, cached []time.Duration
	for i := 0; i < rounds; i++ {
		prefix := Words(v, prefixWords, uint64(300+i))
		a, err := o.StreamChat(ctx, model, chatMsgs(prefix+" first question"), 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := o.StreamChat(ctx, model, chatMsgs(prefix+" second answer"), 2)
		if err != nil {
			t.Fatal(err)
		}
		fresh, cached = append(fresh, a.TTFT), append(cached, b.TTFT)
	}
	t.Logf("%d-word shared prefix: fresh TTFT %v, cached TTFT %v", prefixWords, fresh, cached)
	if median(cached) > median(fresh)/2 {
		t.Errorf("median TTFT with a cached prefix %v, fresh %v: want at most half", median(cached), median(fresh))
	}
}

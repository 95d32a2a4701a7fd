package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gguf"
)

// BenchmarkOllamaTTFT measures, side by side in one run, a client's TTFT on
// Ollama's OpenAI-compatible stream and Ollama's own prompt_eval_duration on
// the native API, for fresh prompts (no cache hits) of several sizes:
//
//	go test ./internal/enginetest -run '^$' -bench OllamaTTFT -benchtime 5x
//
// Reported per prompt size: ttft_ms (OpenAI stream, client side),
// native_ttft_ms (native stream, client side), prompt_eval_ms (engine), and
// native_minus_eval_ms (the same requests' difference).
func BenchmarkOllamaTTFT(b *testing.B) {
	bin := Binary(b)
	o := Start(b, bin)
	v := o.Create(b, model, gguf.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := o.Chat(ctx, model, chatMsgs("warm up"), 2); err != nil {
		b.Fatal(err)
	}
	seed := uint64(1000)
	for _, words := range []int{100, 1000, 3000} {
		b.Run(fmt.Sprintf("prompt=%d", words), func(b *testing.B) {
			var ttft, nttft, ped, diff time.Duration
			for b.Loop() {
				seed++
				r, err := o.StreamChat(ctx, model, chatMsgs(Words(v, words, seed)), 2)
				if err != nil {
					b.Fatal(err)
				}
				seed++
				nt, nr, err := o.StreamNative(ctx, model, chatMsgs(Words(v, words, seed)), 2)
				if err != nil {
					b.Fatal(err)
				}
				ttft += r.TTFT
				nttft += nt
				ped += time.Duration(nr.PromptEvalDuration)
				diff += nt - time.Duration(nr.PromptEvalDuration)
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
			b.ReportMetric(ms(ttft), "ttft_ms")
			b.ReportMetric(ms(nttft), "native_ttft_ms")
			b.ReportMetric(ms(ped), "prompt_eval_ms")
			b.ReportMetric(ms(diff), "native_minus_eval_ms")
		})
	}
}

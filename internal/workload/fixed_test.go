package workload

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

func TestPromptGenExactLengths(t *testing.T) {
	tok := DefaultTokenizer()
	g, err := NewPromptGen(tok)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 7, 128, 512, 1000, 4096} {
		text, ids, err := g.Text(rng, n)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if got := tok.Count(text); got != n || len(ids) != n {
			t.Errorf("n=%d: count %d, ids %d", n, got, len(ids))
		}
		if tok.Decode(ids) != text {
			t.Errorf("n=%d: ids do not decode to the text", n)
		}
	}
}

func TestPromptGenExtend(t *testing.T) {
	tok := DefaultTokenizer()
	g, _ := NewPromptGen(tok)
	rng := rand.New(rand.NewPCG(3, 4))
	prefix, pids, err := g.Text(rng, 100)
	if err != nil {
		t.Fatal(err)
	}
	text, ids, err := g.Extend(rng, prefix, 100, 37)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, prefix) || len(ids) != 137 || tok.Count(text) != 137 {
		t.Fatalf("extend: prefix kept %v, %d ids, count %d", strings.HasPrefix(text, prefix), len(ids), tok.Count(text))
	}
	for i := range pids {
		if ids[i] != pids[i] {
			t.Fatalf("prefix tokens changed at %d", i)
		}
	}
	if _, _, err := g.Extend(rng, prefix, 99, 1); err == nil {
		t.Error("wrong prefix count must fail")
	}
}

func TestFixedSource(t *testing.T) {
	ctx := context.Background()
	tok := DefaultTokenizer()
	src, err := NewFixed(FixedOptions{PromptTokens: 64, MaxTokens: 32, MinTokens: 32, Seed: 7, Chat: true, Requests: 20, Scenario: "x"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	firstWords := map[string]bool{}
	for i := 0; ; i++ {
		r, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			if i != 20 {
				t.Fatalf("EOF after %d requests, want 20", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Index != i || r.PromptTokens != 64 || len(r.Tokens) != 64 || tok.Count(r.Prompt) != 64 {
			t.Fatalf("request %d: index %d prompt tokens %d ids %d count %d", i, r.Index, r.PromptTokens, len(r.Tokens), tok.Count(r.Prompt))
		}
		if len(r.Messages) != 1 || r.Messages[0].Role != "user" || r.Messages[0].Content != r.Prompt {
			t.Fatalf("messages %+v", r.Messages)
		}
		if r.MaxTokens != 32 || r.MinTokens != 32 || r.Scenario != "x" {
			t.Fatalf("request fields %+v", r)
		}
		seen[r.Prompt] = true
		firstWords[strings.Fields(r.Prompt)[0]+" "+strings.Fields(r.Prompt)[1]] = true
	}
	if len(seen) != 20 {
		t.Errorf("%d distinct prompts of 20", len(seen))
	}
	// Distinct from the first tokens on, so prefix caches cannot hit.
	if len(firstWords) < 19 {
		t.Errorf("only %d distinct two-word openings of 20", len(firstWords))
	}
}

func TestFixedReproducibleAndSame(t *testing.T) {
	ctx := context.Background()
	a, _ := NewFixed(FixedOptions{PromptTokens: 16, MaxTokens: 8, Seed: 1})
	b, _ := NewFixed(FixedOptions{PromptTokens: 16, MaxTokens: 8, Seed: 1})
	c, _ := NewFixed(FixedOptions{PromptTokens: 16, MaxTokens: 8, Seed: 2})
	ra, _ := a.Next(ctx)
	rb, _ := b.Next(ctx)
	rc, _ := c.Next(ctx)
	if ra.Prompt != rb.Prompt || ra.Prompt == rc.Prompt {
		t.Error("seeds do not control prompts")
	}
	if ra.Messages != nil {
		t.Error("Chat=false must leave Messages empty")
	}
	s, _ := NewFixed(FixedOptions{PromptTokens: 16, MaxTokens: 8, SamePrompt: true})
	r1, _ := s.Next(ctx)
	r2, _ := s.Next(ctx)
	if r1.Prompt != r2.Prompt || r1.Index == r2.Index {
		t.Error("SamePrompt must repeat the prompt with new indices")
	}
}

func TestFixedConcurrentNext(t *testing.T) {
	src, _ := NewFixed(FixedOptions{PromptTokens: 8, MaxTokens: 8, Requests: 100})
	var mu sync.Mutex
	idx := map[int]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := src.Next(context.Background())
				if err != nil {
					return
				}
				mu.Lock()
				idx[r.Index] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(idx) != 100 {
		t.Fatalf("%d distinct indices, want 100", len(idx))
	}
}

func TestFixedOptionErrors(t *testing.T) {
	for _, o := range []FixedOptions{
		{PromptTokens: 0, MaxTokens: 1},
		{PromptTokens: 1, MaxTokens: 0},
		{PromptTokens: 1, MaxTokens: 4, MinTokens: 5},
		{PromptTokens: 1, MaxTokens: 4, Requests: -1},
	} {
		if _, err := NewFixed(o); err == nil {
			t.Errorf("%+v: want error", o)
		}
	}
	src, _ := NewFixed(FixedOptions{PromptTokens: 1, MaxTokens: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := src.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}
}

func BenchmarkPromptGen(b *testing.B) {
	g, err := NewPromptGen(DefaultTokenizer())
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{128, 1024, 8192} {
		b.Run(strconvI(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			for b.Loop() {
				if _, _, err := g.Text(rng, n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// Start-up cost of the default tokenizer: our single-pass parser against the
// generic loader plus tiktoken-go's encoder construction, side by side.
func BenchmarkDefaultTokenizerLoad(b *testing.B) {
	b.Run("fast-parse", func(b *testing.B) {
		for b.Loop() {
			if _, err := loadTiktoken("cl100k_base"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tiktoken-go-loader", func(b *testing.B) {
		for b.Loop() {
			ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
			if err != nil {
				b.Fatal(err)
			}
			spec := tiktokenSpecs["cl100k_base"]
			if _, err := tiktoken.NewCoreBPE(ranks, spec.specials, spec.pattern); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package workload

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestPromptScale: with PromptScale s the sources build prompts of
// round(P/s) local tokens and record P, the server-token length asked for;
// without it (0 or 1) nothing changes.
func TestPromptScale(t *testing.T) {
	tok := DefaultTokenizer()
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		scale        float64
		prompt       int
		wantLocal    int
		wantRecorded int
	}{
		{"unscaled", 0, 500, 500, 500},
		{"one", 1, 500, 500, 500},
		{"three", 3.1, 500, 161, 500},
		{"half", 0.5, 100, 200, 100},
		{"tiny", 10, 3, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx, err := NewFixed(FixedOptions{PromptTokens: tc.prompt, MaxTokens: 4, Tokenizer: tok, Seed: 1, Chat: true, PromptScale: tc.scale})
			if err != nil {
				t.Fatal(err)
			}
			gen, err := NewGenerated(GenOptions{Tokenizer: tok, Seed: 1, Prompt: FixedDist(tc.prompt), Output: FixedDist(4), PromptScale: tc.scale})
			if err != nil {
				t.Fatal(err)
			}
			for _, src := range []Source{fx, gen} {
				r, err := src.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Count(r.Prompt); got != tc.wantLocal || len(r.Tokens) != tc.wantLocal {
					t.Errorf("%T: prompt of %d local tokens (%d ids), want %d", src, got, len(r.Tokens), tc.wantLocal)
				}
				if r.PromptTokens != tc.wantRecorded {
					t.Errorf("%T: PromptTokens %d, want %d", src, r.PromptTokens, tc.wantRecorded)
				}
			}
		})
	}
	// Shared prefixes scale too: 300 prefix + 100 suffix server tokens.
	g, err := NewGenerated(GenOptions{Tokenizer: tok, Seed: 2, Prompt: FixedDist(100), Output: FixedDist(4),
		Prefix: &PrefixSpec{Groups: 2, Tokens: 300}, PromptScale: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := tok.Count(r.Messages[0].Content); n != 150 {
		t.Errorf("prefix of %d local tokens, want 150", n)
	}
	if r.PromptTokens < 398 || r.PromptTokens > 402 {
		t.Errorf("PromptTokens %d, want 400 (±2 for a merge at the boundary)", r.PromptTokens)
	}
	if _, err := NewGenerated(GenOptions{Tokenizer: tok, Prompt: FixedDist(1), Output: FixedDist(1), PromptScale: -1}); err == nil {
		t.Error("a negative scale was accepted")
	}
}

// TestSpacedWords: the calibration list is every spaced word once,
// reproducibly shuffled.
func TestSpacedWords(t *testing.T) {
	gen, err := NewPromptGen(DefaultTokenizer())
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := gen.SpacedWords(1), gen.SpacedWords(1), gen.SpacedWords(2)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Error("SpacedWords is not a reproducible per-seed shuffle")
	}
	sorted := slices.Clone(a)
	slices.Sort(sorted)
	want := slices.Clone(gen.wl.spaced)
	slices.Sort(want)
	if !slices.Equal(sorted, want) {
		t.Errorf("SpacedWords holds %d words, not the generator's %d", len(a), len(want))
	}
	for _, w := range a[:10] {
		if !strings.HasPrefix(w, " ") {
			t.Errorf("word %q has no leading space", w)
		}
	}
}

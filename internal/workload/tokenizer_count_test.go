package workload

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func countEncoders(t testing.TB) map[string]*fastEncoder {
	encs := map[string]*fastEncoder{}
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		tok, err := EmbeddedTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		encs[name] = tok.(*tiktokenTokenizer).fast
	}
	return encs
}

// The count is the length of the encoding, text for text, on both
// embedded encodings.
func TestCountMatchesEncode(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 4))
	alphabet := []rune("ab Z9 1234 \t\n\r'.,!?é你🙂\u00a0-_sS'LlDd")
	texts := append([]string{"", strings.Repeat("x", 500), strings.Repeat("ab1 ", 300), wordsTxt[:4000]}, trickyTexts...)
	for range 300 {
		var b strings.Builder
		for j := rng.IntN(80); j >= 0; j-- {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for name, f := range countEncoders(t) {
		for _, s := range texts {
			if got, want := f.count(s), len(f.encode(s)); got != want {
				t.Fatalf("%s %q: count %d, len(encode) %d", name, s, got, want)
			}
		}
	}
}

// A request's output counted allocates nothing once the pool is warm.
func TestCountAllocations(t *testing.T) {
	f := countEncoders(t)["cl100k_base"]
	text := "The quick brown fox jumps over the lazy dog, 12345 times!"
	f.count(text)
	if n := testing.AllocsPerRun(100, func() { f.count(text) }); n != 0 {
		t.Errorf("count: %v allocations per text, want 0", n)
	}
}

func FuzzCount(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	encs := countEncoders(f)
	f.Fuzz(func(t *testing.T, s string) {
		for name, e := range encs {
			if got, want := e.count(s), len(e.encode(s)); got != want {
				t.Fatalf("%s %q: count %d, len(encode) %d", name, s, got, want)
			}
		}
	})
}

func BenchmarkCount(b *testing.B) {
	f := countEncoders(b)["cl100k_base"]
	text := "The quick brown fox jumps over the lazy dog, 12345 times!"
	b.ReportAllocs()
	for b.Loop() {
		f.count(text)
	}
}

package workload

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// referenceCl100k is tiktoken-go's regexp2-based encoder over the same ranks.
var referenceCl100k = sync.OnceValue(func() *tiktoken.Tiktoken {
	ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err != nil {
		panic(err)
	}
	spec := tiktokenSpecs["cl100k_base"]
	bpe, err := tiktoken.NewCoreBPE(ranks, spec.specials, spec.pattern)
	if err != nil {
		panic(err)
	}
	return tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{}, map[string]any{})
})

var trickyTexts = []string{
	"", " ", "  ", "\n", "\r\n", " \n ", "\n\n\nx", "a  b", "a \t b", "\t\tword", "\t!", " !", "!!!\n\n",
	"I'm you'RE it's he'LL we've 'd 's x'", "'hello", "don't", "3.14159 12345 1,000,000",
	"٣٤٥ ½ Ⅻ", "naïve café — 你好，世界 🙂 🙂🙂", "tab\there", "trailing   ", "  leading",
	"mixed\r\n\r\n  \n  indent", "a\u00a0b\u2003c\u3000d", "x\u0085y", "$%^&*()_+-=[]{}|;:\",.<>/?`~",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "ALLCAPS Word wOrD", "e\u0301 combining",
}

func TestFastCl100kMatchesRegexp(t *testing.T) {
	ref := referenceCl100k()
	tok := DefaultTokenizer()
	texts := append([]string{}, trickyTexts...)
	rng := rand.New(rand.NewPCG(7, 7))
	alphabet := []rune("ab Z9 \t\n\r'.,!?é你🙂\u00a0-_sS'LlDd")
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for j := rng.IntN(40); j >= 0; j-- {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		want := ref.EncodeOrdinary(s)
		got := tok.Encode(s)
		if len(want) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %v\nwant %v", s, got, want)
		}
		if n := tok.Count(s); n != len(want) {
			t.Errorf("Count(%q) = %d, want %d", s, n, len(want))
		}
		if d := tok.Decode(got); d != s {
			t.Errorf("decode %q -> %q", s, d)
		}
	}
}

func FuzzFastCl100k(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	ref := referenceCl100k()
	tok := DefaultTokenizer()
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // the reference re-encodes invalid bytes as U+FFFD
		}
		want := ref.EncodeOrdinary(s)
		got := tok.Encode(s)
		if len(want)+len(got) > 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %v\nwant %v", s, got, want)
		}
		if tok.Decode(got) != s {
			t.Fatalf("round trip of %q", s)
		}
	})
}

// The hand-coded splitters cut exactly where their regular expressions do.
func TestFastSplittersMatchRegexp(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	alphabet := []rune("ab Z9 1234 \t\n\r'.,!?é你🙂\u00a0-_sS'LlDd")
	texts := append([]string{}, trickyTexts...)
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for j := rng.IntN(40); j >= 0; j-- {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for pat, split := range fastSplitters {
		re := regexp2.MustCompile(pat, regexp2.None)
		for _, s := range texts {
			want := splitPiece(re, s, "Isolated", false)
			var got []string
			split(s, func(a, b int) { got = append(got, s[a:b]) })
			if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
				t.Errorf("pattern %.20s… on %q:\n got %q\nwant %q", pat, s, got, want)
			}
		}
	}
}

func FuzzFastSplitters(f *testing.F) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	type pair struct {
		re    *regexp2.Regexp
		split func(string, func(a, b int))
	}
	var ps []pair
	for pat, split := range fastSplitters {
		ps = append(ps, pair{regexp2.MustCompile(pat, regexp2.None), split})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, p := range ps {
			want := splitPiece(p.re, s, "Isolated", false)
			var got []string
			p.split(s, func(a, b int) { got = append(got, s[a:b]) })
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("%q:\n got %q\nwant %q", s, got, want)
			}
		}
	})
}

func TestO200kMatchesTiktokenGo(t *testing.T) {
	ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	spec := tiktokenSpecs["o200k_base"]
	bpe, err := tiktoken.NewCoreBPE(ranks, spec.specials, spec.pattern)
	if err != nil {
		t.Fatal(err)
	}
	ref := tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{}, map[string]any{})
	tok, err := EmbeddedTokenizer("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range trickyTexts {
		want := ref.EncodeOrdinary(s)
		got := tok.Encode(s)
		if len(want)+len(got) > 0 && !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %v\nwant %v", s, got, want)
		}
		if tok.Decode(got) != s || tok.Count(s) != len(want) {
			t.Errorf("%q: decode or count differs", s)
		}
	}
}

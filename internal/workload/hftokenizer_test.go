package workload

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

const r50kPattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// tiktokenToHF converts tiktoken ranks into a HuggingFace tokenizer.json the
// way HF's own converter does: each multi-byte token's merge is found by
// running rank-BPE on its bytes with only lower ranks allowed.
func tiktokenToHF(t testing.TB, ranks map[string]int, preTokenizer any) []byte {
	t.Helper()
	type tokRank struct {
		s string
		r int
	}
	var all []tokRank
	for s, r := range ranks {
		all = append(all, tokRank{s, r})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r < all[j].r })
	enc := func(s string) string {
		var out []rune
		for i := 0; i < len(s); i++ {
			out = append(out, byteToRune[s[i]])
		}
		return string(out)
	}
	vocab := map[string]int{}
	var merges [][2]string
	for _, tr := range all {
		vocab[enc(tr.s)] = tr.r
		if len(tr.s) < 2 {
			continue
		}
		parts := make([]string, len(tr.s))
		for i := range parts {
			parts[i] = tr.s[i : i+1]
		}
		for len(parts) > 2 {
			best, bi := -1, -1
			for i := 0; i+1 < len(parts); i++ {
				if r, ok := ranks[parts[i]+parts[i+1]]; ok && r < tr.r && (best < 0 || r < best) {
					best, bi = r, i
				}
			}
			if bi < 0 {
				break
			}
			parts = append(parts[:bi], append([]string{parts[bi] + parts[bi+1]}, parts[bi+2:]...)...)
		}
		if len(parts) != 2 {
			t.Fatalf("token %q does not split into two lower-ranked tokens", tr.s)
		}
		merges = append(merges, [2]string{enc(parts[0]), enc(parts[1])})
	}
	doc := map[string]any{
		"added_tokens":  []any{map[string]any{"id": 50256, "content": "<|endoftext|>", "special": true}},
		"normalizer":    nil,
		"pre_tokenizer": preTokenizer,
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": false},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var hfCompareTexts = []string{
	"hello world",
	"The quick brown fox jumps over the lazy dog.",
	"  leading spaces and trailing   ",
	"numbers 1234567 and 3.14159, symbols: $%^&*()!",
	"Don't you'll we've I'm they're it's",
	"multi\nline\r\n\ttext\n\n",
	"unicode: naïve café — 你好，世界 🙂",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n",
}

// A GPT-2 tokenizer.json (ByteLevel with its regex) built from the embedded
// r50k_base ranks must tokenize exactly like tiktoken's r50k_base.
func TestHFByteLevelMatchesTiktokenGPT2(t *testing.T) {
	ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("r50k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	data := tiktokenToHF(t, ranks, map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	hf, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	bpe, err := tiktoken.NewCoreBPE(ranks, map[string]int{"<|endoftext|>": 50256}, r50kPattern)
	if err != nil {
		t.Fatal(err)
	}
	ref := tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{}, map[string]any{})
	texts := append([]string{}, hfCompareTexts...)
	rng := rand.New(rand.NewPCG(5, 5))
	g, _ := NewPromptGen(DefaultTokenizer())
	for i := 0; i < 5; i++ {
		s, _, _ := g.Text(rng, 200)
		texts = append(texts, s)
	}
	for _, s := range texts {
		want := ref.EncodeOrdinary(s)
		got := hf.Encode(s)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %v\nwant %v", s, got, want)
		}
		if d := hf.Decode(got); d != s {
			t.Errorf("decode %q -> %q", s, d)
		}
	}
	if got := hf.Encode("a<|endoftext|>b"); len(got) != 3 || got[1] != 50256 {
		t.Errorf("added token not matched: %v", got)
	}
	// Exact-length prompts work under the loaded tokenizer too.
	hg, err := NewPromptGen(hf)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 50, 300} {
		text, ids, err := hg.Text(rng, n)
		if err != nil || len(ids) != n || hf.Count(text) != n || ref.EncodeOrdinary(text) == nil || len(ref.EncodeOrdinary(text)) != n {
			t.Errorf("n=%d: %v ids=%d", n, err, len(ids))
		}
	}
}

// The Llama-3 layout: a Split pre-tokenizer with the tiktoken regex followed
// by ByteLevel without its own regex, checked against cl100k_base.
func TestHFSplitByteLevelMatchesCl100k(t *testing.T) {
	if testing.Short() {
		t.Skip("converts 100k ranks")
	}
	ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("cl100k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	pre := map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": tiktokenSpecs["cl100k_base"].pattern}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
	}}
	hf, err := parseHFTokenizer(tiktokenToHF(t, ranks, pre))
	if err != nil {
		t.Fatal(err)
	}
	ref := DefaultTokenizer()
	for _, s := range hfCompareTexts {
		if got, want := hf.Encode(s), ref.Encode(s); !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %v\nwant %v", s, got, want)
		}
	}
}

func TestHFSentencePieceStyle(t *testing.T) {
	tok, err := LoadTokenizer("testdata/sp-tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		text string
		want []int
	}{
		{"hello world", []int{18, 23}},
		{"hello", []int{18}},
		{"hello €", []int{18, 6, 3, 4, 5}}, // € has no token: byte fallback
		{"<s>hello", []int{1, 18}},
		{"held", []int{16, 22}},
	}
	for _, c := range cases {
		got := tok.Encode(c.text)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	if got := tok.Decode([]int{18, 23}); got != "hello world" {
		t.Errorf("decode = %q", got)
	}
	if got := tok.Decode([]int{18, 6, 3, 4, 5}); got != "hello €" {
		t.Errorf("decode fallback = %q", got)
	}
}

func TestHFTokenizerErrors(t *testing.T) {
	cases := map[string]string{
		"not json":     `{`,
		"wordpiece":    `{"model":{"type":"WordPiece","vocab":{"a":0}}}`,
		"empty vocab":  `{"model":{"type":"BPE","vocab":{},"merges":[]}}`,
		"bad merge":    `{"model":{"type":"BPE","vocab":{"a":0},"merges":["ab"]}}`,
		"unknown pre":  `{"pre_tokenizer":{"type":"Weird"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"unknown norm": `{"normalizer":{"type":"Weird"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
		"bad regex":    `{"pre_tokenizer":{"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`,
	}
	for name, js := range cases {
		if _, err := parseHFTokenizer([]byte(js)); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	if _, err := LoadTokenizer("nonexistent_tokenizer"); err == nil {
		t.Error("unknown name: want error")
	}
	if _, err := LoadTokenizer(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file: want error")
	}
}

func FuzzHFTokenizerParse(f *testing.F) {
	data, _ := os.ReadFile("testdata/sp-tokenizer.json")
	f.Add(data)
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"pre_tokenizer":{"type":"ByteLevel"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := parseHFTokenizer(b)
		if err != nil {
			return
		}
		_ = tok.Decode(tok.Encode("hello world ab"))
	})
}

func FuzzHFEncode(f *testing.F) {
	tok, err := LoadTokenizer("testdata/sp-tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("hello world")
	f.Add("▁▁ x €")
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id > 23 {
				t.Fatalf("id %d out of vocab", id)
			}
		}
	})
}

// Encoding speed of the same 1,000-token text under the embedded tiktoken
// encoder and under the tokenizer.json path (GPT-2 layout, r50k ranks), side
// by side in one run.
func BenchmarkEncode1k(b *testing.B) {
	ranks, err := loader.NewOfflineLoader().LoadTiktokenBpe("r50k_base.tiktoken")
	if err != nil {
		b.Fatal(err)
	}
	hf, err := parseHFTokenizer(tiktokenToHF(b, ranks, map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}))
	if err != nil {
		b.Fatal(err)
	}
	g, _ := NewPromptGen(DefaultTokenizer())
	text, _, _ := g.Text(rand.New(rand.NewPCG(1, 1)), 1000)
	for _, c := range []struct {
		name string
		tok  Tokenizer
	}{{"fast-cl100k", DefaultTokenizer()}, {"regexp2-cl100k", refTok{referenceCl100k()}}, {"hf-json-gpt2", hf}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.tok.Encode(text)
			}
			b.ReportMetric(1000*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// refTok adapts tiktoken-go's encoder for side-by-side benchmarks.
type refTok struct{ t *tiktoken.Tiktoken }

func (r refTok) Name() string            { return "tiktoken-go" }
func (r refTok) Encode(s string) []int   { return r.t.EncodeOrdinary(s) }
func (r refTok) Decode(ids []int) string { return r.t.Decode(ids) }
func (r refTok) Count(s string) int      { return len(r.t.EncodeOrdinary(s)) }

package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/gguf"
)

// writeGGUF writes a GGUF file holding only metadata (a tokenizer needs no
// tensors) and returns its path.
func writeGGUF(t *testing.T, kvs []gguf.KV) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(f, kvs, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGGUFTokenizerSentencePiece loads the tokenizer of a synthesized
// llama-type GGUF through LoadTokenizer and checks it against the
// vocabulary's own llama.cpp-style tokenizer (which the Ollama engine tests
// show agrees with the engine), and that exact-length prompts built with it
// are exact for the engine (+1 for BOS).
func TestGGUFTokenizerSentencePiece(t *testing.T) {
	for _, size := range []int{2000, 16384} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := gguf.DefaultConfig()
			c.Vocab = size
			v, err := gguf.NewVocab(size)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := LoadTokenizer(writeGGUF(t, c.Metadata(v)))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"", "hello world", "  two  spaces", "héllo 日本 😀", "123 4567", "func main() { return x+1 }", "\n\ttab", "the model of time"} {
				got, want := tok.Encode(s), v.Tokenize(s, false)
				if len(want) == 0 {
					want = []int{}
				}
				if !slices.Equal(got, want) {
					t.Errorf("Encode(%q) = %v, want %v", s, got, want)
				}
				if s != "" && tok.Decode(got) != " "+s && tok.Decode(got) != s {
					t.Errorf("Decode(Encode(%q)) = %q", s, tok.Decode(got))
				}
			}
			gen, err := NewPromptGen(tok)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, n := range []int{1, 7, 100, 500} {
				text, ids, err := gen.Text(rng, n)
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) != n || len(v.Tokenize(text, true)) != n+1 {
					t.Errorf("prompt of %d: %d ids, engine count %d (want %d + BOS)", n, len(ids), len(v.Tokenize(text, true)), n)
				}
			}
		})
	}
}

// TestGGUFSentencePieceByteTokens: byte-fallback tokens are found by type
// and text wherever they are, and a missing byte falls back to <unk>.
func TestGGUFSentencePieceByteTokens(t *testing.T) {
	kvs := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: []string{"<unk>", "<s>", "</s>", "▁", "a", "▁a", "<0x62>", "b"}},
		{Key: "tokenizer.ggml.scores", Value: []float32{0, 0, 0, -1, -2, -3, 0, -100}},
		{Key: "tokenizer.ggml.token_type", Value: []int32{2, 3, 3, 1, 1, 1, 6, 5}},
	}
	tok, err := LoadTokenizer(writeGGUF(t, kvs))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"a", []int{5}},
		{"ab", []int{5, 6}}, // "b" is unused, so the byte token
		{"ac", []int{5, 0}}, // no <0x63>: <unk>
		{" a", []int{3, 5}},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestGGUFTokenizerGPT2 is a hand-checked byte-level BPE vocabulary.
func TestGGUFTokenizerGPT2(t *testing.T) {
	var tokens []string
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteToRune[b]))
	}
	extra := []string{"he", "Ġhe", "ll", "llo", "<|eot|>"}
	tokens = append(tokens, extra...)
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = gguf.TokenNormal
	}
	types[len(types)-1] = gguf.TokenControl
	kvs := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "default"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: []string{"h e", "Ġ he", "l l", "ll o"}},
	}
	tok, err := LoadTokenizer(writeGGUF(t, kvs))
	if err != nil {
		t.Fatal(err)
	}
	he, Ghe, llo, eot := 256, 257, 259, 260
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"hello", []int{he, llo}},
		{" hello", []int{Ghe, llo}},
		{"hello<|eot|>", []int{he, llo, eot}},
		{"x", []int{'x'}},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	if _, err := LoadTokenizer(writeGGUF(t, append(kvs[:1:1], gguf.KV{Key: "tokenizer.ggml.pre", Value: "mystery"}, kvs[2], kvs[3], kvs[4]))); err == nil {
		t.Error("an unknown tokenizer.ggml.pre was accepted")
	}
	if _, err := LoadTokenizer(writeGGUF(t, []gguf.KV{{Key: "tokenizer.ggml.model", Value: "bert"}, kvs[2]})); err == nil {
		t.Error("a bert tokenizer was accepted")
	}
}

// TestGGUFTokenizerLlama3 writes Llama-3's real tokenizer.json as the GGUF
// metadata llama.cpp's converter writes (gpt2 model, pre llama-bpe) and
// requires the GGUF path to encode the corpus exactly as Hugging Face's
// reference encoder does.
func TestGGUFTokenizerLlama3(t *testing.T) {
	tj, tc := llama3Files(t)
	data, err := os.ReadFile(tj)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, id := range f.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		n = max(n, a.ID+1)
	}
	tokens, types := make([]string, n), make([]int32, n)
	for i := range types {
		tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), gguf.TokenUnused
	}
	for s, id := range f.Model.Vocab {
		tokens[id], types[id] = s, gguf.TokenNormal
	}
	for _, a := range f.AddedTokens {
		tokens[a.ID], types[a.ID] = a.Content, gguf.TokenControl
		if !a.Special {
			types[a.ID] = gguf.TokenUserDefined
		}
	}
	merges := make([]string, 0, len(f.Model.Merges))
	for _, m := range f.Model.Merges {
		var s string
		if json.Unmarshal(m, &s) == nil {
			merges = append(merges, s)
			continue
		}
		var pair [2]string
		if err := json.Unmarshal(m, &pair); err != nil {
			t.Fatal(err)
		}
		merges = append(merges, pair[0]+" "+pair[1])
	}
	tok, err := LoadTokenizer(writeGGUF(t, []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "llama-bpe"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: merges},
	}))
	if err != nil {
		t.Fatal(err)
	}
	texts := diffCorpus()
	want := refEncode(t, tj, tc, texts)
	agree := 0
	for i, s := range texts {
		got := tok.Encode(s)
		if slices.Equal(got, want[i]) || (len(got) == 0 && len(want[i]) == 0) {
			agree++
			continue
		}
		t.Errorf("text %q:\n gguf      %v\n reference %v", s, got, want[i])
	}
	t.Logf("%d of %d texts encode identically to @huggingface/tokenizers through the GGUF path", agree, len(texts))
}

// FuzzGGUFTokenizer: any tokens, merges and text give a tokenizer or an
// error, and encoding never panics or yields ids outside the vocabulary.
func FuzzGGUFTokenizer(f *testing.F) {
	f.Add("gpt2", "default", "h\x00e\x00he\x00Ġ", "h e", "hello world")
	f.Add("llama", "", "<unk>\x00<s>\x00</s>\x00▁a\x00a", "", "a a")
	f.Add("gpt2", "llama-bpe", "a\x00b\x00ab", "a b\x00ab ab", "abab 12")
	f.Fuzz(func(t *testing.T, model, pre, tokens, merges, text string) {
		info := &gguf.TokenizerInfo{Model: model, Pre: pre, Tokens: strings.Split(tokens, "\x00"), AddSpacePrefix: true}
		if merges != "" {
			info.Merges = strings.Split(merges, "\x00")
		}
		tok, err := ggufTokenizer(info)
		if err != nil {
			return
		}
		for _, id := range tok.Encode(text) {
			if id < 0 || id >= len(info.Tokens) {
				t.Fatalf("id %d outside a vocabulary of %d", id, len(info.Tokens))
			}
		}
	})
}

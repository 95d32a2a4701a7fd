package gguf

import (
	"bytes"
	"slices"
	"testing"
)

// TestReadTokenizerRoundTrip: a synthesized model's tokenizer read back
// from its GGUF metadata tokenizes exactly as the vocabulary it was made
// from, and the metadata errors are reported.
func TestReadTokenizerRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.Vocab = 1000
	v, err := NewVocab(c.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, c.Metadata(v), nil, 0); err != nil {
		t.Fatal(err)
	}
	f, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.ReadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "llama" || len(info.Tokens) != c.Vocab || !info.AddSpacePrefix {
		t.Fatalf("tokenizer info: model %q, %d tokens, add_space_prefix %v", info.Model, len(info.Tokens), info.AddSpacePrefix)
	}
	got, err := VocabFromTokenizer(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello world", "zebra ünïcode 日本 \x00\xff", "  x", ""} {
		if a, b := got.Tokenize(s, true), v.Tokenize(s, true); !slices.Equal(a, b) {
			t.Errorf("Tokenize(%q) = %v, want %v", s, a, b)
		}
	}
	for _, tc := range []struct {
		name string
		kvs  []KV
	}{
		{"no model", []KV{{"tokenizer.ggml.tokens", []string{"a"}}}},
		{"no tokens", []KV{{"tokenizer.ggml.model", "llama"}}},
		{"model not a string", []KV{{"tokenizer.ggml.model", uint32(1)}, {"tokenizer.ggml.tokens", []string{"a"}}}},
		{"scores short", []KV{{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", []string{"a", "b"}}, {"tokenizer.ggml.scores", []float32{1}}}},
		{"types wrong width", []KV{{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", []string{"a"}}, {"tokenizer.ggml.token_type", []uint32{1}}}},
	} {
		if _, err := (&File{KV: tc.kvs}).ReadTokenizer(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// FuzzReadTokenizer: any header that parses yields a tokenizer or an error,
// never a panic, and a loaded SentencePiece vocabulary tokenizes any text.
func FuzzReadTokenizer(f *testing.F) {
	v, _ := NewVocab(MinVocab)
	var buf bytes.Buffer
	_ = Write(&buf, DefaultConfig().Metadata(v), nil, 0)
	f.Add(buf.Bytes(), "hello world")
	buf.Reset()
	_ = Write(&buf, []KV{{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", []string{"<0x41>", "▁"}}, {"tokenizer.ggml.token_type", []int32{6, 1}}}, nil, 0)
	f.Add(buf.Bytes(), "A b")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		file, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		info, err := file.ReadTokenizer()
		if err != nil {
			return
		}
		voc, err := VocabFromTokenizer(info)
		if err != nil {
			return
		}
		for _, id := range voc.Tokenize(text, false) {
			if id < 0 || id >= len(voc.Tokens) && id != UnkID {
				t.Fatalf("token id %d outside the vocabulary of %d", id, len(voc.Tokens))
			}
		}
	})
}

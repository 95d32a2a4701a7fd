package gguf

import (
	"fmt"
	"strconv"
	"strings"
)

// TokenizerInfo is a GGUF file's tokenizer metadata (the tokenizer.ggml.*
// keys), as llama.cpp and Ollama read it.
type TokenizerInfo struct {
	// Model is tokenizer.ggml.model: "llama" (SentencePiece), "gpt2"
	// (byte-level BPE), or others ttft does not reproduce.
	Model string
	// Pre is tokenizer.ggml.pre, the pre-tokenizer of a gpt2 model
	// ("llama-bpe", "qwen2", "default", ...); "" when absent.
	Pre    string
	Tokens []string
	Scores []float32 // nil when absent
	Types  []int32   // nil when absent
	Merges []string  // "a b" pairs, gpt2 models only
	// AddSpacePrefix is tokenizer.ggml.add_space_prefix (default true for
	// llama models, as in llama.cpp).
	AddSpacePrefix bool
}

// maxVocab bounds the vocabulary a file may declare (real ones stay under
// 300k), so a corrupt file fails clearly instead of allocating gigabytes.
const maxVocab = 4 << 20

// ReadTokenizer extracts the tokenizer metadata of a parsed GGUF file.
func (f *File) ReadTokenizer() (*TokenizerInfo, error) {
	t := &TokenizerInfo{AddSpacePrefix: true}
	v, ok := f.Get("tokenizer.ggml.model")
	if !ok {
		return nil, fmt.Errorf("gguf: no tokenizer.ggml.model key (not a model file with a tokenizer)")
	}
	if t.Model, ok = v.(string); !ok {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.model is %T, want a string", v)
	}
	if v, ok := f.Get("tokenizer.ggml.pre"); ok {
		t.Pre, _ = v.(string)
	}
	v, ok = f.Get("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("gguf: no tokenizer.ggml.tokens")
	}
	if t.Tokens, ok = v.([]string); !ok {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens is %T, want an array of strings", v)
	}
	if len(t.Tokens) == 0 || len(t.Tokens) > maxVocab {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens has %d entries", len(t.Tokens))
	}
	if v, ok := f.Get("tokenizer.ggml.scores"); ok {
		if t.Scores, ok = v.([]float32); !ok || len(t.Scores) != len(t.Tokens) {
			return nil, fmt.Errorf("gguf: tokenizer.ggml.scores is not %d FLOAT32 values", len(t.Tokens))
		}
	}
	if v, ok := f.Get("tokenizer.ggml.token_type"); ok {
		if t.Types, ok = v.([]int32); !ok || len(t.Types) != len(t.Tokens) {
			return nil, fmt.Errorf("gguf: tokenizer.ggml.token_type is not %d INT32 values", len(t.Tokens))
		}
	}
	if v, ok := f.Get("tokenizer.ggml.merges"); ok {
		if t.Merges, ok = v.([]string); !ok {
			return nil, fmt.Errorf("gguf: tokenizer.ggml.merges is %T, want an array of strings", v)
		}
	}
	if v, ok := f.Get("tokenizer.ggml.add_space_prefix"); ok {
		if b, ok := v.(bool); ok {
			t.AddSpacePrefix = b
		}
	}
	return t, nil
}

// VocabFromTokenizer builds a SentencePiece ("llama") vocabulary from a
// file's tokenizer metadata, for Vocab.Tokenize. Byte-fallback tokens are
// found by their type and text (<0xXX>) rather than assumed at ids 3..258,
// since trained vocabularies need not put them there.
func VocabFromTokenizer(t *TokenizerInfo) (*Vocab, error) {
	if t.Model != "llama" {
		return nil, fmt.Errorf("gguf: tokenizer model %q is not SentencePiece (llama)", t.Model)
	}
	n := len(t.Tokens)
	v := &Vocab{Tokens: t.Tokens, Scores: t.Scores, Types: t.Types, index: make(map[string]int, n), noSpacePrefix: !t.AddSpacePrefix}
	if v.Scores == nil {
		v.Scores = make([]float32, n) // all equal: merges go leftmost first
	}
	if v.Types == nil {
		v.Types = make([]int32, n)
		for i := range v.Types {
			v.Types[i] = TokenNormal
		}
	}
	var bytes [256]int
	for i := range bytes {
		bytes[i] = -1
	}
	for id, s := range t.Tokens {
		typ := v.Types[id]
		if typ == TokenByte {
			if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
				if b, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
					bytes[b] = id
				}
			}
			continue
		}
		// Control and unused tokens are never produced from text by the
		// SentencePiece merge loop (llama.cpp only merges normal and
		// user-defined pieces).
		if typ == TokenControl || typ == TokenUnused || typ == TokenUnknown {
			continue
		}
		if _, dup := v.index[s]; !dup {
			v.index[s] = id
		}
	}
	v.byteIDs = &bytes
	return v, nil
}

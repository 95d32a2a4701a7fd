package workload

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/ttft-dev/ttft/internal/gguf"
)

// isGGUF reports whether the file at path starts with the GGUF magic.
func isGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false
	}
	return string(magic[:]) == "GGUF"
}

// LoadGGUFTokenizer reads the tokenizer stored in a GGUF model file (the
// format of llama.cpp and Ollama), so that prompts are counted exactly as
// the engine serving that file counts them. Only the header is read, never
// the weights. SentencePiece ("llama") vocabularies are tokenized as
// llama.cpp does (score-ordered merges, byte fallback); byte-level BPE
// ("gpt2") ones through the tokenizer.json machinery, with the split pattern
// named by tokenizer.ggml.pre. Other tokenizer models are refused.
func LoadGGUFTokenizer(path string) (Tokenizer, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading tokenizer: %w", err)
	}
	info, err := f.ReadTokenizer()
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	tok, err := ggufTokenizer(info)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	switch t := tok.(type) {
	case *spmTokenizer:
		t.name = path
	case *hfTokenizer:
		t.name = path
	}
	return tok, nil
}

func ggufTokenizer(info *gguf.TokenizerInfo) (Tokenizer, error) {
	switch info.Model {
	case "llama":
		v, err := gguf.VocabFromTokenizer(info)
		if err != nil {
			return nil, err
		}
		return &spmTokenizer{v: v}, nil
	case "gpt2":
		return gpt2FromGGUF(info)
	}
	return nil, fmt.Errorf("tokenizer.ggml.model %q is not supported (llama and gpt2 are)", info.Model)
}

// spmTokenizer is a GGUF SentencePiece vocabulary tokenized as llama.cpp
// does. Encode adds no BOS: like the other tokenizers here it counts the
// text alone; the engine's BOS is part of its template overhead.
type spmTokenizer struct {
	name  string
	v     *gguf.Vocab
	words listOnce
}

func (t *spmTokenizer) Name() string                 { return t.name }
func (t *spmTokenizer) wordList() (*wordList, error) { return t.words.get(t) }
func (t *spmTokenizer) Count(text string) int        { return len(t.Encode(text)) }
func (t *spmTokenizer) Decode(ids []int) string      { return t.v.Decode(ids) }

func (t *spmTokenizer) Encode(text string) []int {
	ids := t.v.Tokenize(text, false)
	if ids == nil {
		ids = []int{}
	}
	return ids
}

// ggufPreTokenizers maps tokenizer.ggml.pre values to the split pattern
// llama.cpp uses for them (llama-vocab.cpp), written as tokenizer.json's
// pre-tokenizer; ignoreMerges mirrors llama.cpp's ignore_merges for
// Llama-3 (a word already in the vocabulary is one token).
var ggufPreTokenizers = map[string]struct {
	pattern      string // "" = GPT-2's ByteLevel regex
	ignoreMerges bool
}{
	"":          {},
	"default":   {},
	"gpt-2":     {},
	"gpt2":      {},
	"llama-bpe": {cl100kPattern, true},
	"llama3":    {cl100kPattern, true},
	"smaug-bpe": {cl100kPattern, false},
	"dbrx":      {cl100kPattern, false},
	"qwen2":     {qwen2Pattern, false},
}

// gpt2FromGGUF builds a byte-level BPE tokenizer from GGUF metadata by
// writing the equivalent tokenizer.json and parsing it, so that both
// sources share one encoder.
func gpt2FromGGUF(info *gguf.TokenizerInfo) (*hfTokenizer, error) {
	pre, ok := ggufPreTokenizers[info.Pre]
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.pre %q is not supported (llama-bpe, qwen2, gpt-2 and default are)", info.Pre)
	}
	if len(info.Merges) == 0 {
		return nil, fmt.Errorf("a gpt2 tokenizer without tokenizer.ggml.merges")
	}
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	vocab := make(map[string]int, len(info.Tokens))
	var adds []added
	for id, s := range info.Tokens {
		typ := gguf.TokenNormal
		if info.Types != nil {
			typ = info.Types[id]
		}
		switch typ {
		case gguf.TokenControl, gguf.TokenUserDefined:
			// Matched in raw text as whole tokens, as HF's added tokens.
			if s != "" {
				adds = append(adds, added{id, s, typ == gguf.TokenControl})
			}
			continue
		case gguf.TokenUnused:
			continue
		}
		if _, dup := vocab[s]; !dup {
			vocab[s] = id
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": pre.pattern == ""}
	var pretok any = byteLevel
	if pre.pattern != "" {
		pretok = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pre.pattern}, "behavior": "Isolated", "invert": false},
			byteLevel,
		}}
	}
	doc := map[string]any{
		"added_tokens":  adds,
		"pre_tokenizer": pretok,
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model": map[string]any{
			"type": "BPE", "vocab": vocab, "merges": info.Merges, "ignore_merges": pre.ignoreMerges,
		},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("converting the gpt2 tokenizer: %w", err)
	}
	return parseHFTokenizer(data)
}

package workload

import (
	"fmt"
	"os"
	"strings"
)

// LoadTokenizer resolves a --tokenizer value: "" or an embedded encoding name
// (cl100k_base, o200k_base), the path of a HuggingFace tokenizer.json, or
// a GGUF model file (its embedded tokenizer). Only local files are read.
func LoadTokenizer(spec string) (Tokenizer, error) {
	switch spec {
	case "", "default":
		return DefaultTokenizer(), nil
	case "cl100k_base", "o200k_base":
		return EmbeddedTokenizer(spec)
	}
	st, err := os.Stat(spec)
	if err != nil {
		if os.IsNotExist(err) && !strings.ContainsAny(spec, `/\.`) {
			return nil, fmt.Errorf("%q is neither an embedded tokenizer (cl100k_base, o200k_base) nor a file", spec)
		}
		return nil, fmt.Errorf("reading tokenizer: %w", err)
	}
	if st.IsDir() {
		// A model directory: use the tokenizer.json inside it.
		spec = spec + string(os.PathSeparator) + "tokenizer.json"
	}
	if isGGUF(spec) {
		return LoadGGUFTokenizer(spec)
	}
	return LoadHFTokenizer(spec)
}

package sim

import (
	"strings"
	"sync"

	"github.com/ttft-dev/ttft/internal/workload"
)

// outputWords are the pieces the simulator streams, one per output token.
// Each is a leading-space common English word, which BPE tokenizers
// (cl100k, o200k, Llama-3) encode as exactly one token and which never merge
// with a neighbour, so the received text re-tokenises to the same count.
var outputWords = [...]string{
	" the", " of", " and", " to", " in", " is", " that", " for", " it", " as",
	" with", " was", " on", " be", " at", " by", " this", " had", " not", " are",
	" but", " from", " or", " have", " an", " they", " which", " one", " you", " were",
	" all", " we", " can", " her", " has", " there", " been", " if", " more", " when",
	" will", " would", " who", " so", " no", " time", " out", " up", " about", " than",
}

// OutputWord returns the text of output token i of sequence id: deterministic,
// varied, and cheap (no allocation). Every driver streams these words, so
// that a reply is the same text whoever serves it, and the prefix cache can
// hash it as the next turn will send it back (see OutputTokens).
func OutputWord(id uint64, i int) string {
	return outputWords[wordIndex(id, i)]
}

// wordIndex is the index in outputWords of output token i of sequence id.
func wordIndex(id uint64, i int) int {
	return int(mix64(id*0x9e3779b97f4a7c15+uint64(i)) % uint64(len(outputWords)))
}

// OutputTokens holds a tokenizer's IDs for each output word: the prefix cache
// hashes a reply as the next turn's prompt will carry it, re-tokenised.
// Each output word is a pre-tokenisation piece of its own (a leading space
// and letters), so the reply's tokenisation is the concatenation of its
// words' (TestOutputWordsRoundTrip checks this for the default tokenizer).
// It is read-only once made, so one value may serve many sequences and
// goroutines.
type OutputTokens struct {
	ids [len(outputWords)][]int
}

// NewOutputTokens tokenises the output words with tok; nil means
// workload.DefaultTokenizer, whose OutputTokens are made once and shared.
// A driver makes one per tokenizer, not one per request (Seq.ChainOutput).
func NewOutputTokens(tok workload.Tokenizer) *OutputTokens {
	if tok == nil {
		return defaultOutputTokens()
	}
	return newOutputTokens(tok)
}

func newOutputTokens(tok workload.Tokenizer) *OutputTokens {
	w := &OutputTokens{}
	for i, s := range outputWords {
		w.ids[i] = tok.Encode(s)
	}
	return w
}

// defaultOutputTokens is OutputTokens for workload.DefaultTokenizer, which
// session sources use unless told otherwise.
var defaultOutputTokens = sync.OnceValue(func() *OutputTokens { return newOutputTokens(workload.DefaultTokenizer()) })

// OutputText is the whole output of a sequence of n tokens.
func OutputText(id uint64, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(OutputWord(id, i))
	}
	return b.String()
}

// promptLength counts a request's prompt tokens: the source's own count,
// else its token IDs, else the tokenizer over the text.
func promptLength(r *workload.Request, tok workload.Tokenizer) int {
	switch {
	case r.PromptTokens > 0:
		return r.PromptTokens
	case len(r.Tokens) > 0:
		return len(r.Tokens)
	case tok != nil:
		return tok.Count(requestText(r))
	}
	return 0
}

// requestText is the text the server would tokenise: the completions prompt
// or the chat messages' contents joined.
func requestText(r *workload.Request) string {
	if r.Prompt != "" || len(r.Messages) == 0 {
		return r.Prompt
	}
	parts := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		parts[i] = m.Content
	}
	return strings.Join(parts, "\n")
}

package workload

import (
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
)

// words.txt holds ~4,000 common English words that are one cl100k_base token
// each when preceded by a space. Prompts are built from them because, under
// byte-level BPE tokenizers whose pre-tokenizer splits before " word", the
// token count of "w0 w1 ... wn" is then exactly n+1: lengths are exact by
// construction and only need one confirming encode.
//
//go:embed words.txt
var wordsTxt string

// wordList is the subset of the embedded words that are a single token under
// one tokenizer: first (no leading space) for the start of a text, spaced
// (" word") for the rest.
type wordList struct {
	first  []string
	spaced []string
}

// wordLister is implemented by tokenizers that cache their word list.
type wordLister interface {
	wordList() (*wordList, error)
}

func buildWordList(tok Tokenizer) (*wordList, error) {
	wl := &wordList{}
	for _, w := range strings.Fields(wordsTxt) {
		if len(tok.Encode(" "+w)) == 1 {
			wl.spaced = append(wl.spaced, " "+w)
		}
		if len(tok.Encode(w)) == 1 {
			wl.first = append(wl.first, w)
		}
	}
	if len(wl.spaced) < 64 && len(wl.first) > 0 {
		// llama.cpp's SentencePiece prepends a space to the whole text, so
		// " word" alone is "▁▁word", two tokens, although each " word"
		// after the first adds exactly one: judge the words by that
		// increment instead.
		anchor := wl.first[0]
		base := len(tok.Encode(anchor))
		wl.spaced = wl.spaced[:0]
		for _, w := range strings.Fields(wordsTxt) {
			if len(tok.Encode(anchor+" "+w)) == base+1 {
				wl.spaced = append(wl.spaced, " "+w)
			}
		}
	}
	if len(wl.spaced) < 64 {
		return nil, fmt.Errorf("tokenizer %s: only %d of the built-in words are single tokens; cannot build exact-length prompts", tok.Name(), len(wl.spaced))
	}
	if len(wl.first) == 0 {
		// Tokenizers that mark word starts (SentencePiece's ▁) may encode a
		// bare first word exactly like a spaced one.
		for _, w := range wl.spaced {
			wl.first = append(wl.first, strings.TrimPrefix(w, " "))
		}
	}
	return wl, nil
}

// listOnce caches a tokenizer's word list inside the tokenizer value.
type listOnce struct {
	once sync.Once
	wl   *wordList
	err  error
}

func (l *listOnce) get(tok Tokenizer) (*wordList, error) {
	l.once.Do(func() { l.wl, l.err = buildWordList(tok) })
	return l.wl, l.err
}

// PromptGen builds texts of an exact token count under one tokenizer. It is
// safe for concurrent use; randomness comes from the caller's generator so
// that runs are reproducible per seed.
type PromptGen struct {
	tok Tokenizer
	wl  *wordList
}

// NewPromptGen prepares exact-length generation for tok.
func NewPromptGen(tok Tokenizer) (*PromptGen, error) {
	if tok == nil {
		return nil, fmt.Errorf("prompt generator: no tokenizer")
	}
	var (
		wl  *wordList
		err error
	)
	if l, ok := tok.(wordLister); ok {
		wl, err = l.wordList()
	} else {
		wl, err = buildWordList(tok)
	}
	if err != nil {
		return nil, err
	}
	return &PromptGen{tok: tok, wl: wl}, nil
}

// Tokenizer returns the tokenizer the generator counts with.
func (g *PromptGen) Tokenizer() Tokenizer { return g.tok }

// Text returns a text of exactly n tokens and its token IDs.
func (g *PromptGen) Text(rng *rand.Rand, n int) (string, []int, error) {
	return g.Extend(rng, "", 0, n)
}

// Extend appends words to prefix (whose token count is prefixTokens, or 0 for
// an empty prefix) so that the result has exactly prefixTokens+n tokens, and
// returns it with its token IDs. The count is confirmed by re-encoding; when a
// tokenizer merges across a word boundary the tail is redrawn (bounded tries).
func (g *PromptGen) Extend(rng *rand.Rand, prefix string, prefixTokens, n int) (string, []int, error) {
	if n < 0 {
		return "", nil, fmt.Errorf("prompt length %d is negative", n)
	}
	want := prefixTokens + n
	if n == 0 {
		ids := g.tok.Encode(prefix)
		if len(ids) != want {
			return "", nil, fmt.Errorf("prefix is %d tokens under %s, not %d", len(ids), g.tok.Name(), want)
		}
		return prefix, ids, nil
	}
	var b strings.Builder
	b.Grow(len(prefix) + n*8)
	words := make([]string, 0, n+4)
	for attempt := 0; attempt < 8; attempt++ {
		words = words[:0]
		if prefix == "" {
			words = append(words, g.wl.first[rng.IntN(len(g.wl.first))])
		}
		for len(words) < n {
			words = append(words, g.wl.spaced[rng.IntN(len(g.wl.spaced))])
		}
		// Adjust word by word: each word is worth one token unless the
		// tokenizer merges it with a neighbour.
		for fix := 0; fix < 16; fix++ {
			b.Reset()
			b.WriteString(prefix)
			for _, w := range words {
				b.WriteString(w)
			}
			text := b.String()
			ids := g.tok.Encode(text)
			switch {
			case len(ids) == want:
				return text, ids, nil
			case len(ids) < want:
				for i := len(ids); i < want; i++ {
					words = append(words, g.wl.spaced[rng.IntN(len(g.wl.spaced))])
				}
			default:
				drop := len(ids) - want
				if drop >= len(words) {
					drop = len(words) - 1
				}
				if drop <= 0 {
					fix = 16 // cannot shrink: redraw
					continue
				}
				words = words[:len(words)-drop]
			}
		}
	}
	return "", nil, fmt.Errorf("could not build a text of exactly %d tokens under tokenizer %s", want, g.tok.Name())
}

// spacedWords draws n single-token words, each with its leading space, so
// that blocks of them concatenate with additive token counts.
func (g *PromptGen) spacedWords(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = g.wl.spaced[rng.IntN(len(g.wl.spaced))]
	}
	return out
}

// localLength is the tokenizer's length for n of the server's tokens when
// one local token makes scale server tokens (scale 0 or 1: n itself). A
// positive n stays at least 1.
func localLength(n int, scale float64) int {
	if scale <= 0 || scale == 1 || n <= 0 {
		return n
	}
	return max(1, int(math.Round(float64(n)/scale)))
}

// recordedLength is the prompt length a request records: the tokenizer's
// count ids when lengths are local, else the server-token length asked for,
// which the text built with local tokens is expected to reach. When the
// tokenizer merged across a boundary (ids != local) the difference is
// scaled, so the record stays in server tokens.
func recordedLength(ids, asked, local int, scale float64) int {
	if scale <= 0 || scale == 1 {
		return ids
	}
	return asked + int(math.Round(float64(ids-local)*scale))
}

// SpacedWords returns every word the generator draws after the first, each
// with its leading space, shuffled by seed. Prompts draw from these words
// uniformly, so a text of all of them has the mean token cost per word of
// every prompt: calibrating against a server's tokenizer with it has no
// sampling error from the choice of words.
func (g *PromptGen) SpacedWords(seed uint64) []string {
	out := append([]string(nil), g.wl.spaced...)
	rng := rand.New(rand.NewPCG(seed, 0x776f726473)) // "words"
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

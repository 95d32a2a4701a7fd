package gguf

import (
	"bufio"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Token types as llama.cpp numbers them (tokenizer.ggml.token_type, INT32).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Fixed ids of the control tokens.
const (
	UnkID = 0
	BOSID = 1
	EOSID = 2
)

// spaceMark is SentencePiece's visible space (U+2581).
const spaceMark = "\u2581"

//go:embed words.txt
var wordsTxt string

// MinVocab is the smallest vocabulary Synth accepts: the control tokens, the
// 256 byte-fallback tokens, the space mark, the printable ASCII characters
// and a handful of words.
const MinVocab = 3 + 256 + 1 + 94 + 32

// Vocab is a SentencePiece-style ("llama") vocabulary.
type Vocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
	index  map[string]int
	// output marks the word pieces the model may generate (nil: any word
	// piece; see Sampleable).
	output []bool
	// byteIDs maps a byte to its fallback token for vocabularies read from
	// a file (nil: NewVocab's layout, <0xXX> at id 3+XX); -1 when missing.
	byteIDs *[256]int
	// noSpacePrefix is tokenizer.ggml.add_space_prefix = false.
	noSpacePrefix bool
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.Tokens) }

// ID returns a piece's id.
func (v *Vocab) ID(piece string) (int, bool) {
	id, ok := v.index[piece]
	return id, ok
}

// minOutputWords is how many generator words a vocabulary must hold for
// output to be restricted to them; smaller vocabularies fall back to any
// word piece.
const minOutputWords = 64

// Sampleable reports whether the synthesized output layer lets a token be
// generated: the "▁word" pieces of ttft's prompt-generator words (each one
// cl100k_base token after a space, so offline output counts match usage), or,
// in vocabularies too small to hold enough of them, any "▁" piece with a
// letter or digit. Everything else (control, byte, punctuation, word
// prefixes) gets a large negative logit: generations never stop early and
// always decode to whole words.
func (v *Vocab) Sampleable(id int) bool {
	if id < 0 || id >= len(v.Tokens) || v.Types[id] != TokenNormal {
		return false
	}
	if v.output != nil {
		return v.output[id]
	}
	p := v.Tokens[id]
	if !strings.HasPrefix(p, spaceMark) {
		return false
	}
	return strings.IndexFunc(p, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}

// NewVocab builds a vocabulary of exactly size tokens: <unk>, <s>, </s>, the
// byte tokens <0x00>..<0xFF>, "▁", printable ASCII, then the embedded English
// word pieces (each preceded by all its "▁"-prefixes so that bigram merging
// reaches it), then "▁0", "▁1", ... to fill. Scores decrease with rank, as in
// a trained SentencePiece model.
func NewVocab(size int) (*Vocab, error) {
	if size < MinVocab {
		return nil, fmt.Errorf("vocabulary size %d is below the minimum %d (control + byte + character tokens + a few words)", size, MinVocab)
	}
	v := &Vocab{index: make(map[string]int, size)}
	add := func(piece string, score float32, typ int32) bool {
		if len(v.Tokens) >= size {
			return false
		}
		if _, dup := v.index[piece]; dup {
			return true
		}
		v.index[piece] = len(v.Tokens)
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
		return true
	}
	add("<unk>", 0, TokenUnknown)
	add("<s>", 0, TokenControl)
	add("</s>", 0, TokenControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, TokenByte)
	}
	rank := 0
	piece := func(p string) bool {
		rank++
		return add(p, -float32(rank), TokenNormal)
	}
	piece(spaceMark)
	for c := byte(0x21); c < 0x7f; c++ {
		piece(string(c))
	}
	withPrefixes := func(w string) bool {
		rs := []rune(w)
		for i := 1; i <= len(rs); i++ {
			if !piece(spaceMark + string(rs[:i])) {
				return false
			}
		}
		return true
	}
	var outputWords []string
	inOutput := false
	sc := bufio.NewScanner(strings.NewReader(wordsTxt))
fill:
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "#!output" {
			inOutput = true
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, w := range strings.Fields(line) {
			if !withPrefixes(w) {
				break fill
			}
			if inOutput {
				outputWords = append(outputWords, w)
			}
		}
	}
	if len(outputWords) >= minOutputWords {
		v.output = make([]bool, size)
		for _, w := range outputWords {
			v.output[v.index[spaceMark+w]] = true
		}
	}
	// Numbers fill the rest: every prefix of "▁123" is a smaller number,
	// already present, so each stays reachable by merging.
	for n := 0; len(v.Tokens) < size; n++ {
		piece(spaceMark + strconv.Itoa(n))
	}
	return v, nil
}

// Words returns the embedded word list (in vocabulary order) that a vocabulary
// of the given size holds as single tokens.
func (v *Vocab) Words() []string {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(wordsTxt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, w := range strings.Fields(line) {
			if _, ok := v.index[spaceMark+w]; ok && !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

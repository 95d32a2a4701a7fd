package workload

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// DefaultTokenizerName is the encoding DefaultTokenizer uses. cl100k_base is
// close to the Llama-3 tokenizer (whose first 100k tokens come from it) and
// about half the size of o200k_base to load.
const DefaultTokenizerName = "cl100k_base"

// Patterns and special tokens of the embedded encodings, copied from
// tiktoken-go so that we can build the encoder ourselves: its GetEncoding
// goes through a package-global loader that downloads by default, and we
// must never touch the network.
var tiktokenSpecs = map[string]struct {
	file     string
	pattern  string
	specials map[string]int
}{
	"cl100k_base": {
		file:    "cl100k_base.tiktoken",
		pattern: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		specials: map[string]int{
			"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
			"<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
		},
	},
	"o200k_base": {
		file: "o200k_base.tiktoken",
		pattern: `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
			`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
			`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
		specials: map[string]int{"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
	},
}

// tiktokenTokenizer wraps an embedded tiktoken encoding. Special tokens in
// the text are encoded as ordinary text, as a server given a user message
// would do.
type tiktokenTokenizer struct {
	name  string
	fast  *fastEncoder
	words listOnce
}

func (t *tiktokenTokenizer) wordList() (*wordList, error) { return t.words.get(t) }

func (t *tiktokenTokenizer) Name() string             { return t.name }
func (t *tiktokenTokenizer) Encode(text string) []int { return t.fast.encode(text) }
func (t *tiktokenTokenizer) Decode(ids []int) string  { return t.fast.decode(ids) }
func (t *tiktokenTokenizer) Count(text string) int    { return t.fast.count(text) }

// fastEncoder is tiktoken's algorithm with a hand-coded splitter.
type fastEncoder struct {
	split    func(string, func(a, b int))
	ranks    map[string]int
	dec      [][]byte
	specials map[int]string
	// counters are count's reusable state.
	counters sync.Pool
}

// parseTiktokenRanks reads a .tiktoken file ("base64 rank" per line) into a
// fast encoder with one allocation for all token bytes: it runs at every
// start of the binary, so it avoids the per-line garbage of the generic
// loader.
func parseTiktokenRanks(data []byte, specials map[string]int, split func(string, func(a, b int))) (*fastEncoder, error) {
	lines := bytes.Count(data, []byte("\n")) + 1
	all := make([]byte, 0, len(data)*3/4)
	type span struct{ a, b, id int }
	spans := make([]span, 0, lines)
	maxID := 0
	for line := 1; len(data) > 0; line++ {
		l := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(l) == 0 {
			continue
		}
		sp := bytes.IndexByte(l, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("line %d: want \"base64 rank\"", line)
		}
		id, err := strconv.Atoi(string(l[sp+1:]))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("line %d: bad rank %q", line, l[sp+1:])
		}
		a := len(all)
		all = all[:a+base64.StdEncoding.DecodedLen(sp)]
		n, err := base64.StdEncoding.Decode(all[a:], l[:sp])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		all = all[:a+n]
		spans = append(spans, span{a, a + n, id})
		maxID = max(maxID, id)
	}
	str := string(all) // one copy; keys are substrings of it
	f := &fastEncoder{split: split, ranks: make(map[string]int, len(spans)), dec: make([][]byte, maxID+1), specials: map[int]string{}}
	for _, s := range spans {
		f.ranks[str[s.a:s.b]] = s.id
		f.dec[s.id] = all[s.a:s.b:s.b]
	}
	for s, id := range specials {
		f.specials[id] = s
	}
	return f, nil
}

func newFastEncoder(ranks map[string]int, specials map[string]int, split func(string, func(a, b int))) *fastEncoder {
	n := 0
	for _, id := range ranks {
		n = max(n, id+1)
	}
	f := &fastEncoder{split: split, ranks: ranks, dec: make([][]byte, n), specials: map[int]string{}}
	for s, id := range ranks {
		f.dec[id] = []byte(s)
	}
	for s, id := range specials {
		f.specials[id] = s
	}
	return f
}

func (f *fastEncoder) encode(text string) []int {
	out := make([]int, 0, len(text)/4+1)
	f.split(text, func(a, b int) { out = bpeRanks(text[a:b], f.ranks, out) })
	return out
}

func (f *fastEncoder) decode(ids []int) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id >= 0 && id < len(f.dec):
			b = append(b, f.dec[id]...)
		default:
			b = append(b, f.specials[id]...)
		}
	}
	return string(b)
}

// The embedded encodings are loaded once per process: parsing the BPE ranks
// takes a few hundred milliseconds and the result is immutable.
var tiktokenOnce = map[string]func() (*tiktokenTokenizer, error){
	"cl100k_base": sync.OnceValues(func() (*tiktokenTokenizer, error) { return loadTiktoken("cl100k_base") }),
	"o200k_base":  sync.OnceValues(func() (*tiktokenTokenizer, error) { return loadTiktoken("o200k_base") }),
}

func loadTiktoken(name string) (*tiktokenTokenizer, error) {
	spec := tiktokenSpecs[name]
	data, err := assets.Assets.ReadFile(spec.file)
	if err != nil {
		return nil, fmt.Errorf("loading embedded %s ranks: %w", name, err)
	}
	split, ok := fastSplitters[spec.pattern]
	if !ok {
		// o200k_base's case-aware pattern is left to the regexp engine.
		re, err := regexp2.Compile(spec.pattern, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("compiling %s pattern: %w", name, err)
		}
		split = regexpSplitter(re)
	}
	f, err := parseTiktokenRanks(data, spec.specials, split)
	if err != nil {
		return nil, fmt.Errorf("parsing embedded %s ranks: %w", name, err)
	}
	return &tiktokenTokenizer{name: name, fast: f}, nil
}

// EmbeddedTokenizer returns one of the tokenizers compiled into the binary
// ("cl100k_base" or "o200k_base"). It never touches the network; the first
// call per encoding parses the embedded ranks, later calls are free.
func EmbeddedTokenizer(name string) (Tokenizer, error) {
	load, ok := tiktokenOnce[name]
	if !ok {
		return nil, fmt.Errorf("unknown embedded tokenizer %q (have cl100k_base, o200k_base)", name)
	}
	t, err := load()
	if err != nil {
		return nil, err
	}
	return t, nil
}

// DefaultTokenizer is the embedded cl100k_base tokenizer. It is safe for
// concurrent use and cached for the life of the process.
func DefaultTokenizer() Tokenizer {
	t, err := EmbeddedTokenizer(DefaultTokenizerName)
	if err != nil {
		// The ranks are compiled into the binary; failing to parse them is a
		// build defect, not a runtime condition a caller could handle.
		panic(err)
	}
	return t
}

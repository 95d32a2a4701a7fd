package workload

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// gpt2Pattern is the split regex of the ByteLevel pre-tokenizer with
// use_regex=true (GPT-2, RoBERTa, many byte-level BPE models).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// hfTokenizer is a HuggingFace tokenizer.json with a BPE model: byte-level
// models (GPT-2, Llama-3, Qwen, Mistral-Nemo...) and SentencePiece-style ones
// with Metaspace/▁ and byte fallback (Llama-2, Mistral-7B). Added tokens in
// the text are matched as single tokens, as HF tokenizers do by default.
type hfTokenizer struct {
	name       string
	normalize  []func(string) string
	pretok     []func([]string) []string
	byteLevel  bool // pieces are mapped byte -> unicode before BPE
	vocab      map[string]int
	inv        []string
	ranks      map[[2]string]int
	byteFall   bool
	unk        int // -1 when none
	ignoreMrg  bool
	added      []hfAdded // longest first
	addedFirst string    // first bytes of the added tokens, for a quick skip
	decoders   []string  // decoder step types, in order
	stripStart int       // Strip decoder: characters removed at the start

	cacheMu sync.Mutex
	cache   map[string][]int
	words   listOnce
}

type hfAdded struct {
	content string
	id      int
}

func (t *hfTokenizer) Name() string                      { return t.name }
func (t *hfTokenizer) wordList() (*wordList, error)      { return t.words.get(t) }
func (t *hfTokenizer) Count(text string) int             { return len(t.Encode(text)) }
func (t *hfTokenizer) String() string                    { return "hf:" + t.name }
func (t *hfTokenizer) tokenString(id int) (string, bool) { return t.token(id) }

func (t *hfTokenizer) token(id int) (string, bool) {
	if id < 0 || id >= len(t.inv) || t.inv[id] == "" {
		return "", false
	}
	return t.inv[id], true
}

// tokenizer.json, only what a BPE model needs.
type hfFile struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        struct {
		Type                    string          `json:"type"`
		Vocab                   map[string]int  `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		UnkToken                *string         `json:"unk_token"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	} `json:"model"`
}

type hfComponent struct {
	Type          string            `json:"type"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Pattern       struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	} `json:"pattern"`
	Content          json.RawMessage `json:"content"`
	Prepend          string          `json:"prepend"`
	Behavior         string          `json:"behavior"`
	Invert           bool            `json:"invert"`
	AddPrefixSpace   bool            `json:"add_prefix_space"`
	UseRegex         *bool           `json:"use_regex"`
	IndividualDigits bool            `json:"individual_digits"`
	Replacement      string          `json:"replacement"`
	PrependScheme    string          `json:"prepend_scheme"`
	Split            *bool           `json:"split"`
	Start            int             `json:"start"`
}

// LoadHFTokenizer reads a HuggingFace tokenizer.json with a BPE model.
// Unsupported components are reported by name rather than approximated.
func LoadHFTokenizer(path string) (Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading tokenizer: %w", err)
	}
	t, err := parseHFTokenizer(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	t.name = path
	return t, nil
}

func parseHFTokenizer(data []byte) (*hfTokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" && !(f.Model.Type == "" && f.Model.Vocab != nil && f.Model.Merges != nil) {
		return nil, fmt.Errorf("model type %q is not supported (only BPE)", f.Model.Type)
	}
	if len(f.Model.Vocab) == 0 {
		return nil, fmt.Errorf("model.vocab is empty")
	}
	if p := f.Model.ContinuingSubwordPrefix; p != nil && *p != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix is not supported")
	}
	if p := f.Model.EndOfWordSuffix; p != nil && *p != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix is not supported")
	}
	t := &hfTokenizer{
		vocab:     f.Model.Vocab,
		byteFall:  f.Model.ByteFallback,
		ignoreMrg: f.Model.IgnoreMerges,
		unk:       -1,
		cache:     map[string][]int{},
	}
	maxID := 0
	for _, id := range t.vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab has negative id %d", id)
		}
		maxID = max(maxID, id)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 || a.Content == "" {
			return nil, fmt.Errorf("added_tokens: bad entry id %d %q", a.ID, a.Content)
		}
		maxID = max(maxID, a.ID)
		t.added = append(t.added, hfAdded{a.Content, a.ID})
	}
	if maxID > 10_000_000 {
		return nil, fmt.Errorf("token id %d is implausibly large", maxID)
	}
	t.inv = make([]string, maxID+1)
	for s, id := range t.vocab {
		t.inv[id] = s
	}
	for _, a := range t.added {
		t.inv[a.id] = a.content
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	for _, a := range t.added {
		if c := a.content[:1]; !strings.Contains(t.addedFirst, c) {
			t.addedFirst += c
		}
	}
	if u := f.Model.UnkToken; u != nil {
		if id, ok := t.vocab[*u]; ok {
			t.unk = id
		}
	}
	if err := t.parseMerges(f.Model.Merges); err != nil {
		return nil, err
	}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := t.parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	return t, nil
}

func (t *hfTokenizer) parseMerges(raw json.RawMessage) error {
	t.ranks = map[[2]string]int{}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	// Two layouts: ["a b", ...] (tokenizers < 0.20) and [["a","b"], ...].
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		for i, m := range asStrings {
			a, b, ok := strings.Cut(m, " ")
			if !ok {
				return fmt.Errorf("model.merges[%d] %q is not two tokens", i, m)
			}
			if _, dup := t.ranks[[2]string{a, b}]; !dup {
				t.ranks[[2]string{a, b}] = i
			}
		}
		return nil
	}
	var asPairs [][]string
	if err := json.Unmarshal(raw, &asPairs); err != nil {
		return fmt.Errorf("model.merges: neither strings nor pairs: %w", err)
	}
	for i, m := range asPairs {
		if len(m) != 2 {
			return fmt.Errorf("model.merges[%d] has %d parts, want 2", i, len(m))
		}
		if _, dup := t.ranks[[2]string{m[0], m[1]}]; !dup {
			t.ranks[[2]string{m[0], m[1]}] = i
		}
	}
	return nil
}

func parseComponent(raw json.RawMessage) (*hfComponent, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *hfComponent) patternRegex() (*regexp2.Regexp, error) {
	switch {
	case c.Pattern.Regex != nil:
		return regexp2.Compile(*c.Pattern.Regex, regexp2.None)
	case c.Pattern.String != nil:
		return regexp2.Compile(regexp2.Escape(*c.Pattern.String), regexp2.None)
	}
	return nil, fmt.Errorf("%s: no pattern", c.Type)
}

func (c *hfComponent) contentString() string {
	var s string
	_ = json.Unmarshal(c.Content, &s)
	return s
}

func (t *hfTokenizer) parseNormalizer(raw json.RawMessage) error {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.parseNormalizer(n); err != nil {
				return err
			}
		}
	case "NFC":
		t.normalize = append(t.normalize, norm.NFC.String)
	case "NFKC":
		t.normalize = append(t.normalize, norm.NFKC.String)
	case "NFD":
		t.normalize = append(t.normalize, norm.NFD.String)
	case "NFKD":
		t.normalize = append(t.normalize, norm.NFKD.String)
	case "Lowercase":
		t.normalize = append(t.normalize, strings.ToLower)
	case "Prepend":
		p := c.Prepend
		t.normalize = append(t.normalize, func(s string) string {
			if s == "" {
				return s
			}
			return p + s
		})
	case "Replace":
		re, err := c.patternRegex()
		if err != nil {
			return err
		}
		with := c.contentString()
		t.normalize = append(t.normalize, func(s string) string {
			out, err := re.Replace(s, with, -1, -1)
			if err != nil {
				return s
			}
			return out
		})
	default:
		return fmt.Errorf("type %q is not supported", c.Type)
	}
	return nil
}

func (t *hfTokenizer) parsePreTokenizer(raw json.RawMessage) error {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.Pretokenizers {
			if err := t.parsePreTokenizer(p); err != nil {
				return err
			}
		}
	case "ByteLevel":
		t.byteLevel = true
		if c.AddPrefixSpace {
			t.pretok = append(t.pretok, func(ps []string) []string {
				if len(ps) > 0 && !strings.HasPrefix(ps[0], " ") {
					ps[0] = " " + ps[0]
				}
				return ps
			})
		}
		if c.UseRegex == nil || *c.UseRegex {
			t.pretok = append(t.pretok, fastPretok(splitGPT2))
		}
	case "Split":
		re, err := c.patternRegex()
		if err != nil {
			return err
		}
		switch c.Behavior {
		case "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous":
		default:
			return fmt.Errorf("Split behavior %q is not supported", c.Behavior)
		}
		if c.Pattern.Regex != nil && c.Behavior == "Isolated" && !c.Invert {
			if split, ok := fastSplitters[*c.Pattern.Regex]; ok {
				// Llama-3 (cl100k's pattern), Qwen2, GPT-2: split by hand, fast.
				t.pretok = append(t.pretok, fastPretok(split))
				break
			}
		}
		t.pretok = append(t.pretok, splitter(re, c.Behavior, c.Invert))
	case "Digits":
		pat := `\p{N}+`
		if c.IndividualDigits {
			pat = `\p{N}`
		}
		t.pretok = append(t.pretok, splitter(regexp2.MustCompile(pat, regexp2.None), "Isolated", false))
	case "Whitespace":
		t.pretok = append(t.pretok, splitter(regexp2.MustCompile(`\w+|[^\w\s]+`, regexp2.None), "Isolated", true), dropSpaces)
	case "WhitespaceSplit":
		t.pretok = append(t.pretok, splitter(regexp2.MustCompile(`\s+`, regexp2.None), "Removed", false))
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "▁"
		}
		scheme := c.PrependScheme
		if scheme == "" {
			scheme = "always"
		}
		split := c.Split == nil || *c.Split
		t.pretok = append(t.pretok, func(ps []string) []string {
			out := ps[:0:0]
			for i, p := range ps {
				p = strings.ReplaceAll(p, " ", rep)
				if (scheme == "always" || (scheme == "first" && i == 0)) && !strings.HasPrefix(p, rep) {
					p = rep + p
				}
				if !split {
					out = append(out, p)
					continue
				}
				// Split before each replacement character (MergedWithNext).
				start := 0
				for j := len(rep); j <= len(p)-len(rep); {
					k := strings.Index(p[j:], rep)
					if k < 0 {
						break
					}
					j += k
					if j > start {
						out = append(out, p[start:j])
						start = j
					}
					j += len(rep)
				}
				out = append(out, p[start:])
			}
			return out
		})
	default:
		return fmt.Errorf("type %q is not supported", c.Type)
	}
	return nil
}

func fastPretok(split func(string, func(a, b int))) func([]string) []string {
	return func(ps []string) []string {
		var out []string
		for _, p := range ps {
			split(p, func(a, b int) { out = append(out, p[a:b]) })
		}
		return out
	}
}

func dropSpaces(ps []string) []string {
	out := ps[:0]
	for _, p := range ps {
		if strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
	}
	return out
}

// splitter implements the Split pre-tokenizer's behaviours on every piece.
func splitter(re *regexp2.Regexp, behavior string, invert bool) func([]string) []string {
	return func(ps []string) []string {
		var out []string
		for _, p := range ps {
			out = append(out, splitPiece(re, p, behavior, invert)...)
		}
		return out
	}
}

func splitPiece(re *regexp2.Regexp, s, behavior string, invert bool) []string {
	type span struct {
		a, b  int
		match bool
	}
	var spans []span
	runes := []rune(s)
	// regexp2 reports rune offsets; convert to byte offsets.
	byteAt := make([]int, len(runes)+1)
	for i, off := 0, 0; i < len(runes); i++ {
		byteAt[i] = off
		off += utf8.RuneLen(runes[i])
		byteAt[i+1] = off
	}
	prev := 0
	m, _ := re.FindStringMatch(s)
	for m != nil {
		a, b := byteAt[m.Index], byteAt[m.Index+m.Length]
		if b > a {
			if a > prev {
				spans = append(spans, span{prev, a, false})
			}
			spans = append(spans, span{a, b, true})
			prev = b
		}
		m, _ = re.FindNextMatch(m)
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	if invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	var out []string
	switch behavior {
	case "Isolated":
		for _, sp := range spans {
			out = append(out, s[sp.a:sp.b])
		}
	case "Removed":
		for _, sp := range spans {
			if !sp.match {
				out = append(out, s[sp.a:sp.b])
			}
		}
	case "MergedWithPrevious":
		for _, sp := range spans {
			if sp.match && len(out) > 0 {
				out[len(out)-1] += s[sp.a:sp.b]
			} else {
				out = append(out, s[sp.a:sp.b])
			}
		}
	case "MergedWithNext":
		pending := ""
		for _, sp := range spans {
			if sp.match {
				pending += s[sp.a:sp.b]
				continue
			}
			out = append(out, pending+s[sp.a:sp.b])
			pending = ""
		}
		if pending != "" {
			out = append(out, pending)
		}
	case "Contiguous":
		for i, sp := range spans {
			if i > 0 && sp.match && spans[i-1].match {
				out[len(out)-1] += s[sp.a:sp.b]
			} else {
				out = append(out, s[sp.a:sp.b])
			}
		}
	}
	return out
}

func (t *hfTokenizer) parseDecoder(raw json.RawMessage) error {
	c, err := parseComponent(raw)
	if err != nil || c == nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for _, d := range c.Decoders {
			if err := t.parseDecoder(d); err != nil {
				return err
			}
		}
	case "ByteLevel", "ByteFallback", "Fuse":
		t.decoders = append(t.decoders, c.Type)
	case "Metaspace":
		// The Metaspace decoder drops the space it prepended.
		t.decoders = append(t.decoders, "Metaspace")
		t.stripStart = max(t.stripStart, 1)
	case "Replace":
		if c.Pattern.String == nil || *c.Pattern.String != "▁" || c.contentString() != " " {
			return fmt.Errorf("only Replace ▁ -> space is supported")
		}
		t.decoders = append(t.decoders, "Metaspace")
	case "Strip":
		t.stripStart = c.Start
	default:
		return fmt.Errorf("type %q is not supported", c.Type)
	}
	return nil
}

// byte-level BPE maps every byte to a printable rune (GPT-2's bytes_to_unicode).
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

func (t *hfTokenizer) Encode(text string) []int {
	var ids []int
	// Added tokens are matched in the raw text first and never split; the
	// normalizer then applies to each segment between them, as in HF.
	if t.addedFirst == "" || !strings.ContainsAny(text, t.addedFirst) {
		ids = t.encodeSegment(text, ids)
		if ids == nil {
			ids = []int{}
		}
		return ids
	}
	for text != "" {
		pos, which := -1, -1
		for i, a := range t.added {
			if k := strings.Index(text, a.content); k >= 0 && (pos < 0 || k < pos) {
				pos, which = k, i
			}
		}
		seg := text
		if pos >= 0 {
			seg = text[:pos]
		}
		ids = t.encodeSegment(seg, ids)
		if pos < 0 {
			break
		}
		ids = append(ids, t.added[which].id)
		text = text[pos+len(t.added[which].content):]
	}
	if ids == nil {
		ids = []int{}
	}
	return ids
}

func (t *hfTokenizer) encodeSegment(s string, ids []int) []int {
	for _, n := range t.normalize {
		s = n(s)
	}
	if s == "" {
		return ids
	}
	pieces := []string{s}
	for _, p := range t.pretok {
		pieces = p(pieces)
	}
	var b strings.Builder
	for _, p := range pieces {
		if p == "" {
			continue
		}
		if t.byteLevel {
			b.Reset()
			for i := 0; i < len(p); i++ {
				b.WriteRune(byteToRune[p[i]])
			}
			p = b.String()
		}
		ids = append(ids, t.bpeWord(p)...)
	}
	return ids
}

func (t *hfTokenizer) bpeWord(w string) []int {
	if id, ok := t.vocab[w]; ok && (t.ignoreMrg || utf8.RuneCountInString(w) == 1) {
		return []int{id}
	}
	t.cacheMu.Lock()
	c, ok := t.cache[w]
	t.cacheMu.Unlock()
	if ok {
		return c
	}
	ids := t.merge(w)
	t.cacheMu.Lock()
	if len(t.cache) > 200_000 {
		clear(t.cache) // bound memory on adversarial inputs
	}
	t.cache[w] = ids
	t.cacheMu.Unlock()
	return ids
}

// merge runs BPE on one word with a heap of candidate pairs: O(n log n),
// so that a pre-tokenizer-less SentencePiece model (one "word" per text)
// stays fast on long prompts.
func (t *hfTokenizer) merge(w string) []int {
	type sym struct {
		s          string
		prev, next int
		dead       bool
	}
	syms := make([]sym, 0, len(w))
	for _, r := range w {
		syms = append(syms, sym{s: string(r), prev: len(syms) - 1, next: len(syms) + 1})
	}
	syms[len(syms)-1].next = -1
	h := &pairHeap{}
	push := func(i int) {
		j := syms[i].next
		if j < 0 {
			return
		}
		if r, ok := t.ranks[[2]string{syms[i].s, syms[j].s}]; ok {
			heap.Push(h, pairItem{rank: r, left: i, ls: syms[i].s, rs: syms[j].s})
		}
	}
	for i := range syms {
		push(i)
	}
	for h.Len() > 0 {
		it := heap.Pop(h).(pairItem)
		i := it.left
		if syms[i].dead || syms[i].s != it.ls {
			continue
		}
		j := syms[i].next
		if j < 0 || syms[j].s != it.rs {
			continue
		}
		syms[i].s += syms[j].s
		syms[j].dead = true
		syms[i].next = syms[j].next
		if syms[j].next >= 0 {
			syms[syms[j].next].prev = i
		}
		if p := syms[i].prev; p >= 0 {
			push(p)
		}
		push(i)
	}
	var ids []int
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		s := syms[i].s
		if id, ok := t.vocab[s]; ok {
			ids = append(ids, id)
			continue
		}
		if t.byteFall {
			ok := true
			var fb []int
			for k := 0; k < len(s); k++ {
				id, found := t.vocab[fmt.Sprintf("<0x%02X>", s[k])]
				if !found {
					ok = false
					break
				}
				fb = append(fb, id)
			}
			if ok {
				ids = append(ids, fb...)
				continue
			}
		}
		if t.unk >= 0 {
			ids = append(ids, t.unk)
		}
	}
	return ids
}

type pairItem struct {
	rank, left int
	ls, rs     string
}
type pairHeap []pairItem

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].left < h[j].left
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (t *hfTokenizer) Decode(ids []int) string {
	var out bytes.Buffer
	for _, id := range ids {
		s, ok := t.token(id)
		if !ok {
			continue
		}
		if t.byteLevel || contains(t.decoders, "ByteLevel") {
			if isAdded(t.added, id) {
				out.WriteString(s)
				continue
			}
			for _, r := range s {
				if b, ok := runeToByte[r]; ok {
					out.WriteByte(b)
				} else {
					out.WriteRune(r)
				}
			}
			continue
		}
		if t.byteFall && len(s) == 6 && strings.HasPrefix(s, "<0x") && strings.HasSuffix(s, ">") {
			if v, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
				out.WriteByte(byte(v))
				continue
			}
		}
		out.WriteString(s)
	}
	res := out.String()
	if contains(t.decoders, "Metaspace") {
		res = strings.ReplaceAll(res, "▁", " ")
		for i := 0; i < t.stripStart && strings.HasPrefix(res, " "); i++ {
			res = res[1:]
		}
	}
	return res
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func isAdded(as []hfAdded, id int) bool {
	for _, a := range as {
		if a.id == id {
			return true
		}
	}
	return false
}

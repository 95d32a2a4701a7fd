package workload

import (
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The embedded tiktoken encoder spends almost all its time in regexp2 (a
// backtracking engine) splitting text into pieces. cl100k_base's split
// pattern — also Llama-3's — is simple enough to hand-code, which makes
// counting and prompt generation an order of magnitude faster; the
// differential tests and fuzzer check it against the regexp on every input.
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
const cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func isL(r rune) bool  { return unicode.IsLetter(r) }
func isN(r rune) bool  { return unicode.IsNumber(r) }
func isS(r rune) bool  { return unicode.IsSpace(r) }
func isNL(r rune) bool { return r == '\r' || r == '\n' }

// qwen2Pattern is cl100k's with single digits (Qwen2, Qwen2.5).
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// fastSplitters maps split patterns to their hand-coded equivalents.
var fastSplitters = map[string]func(string, func(a, b int)){
	cl100kPattern: splitCl100k,
	gpt2Pattern:   splitGPT2,
	qwen2Pattern:  func(s string, emit func(a, b int)) { splitTiktokenStyle(s, 1, emit) },
}

// splitCl100k calls emit with each piece of s, in order, as byte offsets.
func splitCl100k(s string, emit func(a, b int)) { splitTiktokenStyle(s, 3, emit) }

// splitTiktokenStyle implements cl100k's pattern with numbers grouped by up
// to maxDigits.
func splitTiktokenStyle(s string, maxDigits int, emit func(a, b int)) {
	at := func(i int) (rune, int) {
		if i >= len(s) {
			return -1, 0
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		return r, n
	}
	i := 0
	for i < len(s) {
		r, n := at(i)
		// (?i:'s|'t|'re|'ve|'m|'ll|'d)
		if r == '\'' {
			if m := contraction(s[i+1:]); m > 0 {
				emit(i, i+1+m)
				i += 1 + m
				continue
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isL(r) {
			j := i + n
			for {
				r2, n2 := at(j)
				if r2 < 0 || !isL(r2) {
					break
				}
				j += n2
			}
			emit(i, j)
			i = j
			continue
		}
		if !isNL(r) && !isN(r) {
			if r2, n2 := at(i + n); r2 >= 0 && isL(r2) {
				j := i + n + n2
				for {
					r3, n3 := at(j)
					if r3 < 0 || !isL(r3) {
						break
					}
					j += n3
				}
				emit(i, j)
				i = j
				continue
			}
		}
		// \p{N}{1,3}
		if isN(r) {
			j := i + n
			for k := 1; k < maxDigits; k++ {
				r2, n2 := at(j)
				if r2 < 0 || !isN(r2) {
					break
				}
				j += n2
			}
			emit(i, j)
			i = j
			continue
		}
		// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
		{
			j := i
			if r == ' ' {
				j += n
			}
			k := j
			for {
				r2, n2 := at(k)
				if r2 < 0 || isS(r2) || isL(r2) || isN(r2) {
					break
				}
				k += n2
			}
			if k > j {
				for {
					r2, n2 := at(k)
					if r2 < 0 || !isNL(r2) {
						break
					}
					k += n2
				}
				emit(i, k)
				i = k
				continue
			}
		}
		// The rest start with whitespace (anything else matched above).
		j := whitespaceEnd(s, i)
		emit(i, j)
		i = j
	}
}

// whitespaceEnd matches the pattern's whitespace alternatives at i, in
// order: \s*[\r\n]+ (up to the run's last line break), \s+(?!\S) (the
// whole run at the end of text, else all but its last character when that
// leaves at least one), then \s+.
func whitespaceEnd(s string, i int) int {
	j := i
	lastNL := -1
	prev := i
	for j < len(s) {
		r2, n2 := utf8.DecodeRuneInString(s[j:])
		if !isS(r2) {
			break
		}
		if isNL(r2) {
			lastNL = j + n2
		}
		prev = j
		j += n2
	}
	switch {
	case lastNL > 0:
		return lastNL
	case j >= len(s):
		return j
	case prev > i:
		return prev
	}
	return j
}

// contraction matches s|t|re|ve|m|ll|d case-insensitively at the start of s.
func contraction(s string) int {
	lower := func(i int) byte {
		if i >= len(s) {
			return 0
		}
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	return 0
}

// bpeRanks merges one piece with tiktoken's rank rule: repeatedly join the
// adjacent pair whose concatenation has the lowest rank.
func bpeRanks(piece string, ranks map[string]int, out []int) []int {
	if id, ok := ranks[piece]; ok {
		return append(out, id)
	}
	// Boundaries of the current parts; parts are piece[b[k]:b[k+1]].
	var small [64]int
	b := small[:0]
	for i := 0; i <= len(piece); i++ {
		b = append(b, i)
	}
	for len(b) > 2 {
		best, bi := int(^uint(0)>>1), -1
		for k := 0; k+2 < len(b); k++ {
			if r, ok := ranks[piece[b[k]:b[k+2]]]; ok && r < best {
				best, bi = r, k
			}
		}
		if bi < 0 {
			break
		}
		b = append(b[:bi+1], b[bi+2:]...)
	}
	for k := 0; k+1 < len(b); k++ {
		out = append(out, ranks[piece[b[k]:b[k+1]]])
	}
	return out
}

// splitGPT2 implements GPT-2's ByteLevel pattern:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(s string, emit func(a, b int)) {
	at := func(i int) (rune, int) {
		if i >= len(s) {
			return -1, 0
		}
		return utf8.DecodeRuneInString(s[i:])
	}
	run := func(j int, class func(rune) bool) int {
		for {
			r, n := at(j)
			if r < 0 || !class(r) {
				return j
			}
			j += n
		}
	}
	other := func(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }
	i := 0
	for i < len(s) {
		r, n := at(i)
		if r == '\'' {
			if m := contractionCase(s[i+1:]); m > 0 {
				emit(i, i+1+m)
				i += 1 + m
				continue
			}
		}
		j := i
		if r == ' ' {
			j += n
		}
		if r2, _ := at(j); r2 >= 0 {
			var k int
			switch {
			case isL(r2):
				k = run(j, isL)
			case isN(r2):
				k = run(j, isN)
			case other(r2):
				k = run(j, other)
			}
			if k > j {
				emit(i, k)
				i = k
				continue
			}
		}
		// Whitespace: \s+(?!\S) then \s+.
		k := i
		prev := i
		for {
			r2, n2 := at(k)
			if r2 < 0 || !isS(r2) {
				break
			}
			prev = k
			k += n2
		}
		switch {
		case k >= len(s):
			emit(i, k)
			i = k
		case prev > i:
			emit(i, prev)
			i = prev
		default:
			emit(i, k)
			i = k
		}
	}
}

// contractionCase matches s|t|re|ve|m|ll|d (lower case only) at the start.
func contractionCase(s string) int {
	switch {
	case len(s) >= 2 && (s[:2] == "re" || s[:2] == "ve" || s[:2] == "ll"):
		return 2
	case len(s) >= 1 && (s[0] == 's' || s[0] == 't' || s[0] == 'm' || s[0] == 'd'):
		return 1
	}
	return 0
}

// regexpSplitter splits with a regular expression (for patterns without a
// hand-coded splitter), reporting byte offsets.
func regexpSplitter(re *regexp2.Regexp) func(string, func(a, b int)) {
	return func(s string, emit func(a, b int)) {
		// regexp2 reports rune offsets; map them to bytes as we go.
		runeToByte := make([]int, 0, len(s)+1)
		for i := range s {
			runeToByte = append(runeToByte, i)
		}
		runeToByte = append(runeToByte, len(s))
		m, _ := re.FindStringMatch(s)
		for m != nil {
			if m.Length > 0 {
				emit(runeToByte[m.Index], runeToByte[m.Index+m.Length])
			}
			m, _ = re.FindNextMatch(m)
		}
	}
}

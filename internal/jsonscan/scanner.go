package jsonscan

import (
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads JSON tokens from b, starting at offset 0. The zero value
// scans an empty input; use New. A Scanner is a small value meant to live
// on the caller's stack.
type Scanner struct {
	b []byte
	i int
}

// New returns a Scanner over b. The Scanner never modifies b, and the
// byte slices it returns alias it.
func New(b []byte) Scanner { return Scanner{b: b} }

// Pos is the offset of the next unread byte.
func (s *Scanner) Pos() int { return s.i }

// WS skips JSON whitespace.
func (s *Scanner) WS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the next non-whitespace byte without consuming it, or 0 at
// the end of the input (0 never starts a JSON token).
func (s *Scanner) Peek() byte {
	s.WS()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Consume consumes the next non-whitespace byte if it is ch.
func (s *Scanner) Consume(ch byte) bool {
	s.WS()
	if s.i < len(s.b) && s.b[s.i] == ch {
		s.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.WS()
	return s.i == len(s.b)
}

// Literal consumes the literal w (true, false or null). Like encoding/json
// it does not look past w: "truex" is caught by whatever the caller
// expects next (a comma, a bracket or the end).
func (s *Scanner) Literal(w string) bool {
	s.WS()
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// Null consumes a null.
func (s *Scanner) Null() bool { return s.Literal("null") }

// Number consumes a number (JSON's grammar exactly: no leading zeros, no
// '+', digits after '.' and after the exponent) and returns its text.
func (s *Scanner) Number() ([]byte, bool) {
	s.WS()
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return nil, false
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return nil, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return nil, false
		}
	}
	n := b[s.i:i]
	s.i = i
	return n, true
}

// digits returns the offset after the run of digits starting at i, or -1
// if there is none.
func digits(b []byte, i int) int {
	d := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == d {
		return -1
	}
	return i
}

// PlainBytes consumes a string with no escapes, control or non-ASCII bytes
// and returns its contents as a slice of the input (no allocation). Any
// other string is "unusual": encoding/json may rewrite it (escapes,
// invalid UTF-8) or fold it differently as a key (Unicode case folding).
func (s *Scanner) PlainBytes() ([]byte, bool) {
	if !s.Consume('"') {
		return nil, false
	}
	b, start := s.b, s.i
	i := start
	for i < len(b) && plain[b[i]] {
		i++
	}
	if i < len(b) && b[i] == '"' {
		s.i = i + 1
		return b[start:i], true
	}
	return nil, false
}

// plain marks the bytes a plain string holds as they are: printable ASCII
// other than '"' and '\\'. A read-only table: one load per byte keeps the
// hot loops as tight as encoding/json's own.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// PlainString is PlainBytes copied into a string.
func (s *Scanner) PlainString() (string, bool) {
	v, ok := s.PlainBytes()
	if !ok {
		return "", false
	}
	return string(v), true
}

// Key consumes an object key and its colon. Only plain keys (see
// PlainBytes) are accepted: encoding/json matches an escaped or non-ASCII
// key to a field with Unicode folding, which callers leave to it. The key
// aliases the input.
func (s *Scanner) Key() ([]byte, bool) {
	k, ok := s.PlainBytes()
	if !ok || !s.Consume(':') {
		return nil, false
	}
	return k, true
}

// Str consumes any valid string and returns it decoded exactly as
// encoding/json decodes it into a string: escapes resolved, a lone or
// broken surrogate escape and each invalid UTF-8 byte replaced by U+FFFD.
// A string without escapes and with valid UTF-8 is copied out in one go.
func (s *Scanner) Str() (string, bool) {
	if s.Peek() != '"' {
		return "", false
	}
	start := s.i + 1
	clean, ok := s.skipString()
	if !ok {
		return "", false
	}
	raw := s.b[start : s.i-1]
	if clean || utf8.Valid(raw) && !hasBackslash(raw) {
		return string(raw), true
	}
	return unquote(raw), true
}

// Array consumes an array, calling elem to consume each element (elem
// returns false to refuse it). The brackets and commas are checked here.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Consume('[') {
		return false
	}
	if s.Consume(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if !s.Consume(',') {
			return s.Consume(']')
		}
	}
}

// Object consumes an object with plain keys (see Key), calling field with
// each key to consume its value (field returns false to refuse it).
func (s *Scanner) Object(field func(key []byte) bool) bool {
	if !s.Consume('{') {
		return false
	}
	if s.Consume('}') {
		return true
	}
	for {
		k, ok := s.Key()
		if !ok || !field(k) {
			return false
		}
		if !s.Consume(',') {
			return s.Consume('}')
		}
	}
}

// Skip consumes any one value, validating it as encoding/json would.
// Arrays and objects may nest at most maxDepth levels below the value
// (a value counts as depth 0); deeper input is refused, which bounds the
// recursion whatever the input.
func (s *Scanner) Skip(maxDepth int) bool { return s.skip(0, maxDepth) }

func (s *Scanner) skip(depth, maxDepth int) bool {
	if depth > maxDepth {
		return false
	}
	switch s.Peek() {
	case '"':
		_, ok := s.skipString()
		return ok
	case '{':
		s.i++
		if s.Consume('}') {
			return true
		}
		for {
			if s.Peek() != '"' {
				return false
			}
			if _, ok := s.skipString(); !ok || !s.Consume(':') || !s.skip(depth+1, maxDepth) {
				return false
			}
			if s.Consume(',') {
				continue
			}
			return s.Consume('}')
		}
	case '[':
		s.i++
		if s.Consume(']') {
			return true
		}
		for {
			if !s.skip(depth+1, maxDepth) {
				return false
			}
			if s.Consume(',') {
				continue
			}
			return s.Consume(']')
		}
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		_, ok := s.Number()
		return ok
	}
}

// skipString consumes the string starting at s.i (a '"'), checking that
// it has no control bytes and only valid escapes — exactly what
// encoding/json requires; it does not check UTF-8 (neither does
// encoding/json, which replaces bad bytes when decoding). clean reports a
// string of printable ASCII with no escapes.
func (s *Scanner) skipString() (clean, ok bool) {
	b, i := s.b, s.i+1
	clean = true
	for i < len(b) {
		c := b[i]
		if plain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			s.i = i + 1
			return clean, true
		case c == '\\':
			clean = false
			if i+1 >= len(b) {
				return false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(b[i+2:]) < 0 {
					return false, false
				}
				i += 6
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		default:
			if c >= 0x80 {
				clean = false
			}
			i++
		}
	}
	return false, false
}

func hasBackslash(b []byte) bool {
	for _, c := range b {
		if c == '\\' {
			return true
		}
	}
	return false
}

// hex4 decodes the four hex digits at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// unquote decodes the contents of a string already validated by
// skipString, following encoding/json's unquoteBytes rule for rule: a
// surrogate escape pairs with an immediately following one when together
// they make a valid pair, otherwise it becomes U+FFFD (and the next escape
// is decoded on its own); an invalid UTF-8 byte becomes U+FFFD.
func unquote(raw []byte) string {
	// Decoding never grows the text except when replacing invalid bytes;
	// the Builder hands its buffer over without a second copy.
	var out strings.Builder
	out.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, hex4(raw[i+2:])); dec != utf8.RuneError {
							i += 6
							out.WriteRune(dec)
							continue
						}
					}
					r = utf8.RuneError
				}
				out.WriteRune(r)
				continue
			default: // '"', '\\', '/'
				out.WriteByte(e)
			}
			i += 2
		case c < utf8.RuneSelf:
			out.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			out.WriteRune(r)
			i += size
		}
	}
	return out.String()
}

// KeyIs reports whether key, as returned by Key (plain ASCII), names the
// field name (lower-case ASCII) the way encoding/json matches object keys
// to struct fields: ignoring ASCII case. (encoding/json also folds a few
// non-ASCII letters such as the Kelvin sign onto 'k'; Key refuses
// non-ASCII keys, so that case never reaches here.)
func KeyIs(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

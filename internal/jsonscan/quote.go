package jsonscan

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s to b as a JSON string and returns the extended
// buffer: quotes, backslashes and control characters escaped (\n, \r and
// \t by name, the others as \u00XX), invalid UTF-8 replaced by U+FFFD,
// U+2028 and U+2029 escaped (as encoding/json does); <, > and & are left
// as they are. It allocates only when b must grow.
//
// It is the one JSON string encoder of the hot paths: the gateway's access
// log (byte for byte what log/slog's JSONHandler writes), its error
// answers and events, and the translator's per-token fast paths.
func AppendString(b []byte, s string) []byte { return appendString(b, s, &plainSafe) }

// AppendStringStd appends s byte for byte as encoding/json's Marshal and
// Encoder write a string: as AppendString, and also \b and \f by name and
// <, > and & as \u003c, \u003e, \u0026 (its default HTML escaping). For
// output that must stay identical to what encoding/json wrote before:
// request bodies (wire) and requests.jsonl (record).
func AppendStringStd(b []byte, s string) []byte { return appendString(b, s, &stdSafe) }

// plainSafe and stdSafe say which ASCII bytes each encoder copies as they
// are; read only.
var plainSafe, stdSafe = safeSet(""), safeSet("<>&")

func safeSet(escaped string) (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	for i := range len(escaped) {
		t[escaped[i]] = false
	}
	return t
}

func appendString(b []byte, s string, safe *[utf8.RuneSelf]bool) []byte {
	std := safe == &stdSafe
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case std && c == '\b':
				b = append(b, '\\', 'b')
			case std && c == '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// parsedRequest is what the gateway reads from an OpenAI or Anthropic
// request body: the model, whether it streams, the token limits (for the
// span) and the prompt's text, flattened, for prefix hashing.
type parsedRequest struct {
	Model               string
	Stream              bool
	MaxTokens           int
	MaxCompletionTokens int
	System              string    // Anthropic "system" (string or text parts)
	Messages            []msgText // in order
	Prompt              string    // completions "prompt" (string or strings)
}

type msgText struct{ Role, Text string }

// parseRequest reads a request body. A one-pass scanner handles the usual
// shapes (string or text-part contents, plain keys) without reflection or
// a second decoding of each content; anything unusual — escaped or
// non-ASCII keys, a field of an unexpected type, deep nesting — is handed
// to encoding/json, whose answer (including its errors) is the reference:
// FuzzParseRequest checks that the scanner never disagrees with it.
func parseRequest(body []byte) (parsedRequest, error) {
	if p, ok := scanRequest(body); ok {
		return p, nil
	}
	return parseRequestJSON(body)
}

// requestBody is the part of a request encoding/json decodes.
type requestBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System              json.RawMessage `json:"system"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

// parseRequestJSON is the reference decoding with encoding/json.
func parseRequestJSON(body []byte) (parsedRequest, error) {
	var rb requestBody
	if err := json.Unmarshal(body, &rb); err != nil {
		return parsedRequest{}, err
	}
	p := parsedRequest{Model: rb.Model, Stream: rb.Stream, MaxTokens: rb.MaxTokens, MaxCompletionTokens: rb.MaxCompletionTokens,
		System: contentText(rb.System), Prompt: contentText(rb.Prompt)}
	if len(rb.Messages) > 0 {
		p.Messages = make([]msgText, len(rb.Messages))
		for i, m := range rb.Messages {
			p.Messages[i] = msgText{m.Role, contentText(m.Content)}
		}
	}
	return p, nil
}

// scanner is a JSON reader over one body. Every method returns false when
// the input is invalid or unusual, which sends the body to encoding/json.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// str reads a string token. Strings without escapes and with valid UTF-8
// are sliced out of the body; others are decoded by encoding/json (which
// replaces invalid UTF-8 as the reference does).
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	start := s.i
	s.i++
	plain, ascii := true, true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if plain && (ascii || utf8.Valid(s.b[start+1:s.i-1])) {
				return string(s.b[start+1 : s.i-1]), true
			}
			var out string
			if json.Unmarshal(s.b[start:s.i], &out) != nil {
				return "", false
			}
			return out, true
		case c == '\\':
			plain = false
			s.i += 2 // the escaped byte is never the closing quote
		case c < 0x20:
			return "", false
		default:
			if c >= 0x80 {
				ascii = false
			}
			s.i++
		}
	}
	return "", false
}

// key reads an object key; only plain ASCII keys are handled here
// (encoding/json matches keys case-insensitively with Unicode folding, and
// an escaped key is left to it too). The key aliases the body.
func (s *scanner) key() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i + 1
	for s.i++; s.i < len(s.b) && s.b[s.i] != '"'; s.i++ {
		if c := s.b[s.i]; c < 0x20 || c >= 0x80 || c == '\\' {
			return nil, false
		}
	}
	if s.i >= len(s.b) {
		return nil, false
	}
	k := s.b[start:s.i]
	s.i++
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	return k, true
}

// is reports whether the ASCII key k equals name (lower case) ignoring
// case, as encoding/json matches field names.
func is(k []byte, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// skip validates and passes over any value.
func (s *scanner) skip(depth int) bool {
	if depth > 64 {
		return false
	}
	switch s.peek() {
	case '"':
		_, ok := s.str()
		return ok
	case '{':
		s.i++
		if s.peek() == '}' {
			s.i++
			return true
		}
		for {
			if _, ok := s.anyKey(); !ok || !s.skip(depth+1) {
				return false
			}
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				return true
			default:
				return false
			}
		}
	case '[':
		s.i++
		if s.peek() == ']' {
			s.i++
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return true
			default:
				return false
			}
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		_, ok := s.number()
		return ok
	}
}

// anyKey reads a key of an object whose keys do not matter.
func (s *scanner) anyKey() (string, bool) {
	if _, ok := s.str(); !ok {
		return "", false
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return "", false
	}
	s.i++
	return "", true
}

// number reads a JSON number and returns its text.
func (s *scanner) number() ([]byte, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return nil, false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	return s.b[start:s.i], true
}

// nullOr reports whether the next value is null (consumed).
func (s *scanner) null() bool {
	if s.peek() == 'n' {
		return s.lit("null")
	}
	return false
}

// intValue reads an integer field as encoding/json does into an int;
// fractions and exponents (an error there) are unusual here.
func (s *scanner) intValue(v *int) bool {
	if s.null() {
		return true
	}
	t, ok := s.number()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil {
		return false
	}
	*v = int(n)
	return true
}

// content reads a message content, system or prompt value and flattens it
// as contentText does: a string, text parts ({"type":..,"text":..}) or
// strings; other values flatten to "".
func (s *scanner) content(out *string) bool {
	switch s.peek() {
	case '"':
		v, ok := s.str()
		*out = v
		return ok
	case '[':
	default:
		*out = ""
		return s.skip(1)
	}
	s.i++
	var sb strings.Builder
	if s.peek() == ']' {
		s.i++
		*out = ""
		return true
	}
	kind := byte(0) // the first element's kind: '"' or '{'; mixed is unusual
	for {
		c := s.peek()
		if kind == 0 {
			kind = c
		}
		if c != kind {
			return false
		}
		switch c {
		case '"':
			v, ok := s.str()
			if !ok {
				return false
			}
			sb.WriteString(v)
		case '{':
			text, ok := s.part()
			if !ok {
				return false
			}
			sb.WriteString(text)
		default:
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			*out = sb.String()
			return true
		default:
			return false
		}
	}
}

// part reads one content part object and returns its "text".
func (s *scanner) part() (string, bool) {
	s.i++ // '{'
	text := ""
	if s.peek() == '}' {
		s.i++
		return "", true
	}
	for {
		k, ok := s.key()
		if !ok {
			return "", false
		}
		switch {
		case is(k, "text"), is(k, "type"):
			if !s.null() {
				v, ok := s.str()
				if !ok {
					return "", false
				}
				if is(k, "text") {
					text = v
				}
			}
		default:
			if !s.skip(2) {
				return "", false
			}
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return text, true
		default:
			return "", false
		}
	}
}

// messages reads the messages array (null leaves it empty).
func (s *scanner) messages(out *[]msgText) bool {
	if s.null() {
		*out = nil
		return true
	}
	if s.peek() != '[' {
		return false
	}
	s.i++
	*out = (*out)[:0]
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if s.peek() != '{' {
			return false // null elements and non-objects: unusual
		}
		s.i++
		var m msgText
		if s.peek() == '}' {
			s.i++
		} else {
			for {
				k, ok := s.key()
				if !ok {
					return false
				}
				switch {
				case is(k, "role"):
					if !s.null() {
						if m.Role, ok = s.str(); !ok {
							return false
						}
					}
				case is(k, "content"):
					if !s.content(&m.Text) {
						return false
					}
				default:
					if !s.skip(2) {
						return false
					}
				}
				c := s.peek()
				s.i++
				if c == '}' {
					break
				}
				if c != ',' {
					return false
				}
			}
		}
		*out = append(*out, m)
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// scanRequest is the one-pass reading; ok false means "ask encoding/json".
func scanRequest(body []byte) (parsedRequest, bool) {
	var p parsedRequest
	seenMessages := false
	s := scanner{b: body}
	if s.peek() != '{' {
		return p, false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			k, ok := s.key()
			if !ok {
				return p, false
			}
			switch {
			case is(k, "model"):
				if !s.null() {
					if p.Model, ok = s.str(); !ok {
						return p, false
					}
				}
			case is(k, "stream"):
				switch {
				case s.null():
				case s.lit("true"):
					p.Stream = true
				case s.lit("false"):
					p.Stream = false
				default:
					return p, false
				}
			case is(k, "max_tokens"):
				if !s.intValue(&p.MaxTokens) {
					return p, false
				}
			case is(k, "max_completion_tokens"):
				if !s.intValue(&p.MaxCompletionTokens) {
					return p, false
				}
			case is(k, "messages"):
				// A repeated "messages" is decoded by encoding/json into
				// the first one's elements, keeping their fields: unusual.
				if seenMessages || !s.messages(&p.Messages) {
					return p, false
				}
				seenMessages = true
			case is(k, "system"):
				if !s.content(&p.System) {
					return p, false
				}
			case is(k, "prompt"):
				if !s.content(&p.Prompt) {
					return p, false
				}
			default:
				if !s.skip(1) {
					return p, false
				}
			}
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return p, false
			}
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return p, false
	}
	if len(p.Messages) == 0 {
		p.Messages = nil
	}
	return p, true
}

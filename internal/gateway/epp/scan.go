package epp

import (
	"strconv"

	"github.com/ttft-dev/ttft/internal/jsonscan"
)

// skipDepth bounds the nesting of skipped values: deeper bodies go to
// encoding/json and its own limit.
const skipDepth = 62

// scanBody reads a request body in one pass with the shared tokenizer,
// without reflection: half the cost of the picker's decision went to
// encoding/json before it. It reports false for anything unusual (a
// repeated key, a null where a value was expected, escaped or non-ASCII
// keys, a number that is not a plain integer, deep nesting, invalid JSON),
// and the body then goes to parseBodyJSON, whose answer is the reference:
// FuzzParseBody checks the two never disagree.
func scanBody(body []byte) (llmRequest, bool) {
	var r llmRequest
	s := jsonscan.New(body)
	var seen uint8
	once := func(bit uint8) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	ok := s.Object(func(k []byte) bool {
		switch {
		case jsonscan.KeyIs(k, "model"):
			if !once(1) {
				return false
			}
			v, ok := s.Str()
			r.Model = v
			return ok
		case jsonscan.KeyIs(k, "stream"):
			if !once(2) {
				return false
			}
			switch s.Peek() {
			case 't':
				r.Stream = true
				return s.Literal("true")
			case 'f':
				return s.Literal("false")
			}
			return false
		case jsonscan.KeyIs(k, "max_tokens"), jsonscan.KeyIs(k, "max_completion_tokens"):
			bit := uint8(4)
			if len(k) != len("max_tokens") {
				bit = 8
			}
			if !once(bit) {
				return false
			}
			n, ok := scanInt(&s)
			r.MaxTokens = max(r.MaxTokens, n)
			return ok
		case jsonscan.KeyIs(k, "system"):
			if !once(16) {
				return false
			}
			return scanContent(&s, body, &r.System)
		case jsonscan.KeyIs(k, "prompt"):
			if !once(32) {
				return false
			}
			return scanContent(&s, body, &r.Prompt)
		case jsonscan.KeyIs(k, "messages"):
			if !once(64) || s.Peek() != '[' {
				return false
			}
			return s.Array(func() bool {
				var m msgText
				var mseen uint8
				ok := s.Object(func(k []byte) bool {
					switch {
					case jsonscan.KeyIs(k, "role"):
						if mseen&1 != 0 {
							return false
						}
						mseen |= 1
						v, ok := s.Str()
						m.Role = v
						return ok
					case jsonscan.KeyIs(k, "content"):
						if mseen&2 != 0 {
							return false
						}
						mseen |= 2
						return scanContent(&s, body, &m.Text)
					}
					return s.Skip(skipDepth)
				})
				r.Messages = append(r.Messages, m)
				return ok
			})
		}
		return s.Skip(skipDepth)
	})
	if !ok || !s.End() {
		return llmRequest{}, false
	}
	return r, true
}

// scanInt reads a plain integer (what encoding/json puts in an int).
func scanInt(s *jsonscan.Scanner) (int, bool) {
	b, ok := s.Number()
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(b))
	return n, err == nil
}

// scanContent reads a content or prompt value into out: a string directly,
// anything else (text parts, an array of strings, null) through
// contentText on its raw bytes, as the reference decoding does.
func scanContent(s *jsonscan.Scanner, body []byte, out *string) bool {
	if s.Peek() == '"' {
		v, ok := s.Str()
		*out = v
		return ok
	}
	s.WS()
	start := s.Pos()
	if !s.Skip(skipDepth) {
		return false
	}
	*out = contentText(body[start:s.Pos()])
	return true
}

package wire

// A fast path for the one event shape that dominates every OpenAI-compatible
// stream: {"choices":[{"delta":{"content":"..."}}], ...} with plain strings.
// It walks the bytes once without reflection or allocation beyond the text
// itself, and gives up (returning false) on anything unusual — escapes,
// tool calls, usage, errors, timings — which the encoding/json path then
// handles. A fuzz test checks both paths agree whenever the fast one answers.

func fastOpenAI(data []byte, c *Chunk, d *openAIDecoder) bool {
	s := scanner{b: data}
	if !s.consume('{') {
		return false
	}
	if s.peekIs('}') {
		s.i++
		return s.end()
	}
	seenChoices := false
	for {
		key, ok := s.key()
		if !ok || !s.consume(':') {
			return false
		}
		switch string(key) {
		case "choices":
			if seenChoices || !s.choices(c) {
				return false
			}
			seenChoices = true
		case "model":
			// Every chunk repeats the model name: reuse the last string
			// rather than allocating one per token.
			m, ok := s.key()
			if !ok {
				return false
			}
			if string(m) != d.model {
				d.model = string(m)
			}
			c.Model = d.model
		case "usage", "error", "object", "timings", "message":
			// "object" is usually "chat.completion.chunk"; vLLM's error
			// objects use it too, so let the full decoder look.
			if string(key) == "object" {
				v, ok := s.key()
				if !ok || string(v) == "error" {
					return false
				}
				break
			}
			if !s.null() {
				return false
			}
		default:
			if foldsTo(key, "model", "choices", "usage", "error", "object", "timings", "message") || !s.skipValue(0) {
				return false
			}
		}
		if s.consume(',') {
			continue
		}
		return s.consume('}') && s.end()
	}
}

func (s *scanner) choices(c *Chunk) bool {
	if s.null() {
		return true
	}
	if !s.consume('[') {
		return false
	}
	if s.consume(']') {
		return true
	}
	for {
		if !s.choice(c) {
			return false
		}
		if s.consume(',') {
			continue
		}
		return s.consume(']')
	}
}

func (s *scanner) choice(c *Chunk) bool {
	if !s.consume('{') {
		return false
	}
	var d deltaFields
	var text string
	seenDelta := false
	if !s.consume('}') {
		for {
			key, ok := s.key()
			if !ok || !s.consume(':') {
				return false
			}
			switch string(key) {
			case "delta":
				if seenDelta || !s.delta(&d) {
					return false
				}
				seenDelta = true
			case "text":
				if text, ok = s.stringOrNull(); !ok {
					return false
				}
			case "finish_reason":
				t, ok := s.stringOrNull()
				if !ok {
					return false
				}
				d.finish, d.finishSet = t, true
			default:
				if foldsTo(key, "delta", "text", "finish_reason") || !s.skipValue(0) {
					return false
				}
			}
			if s.consume(',') {
				continue
			}
			if !s.consume('}') {
				return false
			}
			break
		}
	}
	if d.role != "" {
		c.Role = true
	}
	c.Content += d.content + text
	c.Reasoning += d.reasoningContent + d.reasoning
	if d.finishSet && d.finish != "" {
		c.Finish = d.finish
	}
	return true
}

type deltaFields struct {
	role, content, reasoningContent, reasoning, finish string
	finishSet                                          bool
}

func (s *scanner) delta(d *deltaFields) bool {
	if s.null() {
		return true
	}
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		key, ok := s.key()
		if !ok || !s.consume(':') {
			return false
		}
		var dst *string
		switch string(key) {
		case "role":
			dst = &d.role
		case "content":
			dst = &d.content
		case "reasoning_content":
			dst = &d.reasoningContent
		case "reasoning":
			dst = &d.reasoning
		default:
			// tool_calls, function_call, audio... and near-misses that
			// encoding/json would fold onto our fields: the full decoder.
			return false
		}
		t, ok := s.stringOrNull()
		if !ok {
			return false
		}
		*dst = t
		if s.consume(',') {
			continue
		}
		return s.consume('}')
	}
}

// foldsTo reports whether key matches any name the way encoding/json
// matches object keys to fields (ASCII case-insensitively).
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if len(n) != len(key) {
			continue
		}
		eq := true
		for i := range key {
			a, b := key[i], n[i]
			if 'A' <= a && a <= 'Z' {
				a += 'a' - 'A'
			}
			if a != b {
				eq = false
				break
			}
		}
		if eq {
			return true
		}
	}
	return false
}

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

func (s *scanner) consume(ch byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ch {
		s.i++
		return true
	}
	return false
}

func (s *scanner) peekIs(ch byte) bool {
	s.ws()
	return s.i < len(s.b) && s.b[s.i] == ch
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) null() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// plainString reads a string with no escapes and only valid, non-control
// bytes below 0x80 or well-formed UTF-8 (checked by the caller's fallback
// being authoritative: anything doubtful returns false).
func (s *scanner) plainString() (string, bool) {
	if !s.consume('"') {
		return "", false
	}
	start := s.i
	for s.i < len(s.b) {
		switch ch := s.b[s.i]; {
		case ch == '"':
			str := string(s.b[start:s.i])
			s.i++
			return str, true
		case ch == '\\' || ch < 0x20 || ch >= 0x80:
			// Escapes and non-ASCII (which encoding/json validates and may
			// replace) go to the full decoder.
			return "", false
		}
		s.i++
	}
	return "", false
}

// key reads an object key without allocating.
func (s *scanner) key() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch ch := s.b[s.i]; {
		case ch == '"':
			k := s.b[start:s.i]
			s.i++
			return k, true
		case ch == '\\' || ch < 0x20 || ch >= 0x80:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

func (s *scanner) stringOrNull() (string, bool) {
	if s.null() {
		return "", true
	}
	return s.plainString()
}

// skipValue skips numbers, literals and (up to a small depth) plain arrays
// and objects.
func (s *scanner) skipValue(depth int) bool {
	if depth > 8 {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch ch := s.b[s.i]; {
	case ch == '"':
		_, ok := s.plainString()
		return ok
	case ch == '{':
		s.i++
		if s.consume('}') {
			return true
		}
		for {
			if _, ok := s.plainString(); !ok || !s.consume(':') || !s.skipValue(depth+1) {
				return false
			}
			if s.consume(',') {
				continue
			}
			return s.consume('}')
		}
	case ch == '[':
		s.i++
		if s.consume(']') {
			return true
		}
		for {
			if !s.skipValue(depth + 1) {
				return false
			}
			if s.consume(',') {
				continue
			}
			return s.consume(']')
		}
	case ch == 't':
		return s.literal("true")
	case ch == 'f':
		return s.literal("false")
	case ch == 'n':
		return s.literal("null")
	case ch == '-' || ch >= '0' && ch <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) literal(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// number accepts JSON's number grammar exactly.
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	s.i = i
	return true
}

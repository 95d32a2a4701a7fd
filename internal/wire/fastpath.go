package wire

import "github.com/ttft-dev/ttft/internal/jsonscan"

// A fast path for the one event shape that dominates every OpenAI-compatible
// stream: {"choices":[{"delta":{"content":"..."}}], ...} with plain strings.
// It walks the bytes once without reflection or allocation beyond the text
// itself (and the usage object of a stream's last chunk), and gives up
// (returning false) on anything unusual — escapes, tool calls, errors,
// timings — which the encoding/json path then
// handles. A fuzz test checks both paths agree whenever the fast one answers.
// The JSON tokens come from internal/jsonscan; the chunk's shape is here.

// chunkScanner adds the chunk-specific readers to the shared tokenizer.
type chunkScanner struct{ jsonscan.Scanner }

func fastOpenAI(data []byte, c *Chunk, d *openAIDecoder) bool {
	s := chunkScanner{jsonscan.New(data)}
	seenChoices, seenUsage := false, false
	return s.Object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			if seenChoices || !s.choices(c) {
				return false
			}
			seenChoices = true
		case "model":
			// Every chunk repeats the model name: reuse the last string
			// rather than allocating one per token.
			m, ok := s.PlainBytes()
			if !ok {
				return false
			}
			if string(m) != d.model {
				d.model = string(m)
			}
			c.Model = d.model
		case "id":
			v, ok := s.PlainBytes()
			if !ok {
				return false
			}
			if string(v) != d.id {
				d.id = string(v)
			}
			c.ID = d.id
		case "object":
			// Usually "chat.completion.chunk"; vLLM's error objects use
			// it too, so let the full decoder look.
			v, ok := s.PlainBytes()
			return ok && string(v) != "error"
		case "usage":
			// Every request's final chunk (stream_options.include_usage):
			// on the slow path it cost a reflection decode per request.
			if seenUsage {
				return false // encoding/json would merge the two
			}
			seenUsage = true
			return s.usage(c)
		case "error", "timings", "message":
			return s.Null()
		default:
			return !foldsTo(key, "id", "model", "choices", "usage", "error", "object", "timings", "message") && s.Skip(maxSkipDepth)
		}
		return true
	}) && s.End()
}

func (s *chunkScanner) choices(c *Chunk) bool {
	return s.Null() || s.Array(func() bool { return s.choice(c) })
}

func (s *chunkScanner) choice(c *Chunk) bool {
	var d deltaFields
	var text string
	seenDelta := false
	ok := s.Object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "delta":
			if seenDelta || !s.delta(&d) {
				return false
			}
			seenDelta = true
		case "text":
			text, ok = s.stringOrNull()
			return ok
		case "finish_reason":
			d.finish, ok = s.stringOrNull()
			d.finishSet = ok
			return ok
		default:
			return !foldsTo(key, "delta", "text", "finish_reason") && s.Skip(maxSkipDepth)
		}
		return true
	})
	if !ok {
		return false
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

func (s *chunkScanner) delta(d *deltaFields) bool {
	return s.Null() || s.Object(func(key []byte) bool {
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
		*dst = t
		return ok
	})
}

// usage reads CompletionUsage as encoding/json does: null leaves Usage
// nil, an object gives a Usage (zero fields when absent or null). Numbers
// that are not plain integers (1.0, 1e3, huge ones: errors to
// encoding/json) and a repeated prompt_tokens_details (which it would
// merge) go to the full decoder.
func (s *chunkScanner) usage(c *Chunk) bool {
	if s.Null() {
		return true
	}
	var u Usage
	seenDetails := false
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return s.intOrNull(&u.PromptTokens)
		case "completion_tokens":
			return s.intOrNull(&u.CompletionTokens)
		case "prompt_tokens_details":
			if seenDetails {
				return false
			}
			seenDetails = true
			u.CachedPromptTokens = 0
			return s.Null() || s.Object(func(key []byte) bool {
				if string(key) == "cached_tokens" {
					return s.intOrNull(&u.CachedPromptTokens)
				}
				return !foldsTo(key, "cached_tokens") && s.Skip(maxSkipDepth)
			})
		default:
			return !foldsTo(key, "prompt_tokens", "completion_tokens", "prompt_tokens_details") && s.Skip(maxSkipDepth)
		}
	})
	if !ok {
		return false
	}
	c.Usage = &u
	return true
}

// intOrNull reads an integer into *v, or null leaving it as it is (as
// encoding/json does for an int field). Only plain integers of up to 18
// digits, which every int holds: anything else is for encoding/json.
func (s *chunkScanner) intOrNull(v *int) bool {
	if s.Null() {
		return true
	}
	n, ok := s.Number()
	if !ok {
		return false
	}
	neg := len(n) > 0 && n[0] == '-'
	if neg {
		n = n[1:]
	}
	if len(n) == 0 || len(n) > 18 {
		return false
	}
	x := 0
	for _, d := range n {
		if d < '0' || d > '9' {
			return false // a fraction or an exponent
		}
		x = x*10 + int(d-'0')
	}
	if neg {
		x = -x
	}
	*v = x
	return true
}

// foldsTo reports whether key matches any name the way encoding/json
// matches object keys to fields (ASCII case-insensitively).
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if jsonscan.KeyIs(key, n) {
			return true
		}
	}
	return false
}

// maxSkipDepth bounds the nesting of values the fast path skips (ids,
// logprobs...); deeper ones go to encoding/json.
const maxSkipDepth = 8

// stringOrNull reads a plain string, or null as "" (as encoding/json
// leaves a string field untouched by null).
func (s *chunkScanner) stringOrNull() (string, bool) {
	if s.Null() {
		return "", true
	}
	return s.PlainString()
}

// FastOpenAIChunk is an OpenAI-chat decoder's fast path on its own, for
// callers with their own full decoder (the gateway's stream translator):
// Decode reads the usual token chunk (or a usage chunk, with c.Usage set)
// into c and reports false, without falling back, for any other shape. Not
// for concurrent use.
type FastOpenAIChunk struct{ d openAIDecoder }

func (f *FastOpenAIChunk) Decode(data []byte, c *Chunk) bool {
	*c = Chunk{}
	return fastOpenAI(data, c, &f.d)
}

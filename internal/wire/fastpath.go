package wire

import "github.com/ttft-dev/ttft/internal/jsonscan"

// A fast path for the one event shape that dominates every OpenAI-compatible
// stream: {"choices":[{"delta":{"content":"..."}}], ...} with plain strings.
// It walks the bytes once without reflection or allocation beyond the text
// itself, and gives up (returning false) on anything unusual — escapes,
// tool calls, usage, errors, timings — which the encoding/json path then
// handles. A fuzz test checks both paths agree whenever the fast one answers.
// The JSON tokens come from internal/jsonscan; the chunk's shape is here.

// chunkScanner adds the chunk-specific readers to the shared tokenizer.
type chunkScanner struct{ jsonscan.Scanner }

func fastOpenAI(data []byte, c *Chunk, d *openAIDecoder) bool {
	s := chunkScanner{jsonscan.New(data)}
	seenChoices := false
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
		case "object":
			// Usually "chat.completion.chunk"; vLLM's error objects use
			// it too, so let the full decoder look.
			v, ok := s.PlainBytes()
			return ok && string(v) != "error"
		case "usage", "error", "timings", "message":
			return s.Null()
		default:
			return !foldsTo(key, "model", "choices", "usage", "error", "object", "timings", "message") && s.Skip(maxSkipDepth)
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
// Decode reads the usual token chunk into c and reports false, without
// falling back, for any other shape. Not for concurrent use.
type FastOpenAIChunk struct{ d openAIDecoder }

func (f *FastOpenAIChunk) Decode(data []byte, c *Chunk) bool {
	*c = Chunk{}
	return fastOpenAI(data, c, &f.d)
}

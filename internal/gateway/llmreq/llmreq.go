// Package llmreq reads what routing needs from an OpenAI chat,
// completions or Anthropic messages request body (model, streaming, token
// limits, the prompt's text) in one pass, and hashes the prompt into the
// scheduler's prefix blocks: shared by the gateway's proxy and its Endpoint
// Picker, so that both agree on what a shared prefix is.
package llmreq

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/wire"
)

// Request is what the gateway reads from an OpenAI or Anthropic
// request body: the model, whether it streams, the token limits (for the
// span) and the prompt's text, flattened, for prefix hashing.
type Request struct {
	Model               string
	Stream              bool
	MaxTokens           int
	MaxCompletionTokens int
	System              string // Anthropic "system" (string or text parts)
	Messages            []Msg  // in order
	Prompt              string // completions "prompt" (string or strings)
}

// Msg is one message: its role and its content's text.
type Msg struct{ Role, Text string }

// contentText is a message content's or a prompt's text (wire.ContentText;
// a completions prompt may also be an array of strings), so that the same
// text hashes alike in all four request shapes.
func contentText(raw json.RawMessage) string {
	if t, ok := wire.ContentText(raw); ok {
		return t
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "")
	}
	return ""
}

// Hash canonicalises the prompt into h: a system prompt (OpenAI system or
// developer message, Anthropic "system") first, then each message as
// (role, text), then a completions prompt.
func (r *Request) Hash(h *sched.BlockHasher) {
	if r.System != "" {
		h.Segment("system", r.System)
	}
	for _, m := range r.Messages {
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		h.Segment(role, m.Text)
	}
	h.Text(r.Prompt)
}

// Parse reads a request body. A one-pass scanner handles the usual
// shapes (string or text-part contents, plain keys) without reflection or
// a second decoding of each content; anything unusual — escaped or
// non-ASCII keys, a field of an unexpected type, deep nesting — is handed
// to encoding/json, whose answer (including its errors) is the reference:
// FuzzParseRequest checks that the scanner never disagrees with it.
func Parse(body []byte) (Request, error) {
	if p, ok := scan(body); ok {
		return p, nil
	}
	return parseJSON(body)
}

// requestBody is the part of a request encoding/json decodes: one view
// across OpenAI chat, completions and Anthropic bodies, with the ints the
// scanner mirrors, so not wire.ChatCompletionRequest (a server's reading).
type requestBody struct {
	Model               string             `json:"model"`
	Stream              bool               `json:"stream"`
	Messages            []wire.ChatMessage `json:"messages"`
	System              json.RawMessage    `json:"system"`
	Prompt              json.RawMessage    `json:"prompt"`
	MaxTokens           int                `json:"max_tokens"`
	MaxCompletionTokens int                `json:"max_completion_tokens"`
}

// parseJSON is the reference decoding with encoding/json.
func parseJSON(body []byte) (Request, error) {
	var rb requestBody
	if err := json.Unmarshal(body, &rb); err != nil {
		return Request{}, err
	}
	p := Request{Model: rb.Model, Stream: rb.Stream, MaxTokens: rb.MaxTokens, MaxCompletionTokens: rb.MaxCompletionTokens,
		System: contentText(rb.System), Prompt: contentText(rb.Prompt)}
	if len(rb.Messages) > 0 {
		p.Messages = make([]Msg, len(rb.Messages))
		for i, m := range rb.Messages {
			p.Messages[i] = Msg{m.Role, contentText(m.Content)}
		}
	}
	return p, nil
}

// reqScanner adds the request-specific readers to the shared tokenizer
// (internal/jsonscan). Every method returns false when the input is
// invalid or unusual, which sends the body to encoding/json.
type reqScanner struct{ jsonscan.Scanner }

// Nesting bounds for skipped values (counted from the top-level object, as
// the scanner used to): deeper bodies are left to encoding/json and its
// own depth limit.
const (
	skipDepthField = 63 // a top-level field's or a message's content value
	skipDepthInner = 62 // a field inside a message or a content part
)

// is reports whether the plain key k names the field name (lower case)
// as encoding/json matches it.
func is(k []byte, name string) bool { return jsonscan.KeyIs(k, name) }

// intValue reads an integer field as encoding/json does into an int;
// fractions and exponents (an error there) are unusual here.
func (s *reqScanner) intValue(v *int) bool {
	if s.Null() {
		return true
	}
	t, ok := s.Number()
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

// strField reads a string field; null leaves it as it was, as
// encoding/json does.
func (s *reqScanner) strField(dst *string) bool {
	if s.Null() {
		return true
	}
	v, ok := s.Str()
	*dst = v
	return ok
}

// content reads a message content, system or prompt value and flattens it
// as contentText does: a string, text parts ({"type":..,"text":..}) or
// strings; other values flatten to "".
func (s *reqScanner) content(out *string) bool {
	switch s.Peek() {
	case '"':
		v, ok := s.Str()
		*out = v
		return ok
	case '[':
	default:
		*out = ""
		return s.Skip(skipDepthField)
	}
	var sb strings.Builder
	kind := byte(0) // the first element's kind: '"' or '{'; mixed is unusual
	ok := s.Array(func() bool {
		c := s.Peek()
		if kind == 0 {
			kind = c
		}
		if c != kind {
			return false
		}
		var v string
		ok := false
		switch c {
		case '"':
			v, ok = s.Str()
		case '{':
			v, ok = s.part()
		}
		sb.WriteString(v)
		return ok
	})
	*out = sb.String()
	return ok
}

// part reads one content part object and returns its "text".
func (s *reqScanner) part() (string, bool) {
	text := ""
	ok := s.Object(func(k []byte) bool {
		if !is(k, "text") && !is(k, "type") {
			return s.Skip(skipDepthInner)
		}
		if s.Null() {
			return true
		}
		v, ok := s.Str()
		if is(k, "text") {
			text = v
		}
		return ok
	})
	return text, ok
}

// messages reads the messages array (null leaves it empty).
func (s *reqScanner) messages(out *[]Msg) bool {
	if s.Null() {
		*out = nil
		return true
	}
	*out = (*out)[:0]
	return s.Array(func() bool {
		var m Msg
		// Object refuses null elements and non-objects: unusual.
		ok := s.Object(func(k []byte) bool {
			switch {
			case is(k, "role"):
				return s.strField(&m.Role)
			case is(k, "content"):
				return s.content(&m.Text)
			}
			return s.Skip(skipDepthInner)
		})
		*out = append(*out, m)
		return ok
	})
}

// scan is the one-pass reading; ok false means "ask encoding/json".
func scan(body []byte) (Request, bool) {
	var p Request
	seenMessages := false
	s := reqScanner{jsonscan.New(body)}
	ok := s.Object(func(k []byte) bool {
		switch {
		case is(k, "model"):
			return s.strField(&p.Model)
		case is(k, "stream"):
			switch {
			case s.Null():
			case s.Literal("true"):
				p.Stream = true
			case s.Literal("false"):
				p.Stream = false
			default:
				return false
			}
			return true
		case is(k, "max_tokens"):
			return s.intValue(&p.MaxTokens)
		case is(k, "max_completion_tokens"):
			return s.intValue(&p.MaxCompletionTokens)
		case is(k, "messages"):
			// A repeated "messages" is decoded by encoding/json into
			// the first one's elements, keeping their fields: unusual.
			if seenMessages {
				return false
			}
			seenMessages = true
			return s.messages(&p.Messages)
		case is(k, "system"):
			return s.content(&p.System)
		case is(k, "prompt"):
			return s.content(&p.Prompt)
		}
		return s.Skip(skipDepthField)
	})
	if !ok || !s.End() {
		return p, false
	}
	if len(p.Messages) == 0 {
		p.Messages = nil
	}
	return p, true
}

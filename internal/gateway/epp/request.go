package epp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/wire"
)

// Headers the picker reads, as the ttft gateway does (lower case: Envoy
// sends HTTP/2-style lower-case header names).
const (
	headerSLOMs    = "x-ttft-slo-ms"
	headerSLOClass = "x-slo-class"
)

// llmRequest is what the picker reads from an OpenAI (chat or
// completions) or Anthropic (messages) request body.
type llmRequest struct {
	Model     string
	Stream    bool
	MaxTokens int
	// System, Messages and Prompt are the prompt's text, in the order the
	// gateway hashes them, so that the picker's prefix index and the
	// gateway's agree on what a shared prefix is.
	System   string
	Messages []msgText
	Prompt   string
}

type msgText struct{ Role, Text string }

// requestBody is one view across the three APIs' request bodies.
type requestBody struct {
	Model               string             `json:"model"`
	Stream              bool               `json:"stream"`
	Messages            []wire.ChatMessage `json:"messages"`
	System              json.RawMessage    `json:"system"`
	Prompt              json.RawMessage    `json:"prompt"`
	MaxTokens           int                `json:"max_tokens"`
	MaxCompletionTokens int                `json:"max_completion_tokens"`
}

// parseBody reads a request body. An empty body (a GET, say) is a request
// for no particular model.
func parseBody(body []byte) (llmRequest, error) {
	if len(body) == 0 {
		return llmRequest{}, nil
	}
	if r, ok := scanBody(body); ok {
		return r, nil
	}
	return parseBodyJSON(body)
}

// parseBodyJSON is the reference decoding, with encoding/json.
func parseBodyJSON(body []byte) (llmRequest, error) {
	var rb requestBody
	if err := json.Unmarshal(body, &rb); err != nil {
		return llmRequest{}, fmt.Errorf("request body is not an OpenAI or Anthropic JSON request: %w", err)
	}
	r := llmRequest{Model: rb.Model, Stream: rb.Stream, MaxTokens: max(rb.MaxTokens, rb.MaxCompletionTokens),
		System: contentText(rb.System), Prompt: contentText(rb.Prompt)}
	if len(rb.Messages) > 0 {
		r.Messages = make([]msgText, len(rb.Messages))
		for i, m := range rb.Messages {
			r.Messages[i] = msgText{m.Role, contentText(m.Content)}
		}
	}
	return r, nil
}

// contentText is a message content's or a prompt's text: a string, text
// parts, or (completions) an array of strings.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if t, ok := wire.ContentText(raw); ok {
		return t
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "")
	}
	return ""
}

// hash canonicalises the prompt into h exactly as the gateway's proxy does
// (system prompt, then each message as role and text, developer counted as
// system, then a completions prompt).
func (r *llmRequest) hash(h *sched.BlockHasher) {
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

// header returns the value of header key (lower case) in hm: Envoy puts it
// in raw_value, older data planes in value.
func header(hm *corev3.HeaderMap, key string) string {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			if rv := h.GetRawValue(); len(rv) > 0 {
				return string(rv)
			}
			return h.GetValue()
		}
	}
	return ""
}

// resolveSLO picks the request's TTFT target as the gateway does:
// x-ttft-slo-ms, then x-slo-class, then the picker's default class.
func resolveSLO(hm *corev3.HeaderMap, defaultClass string) (time.Duration, string, error) {
	if v := header(hm, headerSLOMs); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		// Written so that NaN fails it, as does a value that rounds to no
		// time at all.
		if err != nil || !(ms > 0 && ms <= 3_600_000) || time.Duration(ms*float64(time.Millisecond)) <= 0 {
			return 0, "", fmt.Errorf("header %s: %q is not a positive number of milliseconds", headerSLOMs, v)
		}
		class := "custom"
		if c := header(hm, headerSLOClass); c != "" {
			if _, ok := sched.ClassSLO(c); ok {
				class = strings.ToLower(c)
			}
		}
		return time.Duration(ms * float64(time.Millisecond)), class, nil
	}
	c := header(hm, headerSLOClass)
	if c == "" {
		c = defaultClass
	}
	if c == "" {
		return 0, "none", nil
	}
	c, err := sched.ParseClass(c)
	if err != nil {
		return 0, "", fmt.Errorf("header %s: %w", headerSLOClass, err)
	}
	d, _ := sched.ClassSLO(c)
	return d, c, nil
}

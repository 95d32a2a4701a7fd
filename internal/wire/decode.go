package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ttft-dev/ttft/internal/sse"
)

// Usage is the token accounting a server reports.
type Usage struct {
	PromptTokens       int
	CompletionTokens   int
	CachedPromptTokens int
}

// Chunk is what one stream event meant. Text fields hold this event's new
// text on each channel.
type Chunk struct {
	Content   string
	Reasoning string
	ToolArgs  string
	// Role is set when the event announced the assistant's role (OpenAI's
	// first chunk, Anthropic's message_start): not a token.
	Role   bool
	Finish string
	Usage  *Usage
	// Err is an error the server reported inside the stream.
	Err string
	// Done marks the protocol's end of stream ([DONE], message_stop).
	Done  bool
	Model string
	// ID is the server's completion id when the event carried one (every
	// OpenAI chunk repeats it; Anthropic's message_start has it).
	ID string
	// Timings holds engine-reported per-request timings in ms (llama.cpp's
	// "timings" object), when present.
	Timings map[string]float64
}

// HasToken reports whether the event carried any generated text.
func (c *Chunk) HasToken() bool {
	return c.Content != "" || c.Reasoning != "" || c.ToolArgs != ""
}

// Decoder turns events into chunks. Decoders keep per-stream state and are
// not shared between streams.
type Decoder interface {
	Decode(ev *sse.Event, c *Chunk) error
}

// NewDecoder returns the decoder for api.
func NewDecoder(api API) Decoder {
	if api == Anthropic {
		return &anthropicDecoder{}
	}
	return &openAIDecoder{}
}

var doneMarker = []byte("[DONE]")

// openAIDecoder reads ChatCompletionChunk events (shapes.go), the usual
// token chunk on the fast path (fastpath.go).
type openAIDecoder struct{ model, id string }

func (d *openAIDecoder) Decode(ev *sse.Event, c *Chunk) error {
	*c = Chunk{}
	data := bytes.TrimSpace(ev.Data)
	if bytes.Equal(data, doneMarker) {
		c.Done = true
		return nil
	}
	if len(ev.Type) > 0 && string(ev.Type) == "error" {
		c.Err = errorText(data)
		return nil
	}
	if len(data) == 0 {
		return nil
	}
	if fastOpenAI(data, c, d) {
		return nil
	}
	*c = Chunk{}
	return decodeSlow(d, data, c)
}

// decodeSlow is the encoding/json path for every event shape.
func decodeSlow(d *openAIDecoder, data []byte, c *Chunk) error {
	var ch ChatCompletionChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return fmt.Errorf("malformed stream chunk %q: %w", truncate(data, 120), err)
	}
	c.Model, c.ID = ch.Model, ch.ID
	if len(ch.Error) > 0 && !bytes.Equal(ch.Error, []byte("null")) {
		c.Err = errorText(ch.Error)
		return nil
	}
	if ch.Object == "error" {
		c.Err = ch.Message
		if c.Err == "" {
			c.Err = "error object in stream"
		}
		return nil
	}
	for i := range ch.Choices {
		cc := &ch.Choices[i]
		if cc.Delta.Role != "" {
			c.Role = true
		}
		c.Content += cc.Delta.Content + cc.Text
		c.Reasoning += cc.Delta.ReasoningContent + cc.Delta.Reasoning
		for _, tc := range cc.Delta.ToolCalls {
			c.ToolArgs += tc.Function.Arguments
		}
		if cc.FinishReason != nil && *cc.FinishReason != "" {
			c.Finish = *cc.FinishReason
		}
	}
	if ch.Usage != nil {
		c.Usage = ch.Usage.usage()
	}
	if len(ch.Timings) > 0 {
		c.Timings = ch.Timings
	}
	return nil
}

// anthropicDecoder reads AnthropicStreamEvent events (shapes.go).
type anthropicDecoder struct{ usage Usage }

func (d *anthropicDecoder) Decode(ev *sse.Event, c *Chunk) error {
	*c = Chunk{}
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 {
		return nil
	}
	var e AnthropicStreamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("malformed %s event %q: %w", eventName(ev), truncate(data, 120), err)
	}
	typ := e.Type
	if typ == "" {
		typ = string(ev.Type)
	}
	switch typ {
	case "message_start":
		c.Role = true
		if e.Message != nil {
			c.Model, c.ID = e.Message.Model, e.Message.ID
			if u := e.Message.Usage; u != nil {
				// Anthropic counts cached reads apart from input_tokens.
				d.usage.PromptTokens = u.PromptTokens()
				d.usage.CachedPromptTokens = u.CacheReadInputTokens
				d.usage.CompletionTokens = u.OutputTokens
			}
		}
	case "content_block_start":
		if b := e.ContentBlock; b != nil && b.Text != "" {
			c.Content = b.Text
		}
	case "content_block_delta":
		if dd := e.Delta; dd != nil {
			switch dd.Type {
			case "thinking_delta":
				c.Reasoning = dd.Thinking
			case "input_json_delta":
				c.ToolArgs = dd.PartialJSON
			default:
				c.Content = dd.Text
			}
		}
	case "message_delta":
		if e.Delta != nil && e.Delta.StopReason != "" {
			c.Finish = e.Delta.StopReason
		}
		if e.Usage != nil {
			d.usage.CompletionTokens = e.Usage.OutputTokens
			if e.Usage.InputTokens > 0 {
				d.usage.PromptTokens = e.Usage.InputTokens
			}
			u := d.usage
			c.Usage = &u
		}
	case "message_stop":
		c.Done = true
	case "error":
		if e.Error != nil {
			c.Err = e.Error.Type + ": " + e.Error.Message
		} else {
			c.Err = string(truncate(data, 200))
		}
	}
	return nil
}

func eventName(ev *sse.Event) string {
	if len(ev.Type) == 0 {
		return "message"
	}
	return string(ev.Type)
}

func errorText(raw []byte) string {
	var obj struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Error   *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	if json.Unmarshal(raw, &obj) == nil {
		if obj.Error != nil && obj.Error.Message != "" {
			return obj.Error.Message
		}
		if obj.Message != "" {
			if obj.Type != "" {
				return obj.Type + ": " + obj.Message
			}
			return obj.Message
		}
	}
	return string(truncate(raw, 200))
}

func truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	return append(b[:n:n], "..."...)
}

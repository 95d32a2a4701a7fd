package wire

import (
	"encoding/json"
	"fmt"
)

// DecodeWhole reads a non-streamed JSON completion (a server or proxy that
// ignored stream: true) into one chunk: all the text at once, with usage.
// The answers are ChatCompletion and AnthropicMessage (shapes.go).
func DecodeWhole(api API, body []byte) (Chunk, error) {
	var c Chunk
	if api == Anthropic {
		var m AnthropicMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return c, fmt.Errorf("malformed JSON completion %q: %w", truncate(body, 120), err)
		}
		if m.Error != nil {
			c.Err = m.Error.Message
			return c, nil
		}
		c.Model, c.ID, c.Finish, c.Done = m.Model, m.ID, m.StopReason, true
		for _, b := range m.Content {
			c.Content += b.Text
			c.Reasoning += b.Thinking
		}
		if u := m.Usage; u != nil {
			c.Usage = &Usage{PromptTokens: u.InputTokens + u.CacheReadInputTokens, CompletionTokens: u.OutputTokens, CachedPromptTokens: u.CacheReadInputTokens}
		}
		return c, nil
	}
	var m ChatCompletion
	if err := json.Unmarshal(body, &m); err != nil {
		return c, fmt.Errorf("malformed JSON completion %q: %w", truncate(body, 120), err)
	}
	if len(m.Error) > 0 && string(m.Error) != "null" {
		c.Err = errorText(m.Error)
		return c, nil
	}
	c.Model, c.ID, c.Done = m.Model, m.ID, true
	for _, ch := range m.Choices {
		c.Content += ch.Message.Content + ch.Text
		c.Reasoning += ch.Message.ReasoningContent + ch.Message.Reasoning
		for _, tc := range ch.Message.ToolCalls {
			c.ToolArgs += tc.Function.Arguments
		}
		if ch.FinishReason != "" {
			c.Finish = ch.FinishReason
		}
	}
	if m.Usage != nil {
		c.Usage = m.Usage.usage()
	}
	return c, nil
}

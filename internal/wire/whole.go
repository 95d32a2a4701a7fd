package wire

import (
	"encoding/json"
	"fmt"
)

// DecodeWhole reads a non-streamed JSON completion (a server or proxy that
// ignored stream: true) into one chunk: all the text at once, with usage.
func DecodeWhole(api API, body []byte) (Chunk, error) {
	var c Chunk
	if api == Anthropic {
		var m struct {
			Model   string `json:"model"`
			Content []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				Thinking string `json:"thinking"`
			} `json:"content"`
			StopReason string `json:"stop_reason"`
			Usage      *struct {
				InputTokens          int `json:"input_tokens"`
				OutputTokens         int `json:"output_tokens"`
				CacheReadInputTokens int `json:"cache_read_input_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			return c, fmt.Errorf("malformed JSON completion %q: %w", truncate(body, 120), err)
		}
		if m.Error != nil {
			c.Err = m.Error.Message
			return c, nil
		}
		c.Model, c.Finish, c.Done = m.Model, m.StopReason, true
		for _, b := range m.Content {
			c.Content += b.Text
			c.Reasoning += b.Thinking
		}
		if u := m.Usage; u != nil {
			c.Usage = &Usage{PromptTokens: u.InputTokens + u.CacheReadInputTokens, CompletionTokens: u.OutputTokens, CachedPromptTokens: u.CacheReadInputTokens}
		}
		return c, nil
	}
	var m struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
				Reasoning        string `json:"reasoning"`
				ToolCalls        []struct {
					Function struct {
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return c, fmt.Errorf("malformed JSON completion %q: %w", truncate(body, 120), err)
	}
	if len(m.Error) > 0 && string(m.Error) != "null" {
		c.Err = errorText(m.Error)
		return c, nil
	}
	c.Model, c.Done = m.Model, true
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
	if u := m.Usage; u != nil {
		c.Usage = &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			c.Usage.CachedPromptTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return c, nil
}

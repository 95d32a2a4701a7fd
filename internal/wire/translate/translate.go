package translate

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/wire"
)

// The two APIs translated between: OpenAI chat completions and Anthropic
// messages (OpenAI completions have no Anthropic equivalent).
const apiOpenAI, apiAnthropic = wire.OpenAIChat, wire.Anthropic

// defaultAnthropicMaxTokens is sent when an OpenAI request sets no output
// limit: the Messages API requires max_tokens, and OpenAI's default is "as
// many as fit", which 4096 approximates for chat answers without letting a
// runaway answer hold a slot for the whole context.
const defaultAnthropicMaxTokens = 4096

func checkAPIs(from, to wire.API) error {
	for _, a := range [2]wire.API{from, to} {
		if a != apiOpenAI && a != apiAnthropic {
			return fmt.Errorf("unknown API %q (want %q or %q)", a, apiOpenAI, apiAnthropic)
		}
	}
	return nil
}

// Request converts a chat request body from one API to the other
// (wire.OpenAIChat or wire.Anthropic). It returns the new body, or an
// error naming the field that has no equivalent. A body already in the
// target API (from == to) is returned unchanged.
//
// Fields are matched as encoding/json matches them (case-insensitively, the
// last of repeated keys winning), like the gateway's request reader, so
// that the gateway's reading of a request and its translation never
// disagree (the gateway's FuzzTranslateRequest checks it).
func Request(body []byte, from, to wire.API) ([]byte, error) {
	if err := checkAPIs(from, to); err != nil {
		return nil, err
	}
	switch {
	case from == to:
		return body, nil
	case from == apiAnthropic:
		return anthropicToOpenAIRequest(body)
	default:
		return openAIToAnthropicRequest(body)
	}
}

// present reports whether a raw field was given a value other than null
// (or an empty array, which means "none" for tools and the like).
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return false
	}
	if raw[0] == '[' && bytes.Equal(bytes.Join(bytes.Fields(raw), nil), []byte("[]")) {
		return false
	}
	return true
}

// orNil drops an explicit null so that it is not forwarded as one.
func orNil(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	return raw
}

// marshalJSON encodes v without HTML escaping (<, >, & stay as they are:
// the text goes to an API client, not into a web page) and without the
// encoder's trailing newline.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ---- Anthropic request → OpenAI request ----

// anthropicRequestIn is the Anthropic request read strictly: fields kept
// raw to refuse (tools) or pass on as given, so not a shared wire type.
type anthropicRequestIn struct {
	Model         string             `json:"model"`
	Stream        *bool              `json:"stream"`
	MaxTokens     *int               `json:"max_tokens"`
	System        json.RawMessage    `json:"system"`
	Messages      []wire.ChatMessage `json:"messages"`
	Temperature   json.RawMessage    `json:"temperature"`
	TopP          json.RawMessage    `json:"top_p"`
	TopK          json.RawMessage    `json:"top_k"`
	StopSequences []string           `json:"stop_sequences"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	// Dropped: "thinking" (OpenAI-compatible servers decide reasoning by
	// model, and vLLM streams it regardless), "service_tier", "container",
	// "mcp_servers" and any other field OpenAI lacks.
}

func anthropicToOpenAIRequest(body []byte) ([]byte, error) {
	var in anthropicRequestIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decoding Anthropic request: %w", err)
	}
	if present(in.Tools) {
		return nil, errors.New("tools: tool definitions cannot be translated to the OpenAI API (tool calling is not translated)")
	}
	if present(in.ToolChoice) {
		return nil, errors.New("tool_choice: cannot be translated to the OpenAI API (tool calling is not translated)")
	}
	out := wire.ChatCompletionRequestOut{
		Model:       in.Model,
		Messages:    make([]wire.TextMessage, 0, len(in.Messages)+1),
		MaxTokens:   in.MaxTokens,
		Temperature: orNil(in.Temperature),
		TopP:        orNil(in.TopP),
		TopK:        orNil(in.TopK),
		Stop:        in.StopSequences,
	}
	if present(in.System) {
		s, err := anthropicText(in.System, "system")
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, wire.TextMessage{Role: "system", Content: s})
	}
	for i, m := range in.Messages {
		field := "messages[" + strconv.Itoa(i) + "]"
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("%s.role: %q is not an Anthropic role (want user or assistant)", field, m.Role)
		}
		s, err := anthropicText(m.Content, field+".content")
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, wire.TextMessage{Role: m.Role, Content: s})
	}
	if in.Stream != nil && *in.Stream {
		out.Stream = true
		// Without include_usage an OpenAI stream never reports output
		// tokens, which the Anthropic client's message_delta must carry.
		out.StreamOptions = &wire.StreamOptions{IncludeUsage: true}
	}
	if in.Metadata != nil {
		out.User = in.Metadata.UserID
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, fmt.Errorf("encoding OpenAI request: %w", err)
	}
	return b, nil
}

// anthropicText flattens an Anthropic content or system value — a string or
// an array of blocks — into the string OpenAI takes. Text blocks are joined
// with nothing between them, as the gateway's prompt hashing joins them, so that a prompt
// hashes alike before and after translation. Thinking blocks of earlier
// assistant turns are dropped: OpenAI has no way to send reasoning back.
func anthropicText(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return s, nil
	}
	var blocks []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &blocks) != nil {
		return "", fmt.Errorf("%s: want a string or an array of content blocks", field)
	}
	var b strings.Builder
	for j, bl := range blocks {
		switch bl.Type {
		case "text":
			if bl.Text != nil {
				b.WriteString(*bl.Text)
			}
		case "thinking", "redacted_thinking":
		default:
			return "", fmt.Errorf("%s[%d]: %q blocks cannot be translated to the OpenAI API", field, j, bl.Type)
		}
	}
	return b.String(), nil
}

// ---- OpenAI request → Anthropic request ----

// openAIMessageIn is a wire.ChatMessage with the fields it must refuse.
type openAIMessageIn struct {
	wire.ChatMessage
	ToolCalls    json.RawMessage `json:"tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"`
}

// openAIRequestIn is the OpenAI request read strictly: fields kept raw or as
// pointers to refuse what Anthropic cannot carry and pass on the rest as
// given, so not wire.ChatCompletionRequest (a server's reading).
type openAIRequestIn struct {
	Model               string            `json:"model"`
	Stream              *bool             `json:"stream"`
	Messages            []openAIMessageIn `json:"messages"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Temperature         json.RawMessage   `json:"temperature"`
	TopP                json.RawMessage   `json:"top_p"`
	TopK                json.RawMessage   `json:"top_k"` // vLLM's extension
	Stop                json.RawMessage   `json:"stop"`
	N                   *float64          `json:"n"`
	Tools               json.RawMessage   `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	Functions           json.RawMessage   `json:"functions"`
	FunctionCall        json.RawMessage   `json:"function_call"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         json.RawMessage   `json:"top_logprobs"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Audio json.RawMessage `json:"audio"`
	// Dropped silently, having no Anthropic equivalent that changes the
	// answer's text: stream_options (Anthropic streams always carry usage),
	// user (Anthropic's metadata.user_id is meant for an opaque id, and
	// OpenAI's "user" is not guaranteed to be one), seed, presence_penalty,
	// frequency_penalty, logit_bias, parallel_tool_calls, reasoning_effort,
	// service_tier, store, metadata, modalities, prediction, and vLLM's
	// extensions other than top_k.
}

const noTools = " (tool calling is not translated)"

func openAIToAnthropicRequest(body []byte) ([]byte, error) {
	var in openAIRequestIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decoding OpenAI request: %w", err)
	}
	if err := untranslatableOpenAI(&in); err != nil {
		return nil, err
	}
	out := wire.AnthropicMessagesRequestOut{
		Model:       in.Model,
		MaxTokens:   defaultAnthropicMaxTokens,
		Temperature: orNil(in.Temperature),
		TopP:        orNil(in.TopP),
		TopK:        orNil(in.TopK),
		Stream:      in.Stream != nil && *in.Stream,
	}
	// OpenAI's temperature runs to 2 and Anthropic's to 1: passed as is, so
	// that the backend's own validation message reaches the client rather
	// than a silently clamped value.
	switch {
	case in.MaxCompletionTokens != nil:
		out.MaxTokens = *in.MaxCompletionTokens
	case in.MaxTokens != nil:
		out.MaxTokens = *in.MaxTokens
	}
	stop, err := stopSequences(in.Stop)
	if err != nil {
		return nil, err
	}
	out.StopSequences = stop
	if out.System, out.Messages, err = anthropicTurns(in.Messages); err != nil {
		return nil, err
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, fmt.Errorf("encoding Anthropic request: %w", err)
	}
	return b, nil
}

// untranslatableOpenAI refuses, naming the field, what the Anthropic API
// cannot carry.
func untranslatableOpenAI(in *openAIRequestIn) error {
	switch {
	case in.N != nil && *in.N > 1:
		return fmt.Errorf("n: %v choices cannot be translated to the Anthropic API, which returns one", *in.N)
	case present(in.Tools):
		return errors.New("tools: cannot be translated to the Anthropic API" + noTools)
	case present(in.ToolChoice):
		return errors.New("tool_choice: cannot be translated to the Anthropic API" + noTools)
	case present(in.Functions):
		return errors.New("functions: cannot be translated to the Anthropic API" + noTools)
	case present(in.FunctionCall):
		return errors.New("function_call: cannot be translated to the Anthropic API" + noTools)
	case in.Logprobs != nil && *in.Logprobs:
		return errors.New("logprobs: the Anthropic API returns no log probabilities")
	case present(in.TopLogprobs):
		return errors.New("top_logprobs: the Anthropic API returns no log probabilities")
	case in.ResponseFormat != nil && in.ResponseFormat.Type != "" && in.ResponseFormat.Type != "text":
		return fmt.Errorf("response_format: %q cannot be translated to the Anthropic API", in.ResponseFormat.Type)
	case present(in.Audio):
		return errors.New("audio: the Anthropic API has no audio output")
	}
	return nil
}

// anthropicTurns turns OpenAI chat messages into Anthropic's system prompt
// and alternating turns. System and developer messages, wherever they
// are, become the top-level system prompt: Anthropic has no system turns.
func anthropicTurns(msgs []openAIMessageIn) (string, []wire.AnthropicMessageParamOut, error) {
	var system []string
	type run struct {
		role  string
		texts []string
	}
	var runs []run
	for i, m := range msgs {
		field := "messages[" + strconv.Itoa(i) + "]"
		text, err := openAITurnText(m, field)
		if err != nil {
			return "", nil, err
		}
		if m.Role == "system" || m.Role == "developer" {
			system = append(system, text)
			continue
		}
		if len(runs) == 0 && m.Role == "assistant" {
			return "", nil, fmt.Errorf("%s: the Anthropic API requires the conversation to start with a user message, not an assistant one", field)
		}
		// Anthropic requires user and assistant turns to alternate:
		// consecutive messages of one role become one message with a
		// text block each, keeping their boundaries.
		if n := len(runs); n > 0 && runs[n-1].role == m.Role {
			runs[n-1].texts = append(runs[n-1].texts, text)
			continue
		}
		runs = append(runs, run{m.Role, []string{text}})
	}
	if len(runs) == 0 {
		return "", nil, errors.New("messages: the Anthropic API requires at least one user message")
	}
	out := make([]wire.AnthropicMessageParamOut, len(runs))
	for i, r := range runs {
		out[i] = anthropicTurn(r.role, r.texts)
	}
	return strings.Join(system, "\n\n"), out, nil
}

// openAITurnText is one OpenAI message's text, refusing roles and fields
// that cannot be translated.
func openAITurnText(m openAIMessageIn, field string) (string, error) {
	switch m.Role {
	case "system", "developer", "user", "assistant":
	case "tool", "function":
		return "", fmt.Errorf("%s.role: %q messages cannot be translated to the Anthropic API%s", field, m.Role, noTools)
	default:
		return "", fmt.Errorf("%s.role: %q is not an OpenAI chat role", field, m.Role)
	}
	if present(m.ToolCalls) {
		return "", fmt.Errorf("%s.tool_calls: cannot be translated to the Anthropic API%s", field, noTools)
	}
	if present(m.FunctionCall) {
		return "", fmt.Errorf("%s.function_call: cannot be translated to the Anthropic API%s", field, noTools)
	}
	return openAIText(m.Content, field+".content")
}

// anthropicTurn is one Anthropic message of a role's consecutive texts:
// one string, or a text block each (Anthropic refuses empty blocks).
func anthropicTurn(role string, texts []string) wire.AnthropicMessageParamOut {
	if len(texts) == 1 {
		return wire.AnthropicMessageParamOut{Role: role, Content: texts[0]}
	}
	blocks := make([]wire.AnthropicTextBlock, 0, len(texts))
	for _, t := range texts {
		if t != "" {
			blocks = append(blocks, wire.AnthropicTextBlock{Type: "text", Text: t})
		}
	}
	if len(blocks) == 0 {
		return wire.AnthropicMessageParamOut{Role: role, Content: ""}
	}
	return wire.AnthropicMessageParamOut{Role: role, Content: blocks}
}

// stopSequences reads OpenAI's "stop": a string or an array of strings.
// Empty strings are dropped: they stop nothing in OpenAI and Anthropic
// refuses them.
func stopSequences(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("stop: %w", err)
		}
		list = []string{s}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("stop: want a string or an array of strings")
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// openAIText flattens an OpenAI message content — a string, null (an
// assistant turn that only called tools) or an array of parts — joining
// text parts with nothing between them, as the gateway's prompt hashing does.
func openAIText(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return s, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return "", fmt.Errorf("%s: want a string or an array of content parts", field)
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text":
			if p.Text != nil {
				b.WriteString(*p.Text)
			}
		case "refusal": // an earlier assistant turn's refusal is its text
			if p.Refusal != nil {
				b.WriteString(*p.Refusal)
			}
		default:
			return "", fmt.Errorf("%s[%d]: %q parts cannot be translated to the Anthropic API", field, j, p.Type)
		}
	}
	return b.String(), nil
}

// ---- Non-streamed answers ----

// Response converts a complete non-streamed success answer
// (chat.completion object <-> message object), from the backend's API to
// the client's. An answer already in the client's API is returned as is.
func Response(body []byte, from, to wire.API) ([]byte, error) {
	return responseAt(body, from, to, time.Now())
}

// responseAt is Response with the time for OpenAI's "created" field.
func responseAt(body []byte, from, to wire.API, now time.Time) ([]byte, error) {
	if err := checkAPIs(from, to); err != nil {
		return nil, err
	}
	switch {
	case from == to:
		return body, nil
	case from == apiOpenAI:
		return openAIToAnthropicResponse(body)
	default:
		return anthropicToOpenAIResponse(body, now)
	}
}

// openAICompletionIn is a chat.completion read for translation: tool calls
// kept raw to refuse them, content as a pointer (null is none), vLLM's
// stop_reason raw; so not wire.ChatCompletion (the client's reading).
type openAICompletionIn struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content          *string         `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			FunctionCall     json.RawMessage `json:"function_call"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
		// vLLM's stop_reason: the stop string that ended the answer, or
		// the id of the stop token (a number), or null.
		StopReason json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *wire.CompletionUsage `json:"usage"`
}

func openAIToAnthropicResponse(body []byte) ([]byte, error) {
	var in openAICompletionIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decoding OpenAI chat.completion: %w", err)
	}
	ci := -1
	for i := range in.Choices {
		if in.Choices[i].Index == 0 {
			ci = i
			break
		}
	}
	if ci < 0 {
		return nil, errors.New("choices: no choice 0 in the OpenAI answer")
	}
	c := &in.Choices[ci]
	if present(c.Message.ToolCalls) || present(c.Message.FunctionCall) {
		return nil, errors.New("choices[0].message.tool_calls: tool calls cannot be translated to the Anthropic API (tool calling is not translated)")
	}
	out := wire.AnthropicMessageOut{
		ID: withPrefix(in.ID, "msg_"), Type: "message", Role: "assistant", Model: in.Model,
		Content: []wire.AnthropicContentBlockOut{},
	}
	if r := c.Message.ReasoningContent + c.Message.Reasoning; r != "" {
		// The signature proves a block came from Anthropic's own model;
		// there is none to give for an open model's reasoning.
		empty := ""
		out.Content = append(out.Content, wire.AnthropicContentBlockOut{Type: "thinking", Thinking: &r, Signature: &empty})
	}
	text := ""
	if c.Message.Content != nil {
		text = *c.Message.Content
	}
	if text != "" || len(out.Content) == 0 {
		out.Content = append(out.Content, wire.AnthropicContentBlockOut{Type: "text", Text: &text})
	}
	finish := ""
	if c.FinishReason != nil {
		finish = *c.FinishReason
	}
	sr, seq := anthropicStopReason(finish, c.StopReason)
	out.StopReason, out.StopSequence = &sr, seq
	if u := in.Usage; u != nil {
		out.Usage = anthropicUsage(u)
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, fmt.Errorf("encoding Anthropic message: %w", err)
	}
	return b, nil
}

// anthropicUsage converts OpenAI usage. Anthropic counts cache reads apart
// from input_tokens; OpenAI's prompt_tokens includes them.
func anthropicUsage(u *wire.CompletionUsage) wire.AnthropicUsageOut {
	out := wire.AnthropicUsageOut{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens > 0 && d.CachedTokens <= u.PromptTokens {
		out.InputTokens -= d.CachedTokens
		out.CacheReadInputTokens = d.CachedTokens
	}
	return out
}

// anthropicStopReason maps an OpenAI finish_reason. vLLM reports a stop
// string's hit as "stop" with the string in its stop_reason, which is
// Anthropic's stop_sequence; a plain end of turn is end_turn.
func anthropicStopReason(finish string, vllmStop json.RawMessage) (string, *string) {
	switch finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	}
	var s string
	if bytes.HasPrefix(bytes.TrimSpace(vllmStop), []byte(`"`)) && json.Unmarshal(vllmStop, &s) == nil && s != "" {
		return "stop_sequence", &s
	}
	return "end_turn", nil
}

// openAIFinishReason maps an Anthropic stop_reason.
func openAIFinishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn and any newer reason
}

func openAIUsage(u *wire.AnthropicUsage) *wire.CompletionUsageOut {
	out := &wire.CompletionUsageOut{PromptTokens: u.PromptTokens(), CompletionTokens: u.OutputTokens}
	out.TotalTokens = out.PromptTokens + out.CompletionTokens
	if u.CacheReadInputTokens > 0 {
		out.PromptTokensDetails = &wire.PromptTokensDetails{CachedTokens: u.CacheReadInputTokens}
	}
	return out
}

func anthropicToOpenAIResponse(body []byte, now time.Time) ([]byte, error) {
	var in wire.AnthropicMessage
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decoding Anthropic message: %w", err)
	}
	var text, reasoning strings.Builder
	for i, b := range in.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "thinking":
			reasoning.WriteString(b.Thinking)
		case "redacted_thinking": // encrypted: nothing to show
		default:
			return nil, fmt.Errorf("content[%d]: %q blocks cannot be translated to the OpenAI API", i, b.Type)
		}
	}
	out := wire.ChatCompletionOut{
		ID: withPrefix(in.ID, "chatcmpl-"), Object: "chat.completion",
		Created: now.Unix(), Model: in.Model,
	}
	out.Choices = make([]wire.ChatCompletionChoiceOut, 1)
	ch := &out.Choices[0]
	ch.Message.Role = "assistant"
	ch.Message.Content = text.String()
	ch.Message.ReasoningContent = reasoning.String()
	ch.FinishReason = openAIFinishReason(in.StopReason)
	if in.Usage != nil {
		out.Usage = openAIUsage(in.Usage)
	}
	b, err := marshalJSON(out)
	if err != nil {
		return nil, fmt.Errorf("encoding OpenAI chat.completion: %w", err)
	}
	return b, nil
}

// withPrefix keeps a backend's id, adding the client API's usual prefix
// (some clients log or check it); an answer without one gets a random id.
func withPrefix(id, prefix string) string {
	if id == "" {
		var b [12]byte
		rand.Read(b[:])
		return prefix + hex.EncodeToString(b[:])
	}
	if strings.HasPrefix(id, prefix) {
		return id
	}
	return prefix + id
}

// ---- Errors ----

// Error converts a backend's non-2xx JSON error body into the client's
// API's error shape, keeping the message (best effort: unknown shapes are
// wrapped as the message text).
func Error(body []byte, status int, from, to wire.API) []byte {
	msg, _ := errorMessage(body)
	if msg == "" {
		msg = http.StatusText(status)
		if msg == "" {
			msg = "backend error " + strconv.Itoa(status)
		}
	}
	var v any
	if to == apiAnthropic {
		v = wire.AnthropicErrorBody{Type: "error", Error: wire.AnthropicError{Type: anthropicErrorType(status), Message: msg}}
	} else {
		v = wire.OpenAIErrorBodyOut{Error: wire.OpenAIErrorOut{Message: msg, Type: openAIErrorType(status), Code: status}}
	}
	b, err := marshalJSON(v)
	if err != nil { // cannot happen: strings and ints only
		return []byte(`{"error":{"message":"backend error"}}`)
	}
	return b
}

// maxErrorText bounds a non-JSON error body quoted as the message (an HTML
// page from a proxy, say).
const maxErrorText = 2000

// errorMessage finds the message in the error shapes backends use:
// {"error":{"message":..}} (OpenAI, Anthropic, SGLang, newer vLLM),
// {"error":"msg"} (TGI), {"object":"error","message":..} (older vLLM),
// {"message":..} and FastAPI's {"detail":..}. Anything else is quoted
// whole, trimmed. code is a numeric "code" when the shape has one.
func errorMessage(body []byte) (msg string, code int) {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
		Code    json.RawMessage `json:"code"`
	}
	body = bytes.TrimSpace(body)
	if json.Unmarshal(body, &e) == nil {
		code = rawInt(e.Code)
		if present(e.Error) {
			var s string
			if json.Unmarshal(e.Error, &s) == nil {
				return s, code
			}
			var inner struct {
				Message string          `json:"message"`
				Code    json.RawMessage `json:"code"`
			}
			if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
				if c := rawInt(inner.Code); c != 0 {
					code = c
				}
				return inner.Message, code
			}
			return clip(string(e.Error)), code
		}
		if e.Message != "" {
			return e.Message, code
		}
		if present(e.Detail) {
			var s string
			if json.Unmarshal(e.Detail, &s) == nil {
				return s, code
			}
			return clip(string(e.Detail)), code
		}
	}
	return clip(strings.ToValidUTF8(string(body), "\uFFFD")), 0
}

func rawInt(raw json.RawMessage) int {
	n, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
	if err != nil {
		return 0
	}
	return n
}

func clip(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return strings.ToValidUTF8(s[:maxErrorText], "") + "..."
}

// anthropicErrorType is the error type Anthropic documents for a status.
func anthropicErrorType(status int) string {
	switch status {
	case 400, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	case 504:
		return "timeout_error"
	}
	return "api_error"
}

// openAIErrorType is the error type OpenAI uses for a status.
func openAIErrorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// ---- Streams ----

// Stream converts a backend's SSE stream, one complete event at a time,
// into the client's API's stream. It holds one stream's state and is not
// shared between streams.
type Stream struct {
	from, to wire.API
	model    string // the client's model, for events that name none

	started bool // message_start / the role chunk has been sent
	done    bool // the client's stream has been ended properly
	failed  bool // an error event ended the client's stream

	id      string
	created int64

	// OpenAI → Anthropic: the open content block and its index.
	block      int // blockNone, blockText or blockThinking
	blockIndex int
	finish     string
	stopSeq    *string
	usage      wire.AnthropicUsage // input and output tokens as known so far

	// Anthropic → OpenAI.
	sentFinish bool

	// Per-token fast paths (OpenAI backend): the usual chunk is read
	// without encoding/json.
	fast   wire.FastOpenAIChunk
	chunk  wire.Chunk
	noFast bool             // tests: the full path only, to compare with the fast one
	now    func() time.Time // for OpenAI's "created" field
}

const (
	blockNone = iota
	blockText
	blockThinking
)

// NewStream returns a translator from the backend's API to the client's.
// model names the model in the client's events until the backend names
// one itself. With from == to events pass unchanged.
func NewStream(from, to wire.API, model string) *Stream {
	return &Stream{from: from, to: to, model: model, now: time.Now}
}

// Done reports whether the client's stream has been properly ended (after
// the backend's end marker: OpenAI "data: [DONE]" or Anthropic message_stop).
func (t *Stream) Done() bool { return t.done }

// Event appends to dst the client's events for one complete backend event ev
// (as the gateway's event splitter yields it: bytes including the blank
// line; LF, CRLF or CR line ends) and returns dst. Events with no client equivalent (ping,
// comments, a role-only first chunk once message_start was sent) produce
// nothing or what the client's stream needs at that point.
//
// After the end of the stream or an error event, further events produce
// nothing: the client's stream is over.
func (t *Stream) Event(dst, ev []byte) []byte {
	if t.done || t.failed {
		return dst
	}
	name, data, ok := sseEventFields(ev)
	if t.from == t.to || (t.from != apiOpenAI && t.from != apiAnthropic) {
		if ok && isEndMarker(t.from == apiAnthropic, name, data) {
			t.done = true
		}
		return append(dst, ev...)
	}
	if !ok { // comments, id- or retry-only events
		return dst
	}
	data = bytes.TrimSpace(data)
	if t.from == apiOpenAI {
		return t.openAIToAnthropic(dst, name, data)
	}
	return t.anthropicToOpenAI(dst, name, data)
}

// isEndMarker reports whether an event ends its API's stream.
func isEndMarker(anthropic bool, name string, data []byte) bool {
	data = bytes.TrimSpace(data)
	if !anthropic {
		return string(data) == "[DONE]"
	}
	if name == "message_stop" {
		return true
	}
	var e struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(data, &e) == nil && e.Type == "message_stop"
}

// sseEventFields reads an event's name and data (data lines joined with
// "\n", as the SSE spec joins them); ok is false when it has no data line.
func sseEventFields(ev []byte) (name string, data []byte, ok bool) {
	for len(ev) > 0 {
		var line []byte
		i := bytes.IndexAny(ev, "\r\n")
		if i < 0 {
			line, ev = ev, nil
		} else {
			line = ev[:i]
			if ev[i] == '\r' && i+1 < len(ev) && ev[i+1] == '\n' {
				i++
			}
			ev = ev[i+1:]
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if j := bytes.IndexByte(line, ':'); j >= 0 {
			field, value = line[:j], line[j+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if ok {
				data = append(data, '\n')
			}
			data = append(data, value...)
			ok = true
		}
	}
	return name, data, ok
}

// appendSSE appends one event: "event: NAME\n" when name is set, then
// "data: JSON\n\n". The JSON has no raw line breaks (encoding/json escapes
// them in strings), so one data line carries it.
func appendSSE(dst []byte, name string, v any) []byte {
	b, err := marshalJSON(v)
	if err != nil { // cannot happen: the event types hold strings and ints
		b = []byte(`{}`)
	}
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// -- OpenAI backend, Anthropic client --

// openAIChunkIn is a chunk read for translation, which needs id, index and
// vLLM's stop_reason: wire.ChatCompletionChunk leaves them out to match the
// client's fast path.
// looseString reads a JSON string and takes any other value as empty, and
// looseInt a number (else 0): fields a stream event's translation only
// copies must not fail an event that the per-token fast path, which skips
// them, passes (FuzzTranslateFastPath).
type (
	looseString string
	looseInt    int
)

func (s *looseString) UnmarshalJSON(b []byte) error {
	var v string
	if json.Unmarshal(b, &v) == nil {
		*s = looseString(v)
	}
	return nil
}

func (n *looseInt) UnmarshalJSON(b []byte) error {
	var v int
	if json.Unmarshal(b, &v) == nil {
		*n = looseInt(v)
	}
	return nil
}

type openAIChunkIn struct {
	ID      looseString `json:"id"`
	Model   string      `json:"model"`
	Choices []struct {
		Index looseInt `json:"index"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage   *wire.CompletionUsage `json:"usage"`
	Error   json.RawMessage       `json:"error"`
	Object  string                `json:"object"`
	Message string                `json:"message"`
	Code    json.RawMessage       `json:"code"`
}

func (t *Stream) openAIToAnthropic(dst []byte, name string, data []byte) []byte {
	if string(data) == "[DONE]" {
		return t.endAnthropic(dst)
	}
	if len(data) == 0 {
		return dst
	}
	if name == "error" {
		msg, code := errorMessage(data)
		return t.failAnthropic(dst, code, msg)
	}
	if t.started && name == "" && !t.noFast && t.fast.Decode(data, &t.chunk) {
		// A plain token chunk (no role, finish, usage or error: those take
		// the full path below).
		if c := &t.chunk; !c.Role && c.Finish == "" && c.Usage == nil && c.Err == "" && c.ToolArgs == "" && c.Timings == nil {
			if c.Reasoning != "" {
				dst = t.anthropicDelta(dst, blockThinking, c.Reasoning)
			}
			if c.Content != "" {
				dst = t.anthropicDelta(dst, blockText, c.Content)
			}
			return dst
		}
	}
	var c openAIChunkIn
	if err := json.Unmarshal(data, &c); err != nil {
		return t.failAnthropic(dst, 0, "malformed event from the OpenAI backend: "+err.Error())
	}
	if present(c.Error) || c.Object == "error" {
		msg, code := errorMessage(data)
		return t.failAnthropic(dst, code, msg)
	}
	if c.Usage != nil {
		u := anthropicUsage(c.Usage)
		t.usage.InputTokens, t.usage.OutputTokens = u.InputTokens, u.OutputTokens
		t.usage.CacheReadInputTokens = u.CacheReadInputTokens
	}
	dst = t.startAnthropic(dst, string(c.ID), c.Model)
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 { // n > 1 is refused in requests; ignore strays
			continue
		}
		if r := ch.Delta.ReasoningContent + ch.Delta.Reasoning; r != "" {
			dst = t.anthropicDelta(dst, blockThinking, r)
		}
		if ch.Delta.Content != "" {
			dst = t.anthropicDelta(dst, blockText, ch.Delta.Content)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
			_, t.stopSeq = anthropicStopReason(t.finish, ch.StopReason)
		}
	}
	return dst
}

// startAnthropic sends message_start before the first thing the client
// sees. Input tokens are rarely known yet (OpenAI reports usage at the
// end); message_delta carries them then.
func (t *Stream) startAnthropic(dst []byte, id, model string) []byte {
	if t.started {
		return dst
	}
	t.started = true
	var e wire.AnthropicMessageStartOut
	e.Type = "message_start"
	e.Message.ID = withPrefix(id, "msg_")
	e.Message.Type, e.Message.Role = "message", "assistant"
	e.Message.Model = model
	if model == "" {
		e.Message.Model = t.model
	}
	e.Message.Content = []wire.AnthropicContentBlockOut{}
	e.Message.Usage = wire.AnthropicUsageOut{InputTokens: t.usage.InputTokens, CacheReadInputTokens: t.usage.CacheReadInputTokens}
	return appendSSE(dst, "message_start", e)
}

// anthropicDelta sends text on a block of kind, opening it (and closing
// the other kind's block) first when needed.
func (t *Stream) anthropicDelta(dst []byte, kind int, text string) []byte {
	if t.block != kind {
		dst = t.closeBlock(dst)
		t.block = kind
		empty := ""
		b := wire.AnthropicContentBlockOut{Type: "text", Text: &empty}
		if kind == blockThinking {
			b = wire.AnthropicContentBlockOut{Type: "thinking", Thinking: &empty, Signature: &empty}
		}
		dst = appendSSE(dst, "content_block_start", wire.AnthropicBlockStartOut{Type: "content_block_start", Index: t.blockIndex, ContentBlock: b})
	}
	// The per-token event, written directly: the bytes encoding/json would
	// give for wire.AnthropicBlockDeltaOut (marshalJSON: no HTML escaping),
	// without its reflection and allocations on every token.
	dst = append(dst, `event: content_block_delta
data: {"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(t.blockIndex), 10)
	if kind == blockThinking {
		dst = append(dst, `,"delta":{"type":"thinking_delta","thinking":`...)
	} else {
		dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
	}
	dst = jsonscan.AppendString(dst, text)
	return append(dst, "}}\n\n"...)
}

func (t *Stream) closeBlock(dst []byte) []byte {
	if t.block == blockNone {
		return dst
	}
	dst = appendSSE(dst, "content_block_stop", wire.AnthropicBlockStopOut{Type: "content_block_stop", Index: t.blockIndex})
	t.block = blockNone
	t.blockIndex++
	return dst
}

// endAnthropic ends the client's stream at the backend's [DONE].
func (t *Stream) endAnthropic(dst []byte) []byte {
	dst = t.startAnthropic(dst, "", "")
	dst = t.closeBlock(dst)
	var md wire.AnthropicMessageDeltaOut
	md.Type = "message_delta"
	md.Delta.StopReason, _ = anthropicStopReason(t.finish, nil)
	if t.stopSeq != nil {
		md.Delta.StopReason, md.Delta.StopSequence = "stop_sequence", t.stopSeq
	}
	// Anthropic's message_delta usage is cumulative and may restate the
	// input; the client learns the prompt size here, since an OpenAI
	// stream reports it only at the end.
	md.Usage.InputTokens, md.Usage.OutputTokens = t.usage.InputTokens, t.usage.OutputTokens
	md.Usage.CacheReadInputTokens = t.usage.CacheReadInputTokens
	dst = appendSSE(dst, "message_delta", md)
	dst = appendSSE(dst, "message_stop", wire.AnthropicMessageStopOut{Type: "message_stop"})
	t.done = true
	return dst
}

func (t *Stream) failAnthropic(dst []byte, code int, msg string) []byte {
	t.failed = true
	typ := "api_error"
	if code >= 400 {
		typ = anthropicErrorType(code)
	}
	return appendSSE(dst, "error", wire.AnthropicErrorBody{Type: "error", Error: wire.AnthropicError{Type: typ, Message: msg}})
}

// -- Anthropic backend, OpenAI client --

func (t *Stream) anthropicToOpenAI(dst []byte, name string, data []byte) []byte {
	if len(data) == 0 {
		return dst
	}
	if t.started && !t.noFast {
		if thinking, text, ok := fastAnthropicDelta(data); ok {
			if thinking {
				return t.openAIDelta(dst, "", text)
			}
			return t.openAIDelta(dst, text, "")
		}
	}
	var e wire.AnthropicStreamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return t.failOpenAI(dst, "upstream_error", "malformed event from the Anthropic backend: "+err.Error())
	}
	typ := e.Type
	if typ == "" {
		typ = name
	}
	switch typ {
	case "message_start":
		id, model := "", ""
		if m := e.Message; m != nil {
			id, model = m.ID, m.Model
			if m.Usage != nil {
				t.usage = *m.Usage
			}
		}
		return t.startOpenAI(dst, id, model)
	case "content_block_start":
		// A block normally starts empty; text it does carry is output.
		if b := e.ContentBlock; b != nil {
			dst = t.startOpenAI(dst, "", "")
			return t.openAIDelta(dst, b.Text, b.Thinking)
		}
	case "content_block_delta":
		if d := e.Delta; d != nil {
			dst = t.startOpenAI(dst, "", "")
			switch d.Type {
			case "text_delta":
				return t.openAIDelta(dst, d.Text, "")
			case "thinking_delta":
				return t.openAIDelta(dst, "", d.Thinking)
			}
			// signature_delta, citations_delta: nothing OpenAI can show.
		}
	case "message_delta":
		dst = t.startOpenAI(dst, "", "")
		stop := ""
		if e.Delta != nil {
			stop = e.Delta.StopReason
		}
		if u := e.Usage; u != nil {
			// Cumulative: later fields replace earlier ones when given.
			t.usage.OutputTokens = u.OutputTokens
			if u.InputTokens > 0 {
				t.usage.InputTokens = u.InputTokens
			}
			if u.CacheReadInputTokens > 0 {
				t.usage.CacheReadInputTokens = u.CacheReadInputTokens
			}
			if u.CacheCreationInputTokens > 0 {
				t.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
			}
		}
		return t.finishOpenAI(dst, stop)
	case "message_stop":
		dst = t.startOpenAI(dst, "", "")
		if !t.sentFinish {
			dst = t.finishOpenAI(dst, "")
		}
		t.done = true
		return append(dst, "data: [DONE]\n\n"...)
	case "error":
		typ, msg := "api_error", string(data)
		if e.Error != nil {
			typ, msg = e.Error.Type, e.Error.Message
		}
		return t.failOpenAI(dst, typ, msg)
	}
	// ping, content_block_stop and event types added later: nothing.
	return dst
}

// startOpenAI sends the role chunk that opens an OpenAI stream, once.
func (t *Stream) startOpenAI(dst []byte, id, model string) []byte {
	if t.started {
		return dst
	}
	t.started = true
	t.id = withPrefix(id, "chatcmpl-")
	if model != "" {
		t.model = model
	}
	t.created = t.now().Unix()
	empty := ""
	return t.appendChunk(dst, wire.ChunkDeltaOut{Role: "assistant", Content: &empty}, nil, nil)
}

func (t *Stream) openAIDelta(dst []byte, text, reasoning string) []byte {
	if text == "" && reasoning == "" {
		return dst
	}
	if reasoning == "" || text == "" {
		// The per-token chunk, written directly: the bytes appendChunk's
		// encoding/json would give (wire.ChatCompletionChunkOut), without
		// its cost on every token.
		dst = append(dst, `data: {"id":`...)
		dst = jsonscan.AppendString(dst, t.id)
		dst = append(dst, `,"object":"chat.completion.chunk","created":`...)
		dst = strconv.AppendInt(dst, t.created, 10)
		dst = append(dst, `,"model":`...)
		dst = jsonscan.AppendString(dst, t.model)
		if text != "" {
			dst = append(dst, `,"choices":[{"index":0,"delta":{"content":`...)
			dst = jsonscan.AppendString(dst, text)
		} else {
			dst = append(dst, `,"choices":[{"index":0,"delta":{"reasoning_content":`...)
			dst = jsonscan.AppendString(dst, reasoning)
		}
		return append(dst, "},\"finish_reason\":null}]}\n\n"...)
	}
	var d wire.ChunkDeltaOut
	if text != "" {
		d.Content = &text
	}
	if reasoning != "" {
		d.ReasoningContent = &reasoning
	}
	return t.appendChunk(dst, d, nil, nil)
}

// finishOpenAI sends the finish_reason chunk, then a usage chunk — always,
// whether or not the client asked for include_usage: clients that did not
// ignore an empty-choices chunk, and the gateway's own accounting reads it.
func (t *Stream) finishOpenAI(dst []byte, stop string) []byte {
	if t.sentFinish {
		return dst
	}
	t.sentFinish = true
	fr := openAIFinishReason(stop)
	dst = t.appendChunk(dst, wire.ChunkDeltaOut{}, &fr, nil)
	return t.appendChunk(dst, wire.ChunkDeltaOut{}, nil, openAIUsage(&t.usage))
}

func (t *Stream) appendChunk(dst []byte, d wire.ChunkDeltaOut, finish *string, usage *wire.CompletionUsageOut) []byte {
	c := wire.ChatCompletionChunkOut{ID: t.id, Object: "chat.completion.chunk", Created: t.created, Model: t.model, Usage: usage}
	if usage != nil {
		c.Choices = []wire.ChunkChoiceOut{}
	} else {
		c.Choices = []wire.ChunkChoiceOut{{Index: 0, Delta: d, FinishReason: finish}}
	}
	return appendSSE(dst, "", c)
}

func (t *Stream) failOpenAI(dst []byte, typ, msg string) []byte {
	t.failed = true
	return appendSSE(dst, "", wire.OpenAIErrorBodyOut{Error: wire.OpenAIErrorOut{Message: msg, Type: typ, Code: anthropicErrorStatus(typ)}})
}

// anthropicErrorStatus is the HTTP status Anthropic documents for an error
// type, for the OpenAI error's code.
func anthropicErrorStatus(typ string) int {
	switch typ {
	case "invalid_request_error":
		return 400
	case "authentication_error":
		return 401
	case "billing_error":
		return 402
	case "permission_error":
		return 403
	case "not_found_error":
		return 404
	case "request_too_large":
		return 413
	case "rate_limit_error":
		return 429
	case "timeout_error":
		return 504
	case "overloaded_error":
		return 529
	}
	return 500
}

// fastAnthropicDelta reads the per-token event of an Anthropic stream,
// {"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"..."}}
// (or a thinking_delta), in any key order, as encoding/json would, and
// reports false for anything else — which the full decoder then reads.
func fastAnthropicDelta(data []byte) (thinking bool, text string, ok bool) {
	s := jsonscan.New(data)
	var typ, dtyp []byte
	field := "" // "text" or "thinking": which delta field held the text
	ok = s.Object(func(key []byte) bool {
		var ok bool
		switch {
		case jsonscan.KeyIs(key, "type"):
			typ, ok = s.PlainBytes()
			return ok
		case jsonscan.KeyIs(key, "index"):
			_, ok = s.Number()
			return ok
		case jsonscan.KeyIs(key, "delta"):
			return field == "" && s.Object(func(k []byte) bool {
				var ok bool
				switch {
				case jsonscan.KeyIs(k, "type"):
					dtyp, ok = s.PlainBytes()
					return ok
				case field == "" && jsonscan.KeyIs(k, "text"):
					field = "text"
				case field == "" && jsonscan.KeyIs(k, "thinking"):
					field = "thinking"
				default:
					return false
				}
				text, ok = s.Str()
				return ok
			})
		}
		return false
	}) && s.End()
	switch {
	case !ok || string(typ) != "content_block_delta":
		return false, "", false
	case field == "text" && string(dtyp) == "text_delta":
		return false, text, true
	case field == "thinking" && string(dtyp) == "thinking_delta":
		return true, text, true
	}
	return false, "", false
}

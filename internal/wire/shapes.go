package wire

import "encoding/json"

// The JSON shapes of the OpenAI chat/completions and completions APIs and
// the Anthropic messages API, in one place, for every package that reads or
// writes them: the client's decoders (decode.go, whole.go), the translator
// (internal/wire/translate), the gateway's request reader and the
// simulator's server.
//
// A type named after an API object is what ttft reads. Readers of one object
// share its type, so it lists the union of the fields they look at; each
// keeps its own logic. An Out type is the same object as ttft writes it,
// where that differs: empty fields left out, and a field order the golden
// files pin (encoding/json writes fields in declaration order). Types
// without Out read and write alike.
//
// Kept elsewhere on purpose: the translator's strict request readers and
// its OpenAI answer readers, which hold fields raw to refuse what the
// other API cannot carry (they embed or reference these types); the
// gateway's request reader, a view across all three request shapes that its
// allocation-free scanner mirrors field for field; and the bodies written
// from maps (Body: --extra-body merges into them, keys in sorted order) or
// by hand (the simulator's and the translator's per-token events).

// ---- Requests ----

// ChatMessage is one entry of a request's "messages" in either API: OpenAI
// chat and Anthropic messages both give a role and a content that is a
// string or an array of parts (OpenAI) or blocks (Anthropic). Content stays
// raw: ContentText flattens it; the translator checks each part itself.
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// TextMessage is a message whose content is plain text: what the
// translator writes to an OpenAI backend, and the chat message of tests
// against real engines (Ollama's native API answers with it too). Body
// sends workload.Message, the same JSON, as it is (see request.go).
type TextMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// StreamOptions is OpenAI's "stream_options".
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatCompletionRequest is an OpenAI chat/completions or completions
// request as an OpenAI-compatible server reads it (the simulator's, as vLLM
// does, with vLLM's min_tokens and ignore_eos): chat sends messages,
// completions a prompt (a string, strings or token IDs).
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	N                   int             `json:"n"`
}

// ChatCompletionRequestOut is a chat/completions request as the translator
// writes it: text messages, sampling values passed on as given, unset
// fields left out.
type ChatCompletionRequestOut struct {
	Model         string          `json:"model"`
	Messages      []TextMessage   `json:"messages"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	Temperature   json.RawMessage `json:"temperature,omitempty"`
	TopP          json.RawMessage `json:"top_p,omitempty"`
	TopK          json.RawMessage `json:"top_k,omitempty"` // a vLLM/SGLang extension
	Stop          []string        `json:"stop,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	User          string          `json:"user,omitempty"`
}

// AnthropicMessagesRequestOut is a messages request as the translator
// writes it.
type AnthropicMessagesRequestOut struct {
	Model         string                     `json:"model"`
	System        string                     `json:"system,omitempty"`
	Messages      []AnthropicMessageParamOut `json:"messages"`
	MaxTokens     int                        `json:"max_tokens"`
	StopSequences []string                   `json:"stop_sequences,omitempty"`
	Temperature   json.RawMessage            `json:"temperature,omitempty"`
	TopP          json.RawMessage            `json:"top_p,omitempty"`
	TopK          json.RawMessage            `json:"top_k,omitempty"`
	Stream        bool                       `json:"stream,omitempty"`
}

// AnthropicMessageParamOut is one request message as the translator writes
// it.
type AnthropicMessageParamOut struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string, or []AnthropicTextBlock
}

// AnthropicTextBlock is a text content block of a request message.
type AnthropicTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ---- OpenAI answers ----

// ChatCompletionChunk is one event of an OpenAI-compatible stream as the
// client's decoder reads it: chat.completion.chunk and text_completion
// chunks as OpenAI, vLLM, SGLang, TGI, llama.cpp and Ollama send them, and
// the error shapes they use inside a stream. The decoder's fast path
// (fastpath.go) reads the usual token chunk without it and must agree with
// encoding/json on this type (FuzzFastPathAgrees): a field added here must
// be known to the fast path too.
type ChatCompletionChunk struct {
	ID      string           `json:"id"` // the server's completion id (gen_ai.response.id)
	Model   string           `json:"model"`
	Choices []ChunkChoice    `json:"choices"`
	Usage   *CompletionUsage `json:"usage"`
	// {"error": {...}} (OpenAI, SGLang, llama.cpp) or {"error": "msg"} (TGI).
	Error json.RawMessage `json:"error"`
	// vLLM's {"object":"error","message":...}.
	Object  string             `json:"object"`
	Message string             `json:"message"`
	Timings map[string]float64 `json:"timings"` // llama.cpp's, in ms
}

// ChunkChoice is a choice of a stream chunk: a chat delta, or a
// completion's text.
type ChunkChoice struct {
	Delta        ChunkDelta `json:"delta"`
	Text         string     `json:"text"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is a chat chunk's new output. Reasoning comes as
// reasoning_content (vLLM, SGLang, DeepSeek) or reasoning (Ollama, newer
// vLLM).
type ChunkDelta struct {
	Role             string     `json:"role"`
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content"`
	Reasoning        string     `json:"reasoning"`
	ToolCalls        []ToolCall `json:"tool_calls"`
}

// ToolCall is a tool call of an answer or a chunk's part of one.
type ToolCall struct {
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is a tool call's function and arguments (in a stream,
// each chunk carries the next piece of the arguments).
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatCompletion is a whole (non-streamed) chat.completion or
// text_completion answer as the client reads it, or an error body sent in
// its place.
type ChatCompletion struct {
	ID      string                 `json:"id"`
	Model   string                 `json:"model"`
	Choices []ChatCompletionChoice `json:"choices"`
	Usage   *CompletionUsage       `json:"usage"`
	Error   json.RawMessage        `json:"error"`
}

// ChatCompletionChoice is a choice of a whole answer: a chat message, or a
// completion's text.
type ChatCompletionChoice struct {
	Message      ChatCompletionMessage `json:"message"`
	Text         string                `json:"text"`
	FinishReason string                `json:"finish_reason"`
}

// ChatCompletionMessage is a whole answer's message.
type ChatCompletionMessage struct {
	Content          string     `json:"content"`
	ReasoningContent string     `json:"reasoning_content"`
	Reasoning        string     `json:"reasoning"`
	ToolCalls        []ToolCall `json:"tool_calls"`
}

// CompletionUsage is OpenAI's usage object as readers take it (total_tokens
// is derived, and left unread). prompt_tokens counts cached tokens too.
type CompletionUsage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details"`
}

// PromptTokensDetails is usage's "prompt_tokens_details".
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// usage is u in the client's terms.
func (u *CompletionUsage) usage() *Usage {
	out := &Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedPromptTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// CompletionUsageOut is OpenAI's usage object as the translator writes it.
type CompletionUsageOut struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// ChatCompletionChunkOut is a chat.completion.chunk as the translator writes
// it. The usual token chunk is written by hand (translate's openAIDelta),
// as the bytes encoding/json gives for this type.
type ChatCompletionChunkOut struct {
	ID      string              `json:"id"`
	Object  string              `json:"object"`
	Created int64               `json:"created"`
	Model   string              `json:"model"`
	Choices []ChunkChoiceOut    `json:"choices"`
	Usage   *CompletionUsageOut `json:"usage,omitempty"`
}

// ChunkChoiceOut is a written chunk's choice.
type ChunkChoiceOut struct {
	Index        int           `json:"index"`
	Delta        ChunkDeltaOut `json:"delta"`
	FinishReason *string       `json:"finish_reason"`
}

// ChunkDeltaOut is a written chunk's delta.
type ChunkDeltaOut struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// ChatCompletionOut is a whole chat.completion as the translator writes it.
type ChatCompletionOut struct {
	ID      string                    `json:"id"`
	Object  string                    `json:"object"`
	Created int64                     `json:"created"`
	Model   string                    `json:"model"`
	Choices []ChatCompletionChoiceOut `json:"choices"`
	Usage   *CompletionUsageOut       `json:"usage,omitempty"`
}

// ChatCompletionChoiceOut is a written answer's choice.
type ChatCompletionChoiceOut struct {
	Index        int                      `json:"index"`
	Message      ChatCompletionMessageOut `json:"message"`
	FinishReason string                   `json:"finish_reason"`
}

// ChatCompletionMessageOut is a written answer's message.
type ChatCompletionMessageOut struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// OpenAIErrorBodyOut is an OpenAI error body (and in-stream error event) as
// the translator writes it.
type OpenAIErrorBodyOut struct {
	Error OpenAIErrorOut `json:"error"`
}

// OpenAIErrorOut is the error object of OpenAIErrorBodyOut.
type OpenAIErrorOut struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"` // the HTTP status, as vLLM and the gateway's own errors give it
}

// ---- Anthropic answers ----

// AnthropicMessage is a message object — a whole answer, or message_start's
// message — as ttft reads it, or an error body sent in its place.
type AnthropicMessage struct {
	ID         string                  `json:"id"`
	Model      string                  `json:"model"`
	Content    []AnthropicContentBlock `json:"content"`
	StopReason string                  `json:"stop_reason"`
	Usage      *AnthropicUsage         `json:"usage"`
	Error      *AnthropicError         `json:"error"`
}

// AnthropicContentBlock is a content block of an answer (or
// content_block_start's block): text, thinking, or a kind whose text ttft
// does not read.
type AnthropicContentBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Thinking string `json:"thinking"`
}

// AnthropicUsage is Anthropic's usage object. input_tokens leaves out the
// tokens read from or written to the prompt cache.
type AnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
}

// PromptTokens is every input token, cached or not (OpenAI's
// prompt_tokens).
func (u *AnthropicUsage) PromptTokens() int {
	return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// AnthropicStreamEvent is one event of a messages stream as ttft reads it;
// each event type fills the fields it carries (message_start: Message;
// content_block_start: ContentBlock; content_block_delta: Delta;
// message_delta: Delta and Usage; error: Error).
type AnthropicStreamEvent struct {
	Type         string                 `json:"type"`
	Message      *AnthropicMessage      `json:"message"`
	ContentBlock *AnthropicContentBlock `json:"content_block"`
	Delta        *AnthropicDelta        `json:"delta"`
	Usage        *AnthropicUsage        `json:"usage"`
	Error        *AnthropicError        `json:"error"`
}

// AnthropicDelta is a content_block_delta's delta (text_delta,
// thinking_delta, input_json_delta...) or a message_delta's (stop_reason).
type AnthropicDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Thinking    string `json:"thinking"`
	PartialJSON string `json:"partial_json"`
	StopReason  string `json:"stop_reason"`
}

// AnthropicError is the error object of an error body or error event.
type AnthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicErrorBody is an error body, and a stream's error event.
type AnthropicErrorBody struct {
	Type  string         `json:"type"`
	Error AnthropicError `json:"error"`
}

// AnthropicMessageOut is a message object as the translator writes it: a
// whole answer, and message_start's message.
type AnthropicMessageOut struct {
	ID           string                     `json:"id"`
	Type         string                     `json:"type"`
	Role         string                     `json:"role"`
	Model        string                     `json:"model"`
	Content      []AnthropicContentBlockOut `json:"content"`
	StopReason   *string                    `json:"stop_reason"`
	StopSequence *string                    `json:"stop_sequence"`
	Usage        AnthropicUsageOut          `json:"usage"`
}

// AnthropicContentBlockOut is a written content block: a text block has
// Text, a thinking block Thinking and Signature.
type AnthropicContentBlockOut struct {
	Type      string  `json:"type"`
	Text      *string `json:"text,omitempty"`
	Thinking  *string `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
}

// AnthropicUsageOut is a written message's usage.
type AnthropicUsageOut struct {
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens,omitempty"`
}

// AnthropicMessageStartOut is a written message_start event.
type AnthropicMessageStartOut struct {
	Type    string              `json:"type"`
	Message AnthropicMessageOut `json:"message"`
}

// AnthropicBlockStartOut is a written content_block_start event.
type AnthropicBlockStartOut struct {
	Type         string                   `json:"type"`
	Index        int                      `json:"index"`
	ContentBlock AnthropicContentBlockOut `json:"content_block"`
}

// AnthropicBlockDeltaOut is a content_block_delta event. The translator
// writes it by hand (translate's anthropicDelta), as the bytes
// encoding/json gives for this type.
type AnthropicBlockDeltaOut struct {
	Type  string            `json:"type"`
	Index int               `json:"index"`
	Delta AnthropicDeltaOut `json:"delta"`
}

// AnthropicDeltaOut is a written content_block_delta's delta.
type AnthropicDeltaOut struct {
	Type     string  `json:"type"`
	Text     *string `json:"text,omitempty"`
	Thinking *string `json:"thinking,omitempty"`
}

// AnthropicBlockStopOut is a written content_block_stop event.
type AnthropicBlockStopOut struct {
	Type  string `json:"type"`
	Index int    `json:"index"`
}

// AnthropicMessageDeltaOut is a written message_delta event.
type AnthropicMessageDeltaOut struct {
	Type  string                 `json:"type"`
	Delta AnthropicStopOut       `json:"delta"`
	Usage AnthropicDeltaUsageOut `json:"usage"`
}

// AnthropicStopOut is a written message_delta's delta.
type AnthropicStopOut struct {
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// AnthropicDeltaUsageOut is a written message_delta's usage: cumulative,
// restating the input when it is known.
type AnthropicDeltaUsageOut struct {
	InputTokens          int `json:"input_tokens,omitempty"`
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens,omitempty"`
}

// AnthropicMessageStopOut is a written message_stop event.
type AnthropicMessageStopOut struct {
	Type string `json:"type"`
}

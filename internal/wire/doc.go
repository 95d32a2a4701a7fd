// Package wire speaks the streaming LLM APIs: it builds OpenAI
// chat/completions and completions requests and Anthropic messages requests
// from a workload.Request, and decodes their SSE streams into chunks of
// content, reasoning, tool-call arguments, usage, finish and error. These
// cover vLLM, SGLang, TGI, llama.cpp server, Ollama's OpenAI-compatible API
// and the hosted APIs.
//
// shapes.go declares the two APIs' JSON shapes once, for every package
// that reads or writes them: requests (ChatMessage, ChatCompletionRequest,
// AnthropicMessagesRequestOut...), answers and stream events
// (ChatCompletionChunk, ChatCompletion, AnthropicStreamEvent,
// AnthropicMessage...), usage (CompletionUsage, AnthropicUsage) and error
// bodies. A type named after an API object is what ttft reads, the union of
// the fields its readers look at; its Out twin is how the translator
// writes it (empty fields left out, field order as the golden files pin
// it). Readers that need another view keep their own struct, embedding or
// referencing these, with a comment saying why: the translator's strict
// request readers and OpenAI answer readers (fields kept raw to refuse what
// the other API cannot carry), and the gateway's request reader (one view
// of all three request shapes, mirrored by its allocation-free scanner).
// Request bodies are appended by a per-run template (Requester, body.go:
// the bytes encoding/json writes for a map of the fields, --extra-body
// merged into it, which bodyMap keeps as the reference) and the per-token
// events are written by hand; their comments name the shape.
// Message contents are flattened by one function, ContentText.
package wire

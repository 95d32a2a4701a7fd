// Package wire speaks the streaming LLM APIs: it builds OpenAI
// chat/completions and completions requests and Anthropic messages requests
// from a workload.Request, and decodes their SSE streams into chunks of
// content, reasoning, tool-call arguments, usage, finish and error. These
// cover vLLM, SGLang, TGI, llama.cpp server, Ollama's OpenAI-compatible API
// and the hosted APIs.
package wire

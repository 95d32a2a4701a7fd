// Package translate converts between the OpenAI chat completions API and
// the Anthropic messages API, so that a client of one can be served by a
// backend speaking the other (an Anthropic client on vLLM, an OpenAI client
// on Claude): request bodies (Request), whole answers (Response), error
// bodies (Error) and streams, event by event (Stream). Everything here is
// pure: bytes in, bytes out; APIs are named by wire.API (wire.OpenAIChat,
// wire.Anthropic).
//
// Scope: text conversations, with reasoning ("thinking") in answers. Tool
// calling, images, documents and log probabilities are not translated: their
// request fields are refused with an error naming the field, so the client
// learns at once instead of getting an answer that silently ignored them.
// (Tool translation needs argument-streaming state on both sides and is left
// for later.)
//
// The JSON shapes it writes, and the answers and Anthropic events it reads,
// are wire's (internal/wire/shapes.go); its request readers and OpenAI
// answer readers are its own, stricter views (fields kept raw to refuse).
//
// Translation only runs when a request crosses APIs, so it favours clarity
// (encoding/json, typed structs) over the byte-level speed of the same-API
// path, except for the per-token stream events: the usual token chunk is
// read with the shared JSON scanner (internal/jsonscan) and written
// directly, and FuzzTranslateFastPath checks that this gives byte for byte
// what the encoding/json path gives.
//
// The gateway (internal/gateway) is its user; the golden files under
// testdata are translations of the recorded streams in
// internal/wire/testdata and testdata/anthropic-thinking.sse.
package translate

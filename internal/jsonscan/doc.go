// Package jsonscan is a tiny, allocation-free JSON tokenizer for hot paths
// (decoding streamed chunks, reading gateway request bodies) that only need
// a few fields of the usual shapes.
//
// A Scanner walks a byte slice once. Every method skips leading whitespace
// and returns ok=false on anything invalid or merely unusual (escaped or
// non-ASCII keys, deep nesting, a value of an unexpected type); callers
// then fall back to encoding/json, whose answer is the reference. The
// Scanner never accepts what encoding/json rejects, and the strings it
// decodes equal encoding/json's (FuzzScanner checks both), so a caller
// that falls back on every "no" behaves exactly like encoding/json, only
// faster on the common case.
//
// Only the returned strings allocate; keys come back as slices of the
// input.
//
// AppendString goes the other way: the one JSON string encoder the hot
// paths share (the gateway's access log, error answers and events, the
// OpenAI ⇄ Anthropic translator's fast paths).
package jsonscan

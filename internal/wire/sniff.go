package wire

import "bytes"

// Sniffing streamed events by byte search, for proxies that pass a stream
// through and only need to know what each event is (the gateway's proxy,
// its Endpoint Picker): a search per event tells a token from a role
// announcement, a usage chunk or the end, at a fraction of the cost of
// decoding every event. The decoders above are the reference.

var (
	sniffContent   = []byte(`"content":"`)
	sniffText      = []byte(`"text":"`)
	sniffReasoning = []byte(`"reasoning_content":"`)
	sniffReason2   = []byte(`"reasoning":"`)
	sniffToolCalls = []byte(`"tool_calls":[{`)
	sniffDelta     = []byte(`content_block_delta`)
)

// SniffOpenAIToken reports whether an OpenAI chat or completions chunk
// carries generated text on any channel: content, completions text,
// reasoning, or tool-call arguments. Role-only chunks, empty deltas and
// usage chunks do not.
func SniffOpenAIToken(ev []byte) bool {
	return NonEmptyStringAfter(ev, sniffContent) || NonEmptyStringAfter(ev, sniffText) ||
		NonEmptyStringAfter(ev, sniffReasoning) || NonEmptyStringAfter(ev, sniffReason2) ||
		bytes.Contains(ev, sniffToolCalls)
}

// SniffAnthropicToken reports whether an Anthropic event is a content
// block delta (text, thinking or tool input).
func SniffAnthropicToken(ev []byte) bool { return bytes.Contains(ev, sniffDelta) }

// NonEmptyStringAfter reports whether key (ending in an opening quote) is
// followed, somewhere in b, by at least one character before the closing
// quote.
func NonEmptyStringAfter(b, key []byte) bool {
	for {
		i := bytes.Index(b, key)
		if i < 0 {
			return false
		}
		b = b[i+len(key):]
		if len(b) > 0 && b[0] != '"' {
			return true
		}
	}
}

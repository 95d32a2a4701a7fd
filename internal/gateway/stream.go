package gateway

import (
	"bytes"

	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/wire"
)

// splitEvents finds the complete server-sent events at the start of b and
// calls fn on each (the event's bytes including its terminating blank line).
// It returns how many bytes those events span; the rest is an incomplete
// event to keep until more bytes arrive.
//
// The gateway forwards bytes unchanged, so splitting only decides where a
// write may end: never inside an event, so that a stream cut by its backend
// can be closed with a well-formed error event instead of half of one.
// Lines end in LF, CRLF or CR (the SSE grammar); a CR as the very last byte
// is undecided (it may be the start of a CRLF) and waits for the next byte.
func splitEvents(b []byte, fn func(ev []byte)) int {
	return splitEventsEnd(b, false, fn)
}

// splitEventsEnd is splitEvents where atEnd says that the stream ended
// after b (its last read came with an error): no byte follows, so a CR as
// the very last byte ends its line instead of waiting for a possible LF.
func splitEventsEnd(b []byte, atEnd bool, fn func(ev []byte)) int {
	if bytes.IndexByte(b, '\r') < 0 {
		return splitEventsLF(b, fn)
	}
	return splitEventsAny(b, atEnd, fn)
}

var lflf = []byte("\n\n")

// splitEventsLF is splitEvents for the usual streams, whose lines end in
// LF only: an event ends at the first empty line, i.e. at a LF that starts
// the event (an empty event) or follows another LF — found with one
// vectorised search per event instead of a look at every line.
func splitEventsLF(b []byte, fn func(ev []byte)) int {
	start := 0
	for start < len(b) {
		end := start + 1 // b[start] == '\n': an empty line right at the start
		if b[start] != '\n' {
			j := bytes.Index(b[start:], lflf)
			if j < 0 {
				break
			}
			end = start + j + 2
		}
		if fn != nil {
			fn(b[start:end])
		}
		start = end
	}
	return start
}

// splitEventsAny is splitEventsEnd for lines ending in LF, CRLF or CR.
func splitEventsAny(b []byte, atEnd bool, fn func(ev []byte)) int {
	start := 0
	lineStart := true
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\n' && c != '\r' {
			// Skip to the next line terminator in one call.
			j := bytes.IndexAny(b[i:], "\r\n")
			if j < 0 {
				break
			}
			i += j
			lineStart = false
			continue
		}
		tl := 1
		if c == '\r' {
			if i+1 == len(b) && !atEnd {
				break
			}
			if i+1 < len(b) && b[i+1] == '\n' {
				tl = 2
			}
		}
		if lineStart {
			end := i + tl
			if fn != nil {
				fn(b[start:end])
			}
			start = end
		}
		lineStart = true
		i += tl
	}
	return start
}

// streamInfo is what the gateway learns from one event without decoding it:
// whether it carries a token, ends the stream, reports an error, and the
// cumulative output-token usage when present.
type streamInfo struct {
	token  bool
	done   bool
	errEv  bool
	output int
	input  int // prompt tokens by the backend's usage, when the event carries it
	// cached is how many of the prompt's prompt tokens the backend's
	// prefix cache held when hasCached: the event says (0 is a miss).
	// OpenAI: usage's prompt_tokens_details.cached_tokens, of its
	// prompt_tokens. Anthropic: cache_read_input_tokens, of those,
	// cache_creation_input_tokens and input_tokens together (its
	// input_tokens leaves out what was read from or written to the
	// cache).
	cached, prompt int
	hasCached      bool
}

var (
	kContent   = []byte(`"content":"`)
	kText      = []byte(`"text":"`)
	kReasoning = []byte(`"reasoning_content":"`)
	kReason2   = []byte(`"reasoning":"`)
	kToolCalls = []byte(`"tool_calls":[{`)
	kDone      = []byte(`[DONE]`)
	kStop      = []byte(`message_stop`)
	kErrEvent  = []byte(`event: error`)
	kErrField  = []byte(`"error":`)
	kCompTok   = []byte(`"completion_tokens":`)
	kOutTok    = []byte(`"output_tokens":`)
	kPromptTok = []byte(`"prompt_tokens":`)
	kInTok     = []byte(`"input_tokens":`)
	kCachedTok = []byte(`"cached_tokens":`)
	kCacheRead = []byte(`"cache_read_input_tokens":`)
	kCacheMade = []byte(`"cache_creation_input_tokens":`)
	kID        = []byte(`"id":"`)
	kModel     = []byte(`"model":"`)
)

// classify inspects one event with byte searches only (no JSON decoding, no
// allocation): the per-token cost of observing a stream must stay tiny.
func classify(ev []byte, anthropic bool) streamInfo {
	var si streamInfo
	if anthropic {
		si.token = wire.SniffAnthropicToken(ev)
		si.done = bytes.Contains(ev, kStop)
		si.errEv = bytes.Contains(ev, kErrEvent)
		if !si.token {
			si.output = intAfter(ev, kOutTok)
			si.input = intAfter(ev, kInTok)
			si.cached, si.prompt, si.hasCached = anthropicCached(ev)
		}
		return si
	}
	if bytes.Contains(ev, kDone) {
		si.done = true
		return si
	}
	si.token = wire.SniffOpenAIToken(ev)
	if !si.token {
		si.errEv = bytes.Contains(ev, kErrField)
		si.output = intAfter(ev, kCompTok)
		si.input = intAfter(ev, kPromptTok)
		if si.input > 0 && bytes.Contains(ev, kCachedTok) {
			si.cached, si.prompt, si.hasCached = intAfter(ev, kCachedTok), si.input, true
		}
	}
	return si
}

// anthropicCached reads an Anthropic usage's prompt-cache evidence: the
// tokens read from the cache, of those, the ones written to it and
// input_tokens together (which leaves both out); ok when the usage says.
func anthropicCached(b []byte) (cached, prompt int, ok bool) {
	if !bytes.Contains(b, kCacheRead) {
		return 0, 0, false
	}
	read := intAfter(b, kCacheRead)
	p := intAfter(b, kInTok) + read + intAfter(b, kCacheMade)
	return read, p, p > 0
}

// stringAfter is the JSON string after key (ending in its opening
// quote): its first occurrence, which in an OpenAI chunk or whole answer
// and in Anthropic's message_start is the answer's own field. "" when
// absent, escaped or implausibly long: it only labels spans.
func stringAfter(b, key []byte) string {
	i := bytes.Index(b, key)
	if i < 0 {
		return ""
	}
	b = b[i+len(key):]
	j := bytes.IndexByte(b, '"')
	if j < 0 || j > 256 || bytes.IndexByte(b[:j], '\\') >= 0 {
		return ""
	}
	return string(b[:j])
}

// intAfter parses the non-negative integer after key (0 when absent).
func intAfter(b, key []byte) int {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0
	}
	b = b[i+len(key):]
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' || n > 1<<40 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// errorEvent is the event that ends a stream the gateway could not finish:
// OpenAI clients see an error object in a data line, Anthropic clients an
// "error" event, as each API documents for mid-stream failures.
func errorEvent(api wire.API, msg string) []byte {
	if api == wire.Anthropic {
		b := make([]byte, 0, len(msg)+96)
		b = append(b, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"...)
		b = jsonscan.AppendString(b, msg)
		return append(b, "}}\n\n"...)
	}
	b := make([]byte, 0, len(msg)+112)
	b = append(b, "data: {\"error\":{\"message\":"...)
	b = jsonscan.AppendString(b, msg)
	return append(b, ",\"type\":\"upstream_error\",\"code\":\"backend_stream_interrupted\"}}\n\n"...)
}

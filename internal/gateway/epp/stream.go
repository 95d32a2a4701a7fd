package epp

import (
	"bytes"

	"github.com/ttft-dev/ttft/internal/wire"
)

// Byte patterns of end and error events in OpenAI and Anthropic streams
// (tokens are sniffed by wire, as the gateway's proxy does): a search per
// line is far cheaper than decoding every event.
var (
	pDone     = []byte(`[DONE]`)
	pStop     = []byte(`message_stop`)
	pErrEvent = []byte(`event: error`)
	pErrField = []byte(`"error":`)
	pData     = []byte("data:")
)

// maxPendingLine bounds what the scanner keeps of a line split across
// chunks: a longer line is skipped rather than pinning memory on it.
const maxPendingLine = 64 << 10

// streamScanner finds the first token event and the end of an SSE stream
// (OpenAI chat or completions, or Anthropic messages) fed in arbitrary
// chunks, as Envoy cuts them.
type streamScanner struct {
	pending []byte // an incomplete line carried to the next chunk
	skip    bool   // the current line overflowed maxPendingLine
	// first: a token event was seen; done: the stream's end marker (or
	// an error event, which ends it too).
	first, done bool
}

// feed scans chunk and reports whether it held the stream's first token.
func (s *streamScanner) feed(chunk []byte) (firstToken bool) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if !s.skip {
				if len(s.pending)+len(chunk) > maxPendingLine {
					s.pending, s.skip = s.pending[:0], true
				} else {
					s.pending = append(s.pending, chunk...)
				}
			}
			return firstToken
		}
		line := chunk[:i]
		chunk = chunk[i+1:]
		if s.skip {
			s.skip = false
			continue
		}
		if len(s.pending) > 0 {
			s.pending = append(s.pending, line...)
			line = s.pending
		}
		if s.line(line) {
			firstToken = true
		}
		s.pending = s.pending[:0]
	}
	return firstToken
}

// line classifies one SSE line; it reports a first token.
func (s *streamScanner) line(l []byte) bool {
	if bytes.HasPrefix(l, pErrEvent) {
		s.done = true
		return false
	}
	if !bytes.HasPrefix(l, pData) {
		return false
	}
	l = l[len(pData):]
	switch {
	case bytes.Contains(l, pDone), bytes.Contains(l, pStop):
		s.done = true
		return false
	case s.first:
		return false
	case wire.SniffAnthropicToken(l) || wire.SniffOpenAIToken(l):
		s.first = true
		return true
	case bytes.Contains(l, pErrField):
		s.done = true
	}
	return false
}

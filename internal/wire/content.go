package wire

import (
	"bytes"
	"encoding/json"
	"strings"
)

// ContentText is the text of a message's content, in either shape OpenAI
// and Anthropic both accept: a string, or an array of parts whose "text"
// fields are joined (parts without text, such as images, add nothing).
// ok is false for anything else. Readers that only need the text (the
// gateway's prefix hashing, the simulator's prompt) read it alike; the
// translator, which must refuse parts it cannot carry, reads them itself.
func ContentText(raw json.RawMessage) (text string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, true
		}
	case '[':
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &parts) == nil {
			var b strings.Builder
			for _, p := range parts {
				b.WriteString(p.Text)
			}
			return b.String(), true
		}
	}
	return "", false
}

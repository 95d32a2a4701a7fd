package wire

import (
	"encoding/json"
	"testing"
)

func TestContentText(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		text string
		ok   bool
	}{
		{`"hello"`, "hello", true},
		{` "a\nb" `, "a\nb", true},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`, "ab", true},
		{`[]`, "", true},
		{``, "", true},
		{`null`, "", true},
		{`42`, "", false},
		{`{"text":"x"}`, "", false},
		{`["a","b"]`, "", false}, // a completions prompt list, not message content
		{`"unterminated`, "", false},
	} {
		text, ok := ContentText(json.RawMessage(tc.raw))
		if text != tc.text || ok != tc.ok {
			t.Errorf("ContentText(%s) = %q, %v; want %q, %v", tc.raw, text, ok, tc.text, tc.ok)
		}
	}
}

// FuzzContentText: never panics, and a string always reads back as itself.
func FuzzContentText(f *testing.F) {
	for _, s := range []string{`"x"`, `[{"type":"text","text":"y"}]`, `[1,2]`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ContentText(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if got, ok := ContentText(raw); !ok || got != s {
				t.Fatalf("string %q read as %q, %v", s, got, ok)
			}
		}
	})
}

package jsonscan

import (
	"encoding/json"
	"testing"
)

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "é日本", "<a href='x&y'>", "\b\f\n\r\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
		}
		want, _ := json.Marshal(s) // replaces invalid UTF-8 the same way
		var wantBack string
		json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("%q round-trips to %q, encoding/json gives %q", s, back, wantBack)
		}
		// AppendStringStd is encoding/json's bytes exactly.
		if std := AppendStringStd(nil, s); string(std) != string(want) {
			t.Fatalf("AppendStringStd(%q) = %s, encoding/json writes %s", s, std, want)
		}
	})
}

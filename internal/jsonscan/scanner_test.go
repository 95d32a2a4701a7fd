package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		in       string
		maxDepth int
		ok       bool
		rest     string // what is left after the value
	}{
		{`"abc"`, 0, true, ""},
		{` "a\"b\\c\/\b\f\n\r\t\u00e9\uD83D\uDE00" ,`, 0, true, " ,"},
		{`"\ud800"`, 0, true, ""}, // lone surrogate: valid JSON, decoded as U+FFFD
		{"\"caf\xc3\xa9 \xff\"", 0, true, ""},
		{`"\q"`, 0, false, ""},
		{`"\u12G4"`, 0, false, ""},
		{`"\u12"`, 0, false, ""},
		{"\"tab\there\"", 0, false, ""},
		{`"open`, 0, false, ""},
		{`"ends in backslash\`, 0, false, ""},
		{`0`, 0, true, ""},
		{`-0.5e+10]`, 0, true, "]"},
		{`01`, 0, true, "1"}, // the number is 0; the caller then sees "1"
		{`-`, 0, false, ""},
		{`1.`, 0, false, ""},
		{`1e`, 0, false, ""},
		{`+1`, 0, false, ""},
		{`.5`, 0, false, ""},
		{`true`, 0, true, ""},
		{`false`, 0, true, ""},
		{`null`, 0, true, ""},
		{`nul`, 0, false, ""},
		{`True`, 0, false, ""},
		{`{}`, 0, true, ""},
		{`[]`, 0, true, ""},
		{`[1]`, 0, false, ""}, // an element is one level down
		{`[1]`, 1, true, ""},
		{`{"a":[1,{"b":null}],"c":"d"}`, 3, true, ""}, // null is 3 levels down
		{`{"a":[1,{"b":null}],"c":"d"}`, 2, false, ""},
		{`{ "a" : 1 , "b" : [ ] } x`, 1, true, " x"},
		{`{"a":1,}`, 1, false, ""},
		{`[1,]`, 1, false, ""},
		{`[1 2]`, 1, false, ""},
		{`{"a" 1}`, 1, false, ""},
		{`{1:2}`, 1, false, ""},
		{`{"a":1`, 1, false, ""},
		{``, 0, false, ""},
		{`}`, 0, false, ""},
	} {
		s := New([]byte(tc.in))
		ok := s.Skip(tc.maxDepth)
		if ok != tc.ok {
			t.Errorf("Skip(%q, %d) = %v, want %v", tc.in, tc.maxDepth, ok, tc.ok)
			continue
		}
		if ok && tc.in[s.Pos():] != tc.rest {
			t.Errorf("Skip(%q) left %q, want %q", tc.in, tc.in[s.Pos():], tc.rest)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		in           string
		str          string
		strOK        bool
		plain        string
		plainOK, key bool
	}{
		{`"abc":`, "abc", true, "abc", true, true},
		{` "a b" :`, "a b", true, "a b", true, true},
		{`"abc"`, "abc", true, "abc", true, false},
		{`"a\nb":`, "a\nb", true, "", false, false},
		{`"é":`, "é", true, "", false, false},
		{"\"\xff\"", "\uFFFD", true, "", false, false},
		{`"\uD83D\uDE00"`, "😀", true, "", false, false},
		{`"\uD83D\u0041"`, "\uFFFDA", true, "", false, false},
		{`"\uDE00\uD83D"`, "\uFFFD\uFFFD", true, "", false, false},
		{`"\uD83Dx"`, "\uFFFDx", true, "", false, false},
		{`"\u0000\u001f\/"`, "\x00\x1f/", true, "", false, false},
		{`"\x"`, "", false, "", false, false},
		{"\"a\x01\"", "", false, "", false, false},
		{`abc`, "", false, "", false, false},
		{`"abc`, "", false, "", false, false},
	} {
		s := New([]byte(tc.in))
		if got, ok := s.Str(); ok != tc.strOK || got != tc.str {
			t.Errorf("Str(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.str, tc.strOK)
		}
		s = New([]byte(tc.in))
		if got, ok := s.PlainString(); ok != tc.plainOK || got != tc.plain {
			t.Errorf("PlainString(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.plain, tc.plainOK)
		}
		s = New([]byte(tc.in))
		if k, ok := s.Key(); ok != tc.key || ok && string(k) != tc.plain {
			t.Errorf("Key(%q) = %q, %v; want %q, %v", tc.in, k, ok, tc.plain, tc.key)
		}
	}
}

func TestTokens(t *testing.T) {
	s := New([]byte(" { null ,true false 12.5e-3 x"))
	if s.Peek() != '{' || !s.Consume('{') || s.Consume('{') {
		t.Fatal("Peek/Consume on '{'")
	}
	if !s.Null() || !s.Consume(',') || s.Null() || !s.Literal("true") || !s.Literal("false") {
		t.Fatal("literals")
	}
	if n, ok := s.Number(); !ok || string(n) != "12.5e-3" {
		t.Fatalf("Number = %q, %v", n, ok)
	}
	if s.End() || s.Peek() != 'x' {
		t.Fatal("End before x")
	}
	s = New([]byte("  \t\r\n"))
	if s.Peek() != 0 || !s.End() || s.Consume(' ') {
		t.Fatal("whitespace-only input")
	}
}

// Deep input is refused without recursing further than maxDepth.
func TestSkipDepthBound(t *testing.T) {
	deep := []byte(strings.Repeat("[", 1e6))
	s := New(deep)
	if s.Skip(64) {
		t.Fatal("accepted a million open brackets")
	}
	nested := []byte(strings.Repeat("[", 65) + strings.Repeat("]", 65))
	if s := New(nested); s.Skip(63) || !func() bool { s := New(nested); return s.Skip(64) }() {
		t.Fatal("depth bound off by one")
	}
}

var fuzzSeeds = []string{
	`{"a":[1,-2.5e3,true,false,null,{"b":"c"}],"d":"\u00e9\n"}`,
	`"\uD83D\uDE00\uD800\u0041"`,
	"\"\xff\xc3\xa9\"",
	`[01]`, `1e+`, `{"a":1,}`, `"\q"`, ` null `, `[[[[]]]]`, `{"":""}`,
}

// FuzzScanner checks the scanner against encoding/json on arbitrary
// input: Skip accepts exactly what json.Valid accepts (never more, and,
// with no depth bound in the way, never less); Str, PlainString and Number
// accept only valid tokens and decode strings exactly as encoding/json.
func FuzzScanner(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// encoding/json refuses nesting deeper than 10,000; short inputs
		// cannot reach it, so there the two must agree both ways.
		s := New(in)
		skipped := s.Skip(len(in)) && s.End()
		if valid := json.Valid(in); skipped && !valid || !skipped && valid && len(in) < 9000 {
			t.Fatalf("Skip+End = %v, json.Valid = %v for %q", skipped, valid, in)
		}

		trimmed := bytes.TrimLeft(in, " \t\r\n")
		if len(trimmed) == 0 || trimmed[0] != '"' {
			s = New(in)
			if _, ok := s.Str(); ok {
				t.Fatalf("Str accepted %q", in)
			}
			if n, ok := s.Number(); ok && s.End() {
				var v json.Number
				if err := json.Unmarshal(n, &v); err != nil || string(v) != string(n) {
					t.Fatalf("Number accepted %q: %v", n, err)
				}
			}
			return
		}
		s = New(in)
		got, ok := s.Str()
		tok := in[:s.Pos()]
		if ok {
			var want string
			if err := json.Unmarshal(tok, &want); err != nil {
				t.Fatalf("Str accepted %q: %v", tok, err)
			}
			if got != want {
				t.Fatalf("Str(%q) = %q, encoding/json %q", tok, got, want)
			}
		}
		// On a whole input that is one string, Str says yes exactly when
		// encoding/json does.
		var whole string
		s = New(in)
		_, ok = s.Str()
		if wholeOK := json.Unmarshal(in, &whole) == nil; (ok && s.End()) != wholeOK {
			t.Fatalf("Str+End = %v, encoding/json ok = %v for %q", ok && s.End(), wholeOK, in)
		}
		s = New(in)
		if p, ok := s.PlainString(); ok {
			var want string
			if err := json.Unmarshal(in[:s.Pos()], &want); err != nil || p != want {
				t.Fatalf("PlainString(%q) = %q, encoding/json %q, %v", in[:s.Pos()], p, want, err)
			}
		}
	})
}

func BenchmarkSkip(b *testing.B) {
	in := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,"completion_tokens":3}}`)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s := New(in)
		if !s.Skip(8) || !s.End() {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkStrEscaped(b *testing.B) {
	in := []byte(`"You are a helpful assistant.\nAnswer briefly: \"yes\" or \"no\" \u00e9."`)
	b.ReportAllocs()
	for b.Loop() {
		s := New(in)
		if _, ok := s.Str(); !ok {
			b.Fatal("rejected")
		}
	}
}

func TestKeyIs(t *testing.T) {
	for _, tc := range []struct {
		key, name string
		want      bool
	}{
		{"model", "model", true},
		{"MoDeL", "model", true},
		{"max_TOKENS", "max_tokens", true},
		{"model", "models", false},
		{"modem", "model", false},
		{"", "", true},
		{"[", "{", false}, // 0x5B and 0x7B differ by the case bit but are not letters
	} {
		if got := KeyIs([]byte(tc.key), tc.name); got != tc.want {
			t.Errorf("KeyIs(%q, %q) = %v", tc.key, tc.name, got)
		}
	}
}

// Array and Object check the punctuation and hand each element or field
// to the caller, whose "no" stops the scan.
func TestArrayObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		seen string // the elements' numbers or the keys, in order
	}{
		{`[]`, true, ""},
		{` [ 1 , 2 ,3 ] `, true, "123"},
		{`[1,]`, false, "1"},
		{`[1 2]`, false, "1"},
		{`[1`, false, "1"},
		{`[,1]`, false, ""},
		{`[7]`, false, "7"}, // the caller refuses 7
		{`null`, false, ""},
		{`{}`, true, ""},
		{` { "a" : 1 , "b":2 } `, true, "ab"},
		{`{"a":1,}`, false, "a"},
		{`{"a":1 "b":2}`, false, "a"},
		{`{"a" 1}`, false, ""},
		{`{"\u0061":1}`, false, ""}, // escaped keys are the caller's fallback's
		{`{"x":1}`, false, "x"},     // the caller refuses x
	} {
		var seen strings.Builder
		s := New([]byte(tc.in))
		var ok bool
		if strings.HasPrefix(strings.TrimSpace(tc.in), "{") {
			ok = s.Object(func(k []byte) bool {
				seen.Write(k)
				_, ok := s.Number()
				return ok && string(k) != "x"
			})
		} else {
			ok = s.Array(func() bool {
				n, ok := s.Number()
				seen.Write(n)
				return ok && string(n) != "7"
			})
		}
		if ok && !s.End() {
			t.Errorf("%q: input left over after %d bytes", tc.in, s.Pos())
		}
		if ok != tc.ok || seen.String() != tc.seen {
			t.Errorf("%q: ok %v saw %q; want %v, %q", tc.in, ok, seen.String(), tc.ok, tc.seen)
		}
	}
}

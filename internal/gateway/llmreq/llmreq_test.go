package llmreq

import (
	"reflect"
	"strings"
	"testing"
)

// benchBody is a typical short chat request.
var benchBody = []byte(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"system","content":"You are a helpful assistant that answers briefly and precisely."},{"role":"user","content":"What is the capital of France?"}]}`)

var parseSeeds = []string{
	string(benchBody),
	`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}]}`,
	`{"model":"claude","max_tokens":1024,"system":[{"type":"text","text":"policy","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image","source":{"type":"base64","data":"AAAA"}}]}],"stream":true}`,
	`{"model":"m","prompt":["a","b"],"max_completion_tokens":5}`,
	`{"model":"m","prompt":"text","stream":false,"temperature":0.5,"stop":["\n"],"logit_bias":{"1":-100}}`,
	`{"Model":"m","STREAM":true,"messages":[{"ROLE":"user","Content":"x"}]}`,
	`{"model":"m\u00e9","messages":[{"role":"user","content":"caf\u00e9 \"q\" \\ é日本"}]}`,
	`{"model":"m","messages":[null]}`,
	`{"model":"m","messages":[{"role":"a","content":"x"}],"messages":[{"content":"y"}]}`,
	`{"model":"m","messages":[{"role":"user","content":["a",{"type":"text","text":"b"}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`,
	`{"model":"m","max_tokens":1.5}`,
	`{"model":"m","max_tokens":1e3}`,
	`{"model":"m","max_tokens":99999999999999999999}`,
	`{"model":"m","max_tokens":-0}`,
	`{"model":"m","stream":"yes"}`,
	`{"model":5}`,
	`{"model":null,"stream":null,"max_tokens":null,"messages":null,"system":null,"prompt":null}`,
	`{"model":"m"} x`,
	`{"model":"m",}`,
	`[1,2]`,
	`null`,
	`{"mod\u0065l":"m"}`,
	"{\"model\":\"m\xff\"}",
	`{"model":"m","messages":[{"role":"user","content":{"a":[[[[1]]]]}}]}`,
	`{"model":"m","x":[01]}`,
	`{"model":"m","x":"\ud800"}`,
	`{"model":"m","x":"\q"}`,
	`{"model":"m","messages":[{"role":"developer","content":[]}],"system":[]}`,
	"{\"model\":\"m\",\"x\":\"tab\there\"}",
	`{"model":"m","messages":[{"role":"user","content":"x"},]}`,
	``,
	`   {"model" : "m" , "stream" : true }   `,
}

// The scanner and encoding/json agree on every body the scanner accepts,
// and the scanner accepts the common shapes (so the fast path is taken).
func TestParseRequestMatchesEncodingJSON(t *testing.T) {
	for _, in := range parseSeeds {
		checkParse(t, []byte(in))
	}
	checkParse(t, escapedBody)
	for _, in := range parseSeeds[:7] {
		if _, ok := scan([]byte(in)); !ok {
			t.Errorf("the scanner declined a common body: %s", in)
		}
	}
	// Deep nesting is left to encoding/json (and its depth limit).
	deep := `{"model":"m","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`
	if _, ok := scan([]byte(deep)); ok {
		t.Error("the scanner accepted 200 levels of nesting")
	}
	checkParse(t, []byte(deep))
}

func checkParse(t *testing.T, in []byte) {
	t.Helper()
	ref, refErr := parseJSON(in)
	got, ok := scan(in)
	if ok && refErr != nil {
		t.Fatalf("scanner accepted %q, encoding/json: %v", in, refErr)
	}
	if ok && !reflect.DeepEqual(got, ref) {
		t.Fatalf("%q:\nscanner       %+v\nencoding/json %+v", in, got, ref)
	}
	p, err := Parse(in)
	if (err != nil) != (refErr != nil) || err == nil && !reflect.DeepEqual(p, ref) {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v, %v", in, p, err, ref, refErr)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkParse(t, in) })
}

func BenchmarkParseRequest(b *testing.B) { benchParse(b, benchBody) }

// escapedBody is a chat request whose texts carry the escapes real prompts
// do (newlines, quotes, a non-ASCII letter): the scanner decodes them
// itself rather than handing each string to encoding/json.
var escapedBody = []byte(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"system","content":"You are a helpful assistant.\nAnswer in one line."},{"role":"user","content":"Translate \"caf\u00e9\" into English.\nThen stop."}]}`)

func BenchmarkParseRequestEscaped(b *testing.B) { benchParse(b, escapedBody) }

func benchParse(b *testing.B, body []byte) {
	if _, ok := scan(body); !ok {
		b.Fatal("the scanner declined the benchmark body")
	}
	for _, bc := range []struct {
		name string
		f    func([]byte) (Request, error)
	}{{"scanner", Parse}, {"encoding-json", parseJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.f(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

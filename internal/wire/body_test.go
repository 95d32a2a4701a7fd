package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"testing"

	"github.com/ttft-dev/ttft/internal/workload"
)

func checkBody(t testing.TB, api API, req *workload.Request, opt *RequestOptions) {
	t.Helper()
	want, werr := bodyMap(api, req, opt)
	got, gerr := Body(api, req, opt)
	if (werr != nil) != (gerr != nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%s: error %v, want %v", api, gerr, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: template body differs from the map's:\n got %s\nwant %s", api, got, want)
	}
}

func TestBodyTemplateMatches(t *testing.T) {
	if n := reflect.TypeFor[workload.Message]().NumField(); n != 2 {
		t.Fatalf("workload.Message has %d fields: teach Requester.appendMessages the new ones", n)
	}
	reqs := []*workload.Request{
		{Messages: []workload.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi <&> \"q\"\n\t\x01\xff\u2028é"}}, MaxTokens: 64, MinTokens: 64},
		{Messages: []workload.Message{{Role: "system", Content: "a"}, {Role: "system", Content: "b"}, {Role: "user", Content: "c"}, {Role: "assistant", Content: "d"}}},
		{Prompt: "once upon a time", MaxTokens: 7},
		{Prompt: "p", Messages: []workload.Message{{Role: "user", Content: "m1"}, {Role: "user", Content: "m2"}}},
		{Messages: []workload.Message{{Role: "user", Content: "m1"}, {Role: "user", Content: "m2"}}, MaxTokens: -1, MinTokens: -3},
		{},
		{Messages: []workload.Message{}},
	}
	opts := []*RequestOptions{
		{Model: "m", Temperature: 0.7},
		{Model: "llama<3>", NoTemperature: true, NoUsage: true, MaxTokensField: "max_completion_tokens"},
		{Model: "m", Temperature: 1e-7, ExtraBody: map[string]any{"top_k": 5, "model": "override", "min_tokens": 3, "a": []any{1, "x", nil}, "zz": map[string]any{"k": true}, "<key>": "v", "": 1}},
		{Model: "m", ExtraBody: map[string]any{"bad": math.NaN()}},
		{Model: "m", Temperature: math.Inf(1)},
		{Model: "m", MaxTokensField: "model"},
		{Model: "m", MaxTokensField: "stream_options"},
		{Model: "m", ExtraBody: map[string]any{"raw": json.RawMessage(` { "a" : [1, 2] } `), "stream": false}},
	}
	for _, api := range []API{OpenAIChat, OpenAICompletions, Anthropic} {
		for _, opt := range opts {
			for _, req := range reqs {
				checkBody(t, api, req, opt)
			}
		}
	}
}

func FuzzBodyTemplate(f *testing.F) {
	f.Add("model", "system", "hi <&>", "prompt", 64, 0, 0.7, "extra", "max_tokens", false, false)
	f.Add("m", "", "\xff\b\f\u2029", "", -1, 5, 1e21, "stream", "model", true, true)
	f.Fuzz(func(t *testing.T, model, sys, user, prompt string, maxTok, minTok int, temp float64, extraKey, maxField string, noTemp, noUsage bool) {
		var msgs []workload.Message
		if sys != "" {
			msgs = append(msgs, workload.Message{Role: "system", Content: sys})
		}
		if user != "" {
			msgs = append(msgs, workload.Message{Role: "user", Content: user})
		}
		req := &workload.Request{Messages: msgs, Prompt: prompt, MaxTokens: maxTok, MinTokens: minTok}
		opt := &RequestOptions{Model: model, Temperature: temp, NoTemperature: noTemp, NoUsage: noUsage, MaxTokensField: maxField,
			ExtraBody: map[string]any{extraKey: user}}
		for _, api := range []API{OpenAIChat, OpenAICompletions, Anthropic} {
			checkBody(t, api, req, opt)
		}
	})
}

// TestRequesterHeaders: a run's prepared header is what NewRequest always
// set, and a request's Set or Add does not reach another request's (their
// value slices are shared, full, and so copied on Add).
func TestRequesterHeaders(t *testing.T) {
	opt := &RequestOptions{Model: "m", APIKey: "k", Headers: http.Header{"Accept": {"x/y"}, "X-A": {"1", "2"}}}
	q := NewRequester(Anthropic, "http://h", opt)
	a, err := q.New(context.Background(), &workload.Request{Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := q.New(context.Background(), &workload.Request{Prompt: "p"})
	a.Header.Set("X-Request-Id", "1")
	a.Header.Add("X-A", "3")
	if b.Header.Get("X-Request-Id") != "" || len(b.Header["X-A"]) != 2 {
		t.Fatal("requests share a header")
	}
	want := http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream", "x/y"}, "Accept-Encoding": {"identity"},
		"X-A": {"1", "2"}, "X-Api-Key": {"k"}, "Anthropic-Version": {AnthropicVersion}}
	if !reflect.DeepEqual(b.Header, want) {
		t.Fatalf("header %v, want %v", b.Header, want)
	}
	if a.URL.String() != "http://h/v1/messages" || a.ContentLength == 0 || a.GetBody == nil {
		t.Fatalf("request %v %d", a.URL, a.ContentLength)
	}
}

func BenchmarkBody(b *testing.B) {
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: "Summarise the following text in one line: the quick brown fox jumps over the lazy dog."}}, MaxTokens: 128}
	opt := &RequestOptions{Model: "meta-llama/Llama-3.1-8B-Instruct", Temperature: 0.7}
	b.Run("template", func(b *testing.B) {
		b.ReportAllocs()
		q := NewRequester(OpenAIChat, "", opt)
		for b.Loop() {
			_, _ = q.AppendBody(nil, req)
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = bodyMap(OpenAIChat, req, opt)
		}
	})
}

package epp

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

func TestParseBody(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       llmreq.Request
		err        bool
	}{
		{"empty", ``, llmreq.Request{}, false},
		{"openai chat", `{"model":"m","stream":true,"max_tokens":7,"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			llmreq.Request{Model: "m", Stream: true, MaxTokens: 7, Messages: []llmreq.Msg{{Role: "system", Text: "S"}, {Role: "user", Text: "ab"}}}, false},
		{"max_completion_tokens", `{"model":"m","max_completion_tokens":9}`, llmreq.Request{Model: "m", MaxCompletionTokens: 9}, false},
		{"anthropic", `{"model":"c","max_tokens":5,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":"hi"}]}`,
			llmreq.Request{Model: "c", MaxTokens: 5, System: "sys", Messages: []llmreq.Msg{{Role: "user", Text: "hi"}}}, false},
		{"completions string", `{"model":"m","prompt":"once"}`, llmreq.Request{Model: "m", Prompt: "once"}, false},
		{"completions strings", `{"model":"m","prompt":["a","b"]}`, llmreq.Request{Model: "m", Prompt: "ab"}, false},
		{"not json", `{"model":`, llmreq.Request{}, true},
		{"wrong type", `{"model":3}`, llmreq.Request{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseBody([]byte(c.body))
			if (err != nil) != c.err {
				t.Fatalf("error %v, want error %v", err, c.err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(c.want)
			if !c.err && string(gj) != string(wj) {
				t.Errorf("got %s\nwant %s", gj, wj)
			}
		})
	}
}

// The picker and the gateway must hash an OpenAI request and the same
// prompt as an Anthropic request alike, so that prefix affinity survives
// a client's choice of API.
func TestHashAgreesAcrossAPIs(t *testing.T) {
	sys := strings.Repeat("shared system prompt ", 50)
	oa, _ := parseBody([]byte(`{"model":"m","messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"q"}]}`))
	an, _ := parseBody([]byte(`{"model":"m","system":"` + sys + `","messages":[{"role":"user","content":"q"}]}`))
	h1, h2 := sched.NewBlockHasher(0), sched.NewBlockHasher(0)
	oa.Hash(h1)
	an.Hash(h2)
	if len(h1.Hashes()) == 0 || len(h1.Hashes()) != len(h2.Hashes()) || h1.Hashes()[0] != h2.Hashes()[0] {
		t.Errorf("hashes differ: %d vs %d blocks", len(h1.Hashes()), len(h2.Hashes()))
	}
}

func TestResolveSLO(t *testing.T) {
	hm := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	chat, _ := sched.ClassSLO("chat")
	code, _ := sched.ClassSLO("code")
	for _, c := range []struct {
		name      string
		h         *corev3.HeaderMap
		def       string
		want      time.Duration
		wantClass string
		err       bool
	}{
		{"none", hm(), "", 0, "none", false},
		{"default class", hm(), "code", code, "code", false},
		{"class header", hm("x-slo-class", "Chat"), "code", chat, "chat", false},
		{"ms header", hm("x-ttft-slo-ms", "250"), "", 250 * time.Millisecond, "custom", false},
		{"ms with class", hm("X-Ttft-Slo-Ms", "90", "x-slo-class", "code"), "", 90 * time.Millisecond, "code", false},
		{"value field", &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-slo-class", Value: "chat"}}}, "", chat, "chat", false},
		{"bad ms", hm("x-ttft-slo-ms", "-1"), "", 0, "", true},
		{"NaN ms", hm("x-ttft-slo-ms", "NaN"), "", 0, "", true},
		{"bad class", hm("x-slo-class", "gold"), "", 0, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, class, err := resolveSLO(c.h, c.def)
			if (err != nil) != c.err || d != c.want || (!c.err && class != c.wantClass) {
				t.Errorf("got %v %q %v; want %v %q error %v", d, class, err, c.want, c.wantClass, c.err)
			}
		})
	}
}

func TestSubsetHintDecoding(t *testing.T) {
	md := func(v *structpb.Value) *corev3.Metadata { return lbMetadata(SubsetNamespace, SubsetKey, v) }
	list := func(ss ...string) *structpb.Value {
		vs := make([]*structpb.Value, len(ss))
		for i, s := range ss {
			vs[i] = structpb.NewStringValue(s)
		}
		return structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	for _, c := range []struct {
		name    string
		md      *corev3.Metadata
		want    []string
		present bool
	}{
		{"absent", nil, nil, false},
		{"other namespace", lbMetadata("envoy.lb", SubsetKey, list("1.2.3.4:80")), nil, false},
		{"list", md(list("1.2.3.4:80", "5.6.7.8:80")), []string{"1.2.3.4:80", "5.6.7.8:80"}, true},
		{"comma string", md(structpb.NewStringValue("1.2.3.4:80, 5.6.7.8:80")), []string{"1.2.3.4:80", "5.6.7.8:80"}, true},
		{"empty list", md(list()), nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := subsetHint(c.md, SubsetNamespace, SubsetKey)
			if ok != c.present || strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("got %v %v, want %v %v", got, ok, c.want, c.present)
			}
		})
	}
}

func TestStreamScanner(t *testing.T) {
	openai := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n" +
		"data: [DONE]\n\n"
	anthropic := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	cut := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	for _, c := range []struct {
		name       string
		stream     string
		firstAt    int // byte offset of the end of the first token's line
		done       bool
		neverFirst bool
	}{
		{"openai", openai, strings.Index(openai, "\"Hi\"") + len("\"Hi\"}}]}\n"), true, false},
		{"anthropic", anthropic, strings.Index(anthropic, "\"Hi\"") + len("\"Hi\"}}\n"), true, false},
		{"cut", cut, len("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n"), false, false},
		{"role only", "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: [DONE]\n\n", 0, true, true},
		{"error event", "event: error\ndata: {\"type\":\"error\"}\n\n", 0, true, true},
	} {
		// Every split of the stream into two chunks gives the same answer,
		// and the first token is found in the chunk holding its line's end.
		for cutAt := 0; cutAt <= len(c.stream); cutAt++ {
			var s streamScanner
			a := s.feed([]byte(c.stream[:cutAt]))
			b := s.feed([]byte(c.stream[cutAt:]))
			if c.neverFirst {
				if a || b {
					t.Fatalf("%s split at %d: a first token where there is none", c.name, cutAt)
				}
			} else if wantA := cutAt >= c.firstAt; a != wantA || b == wantA {
				t.Fatalf("%s split at %d: first token in chunk a=%v b=%v, want a=%v", c.name, cutAt, a, b, wantA)
			}
			if s.done != c.done {
				t.Fatalf("%s split at %d: done %v, want %v", c.name, cutAt, s.done, c.done)
			}
		}
	}
}

func TestStreamScannerLongLine(t *testing.T) {
	var s streamScanner
	long := "data: {\"x\":\"" + strings.Repeat("a", maxPendingLine) + "\"}"
	for i := 0; i < len(long); i += 1000 {
		s.feed([]byte(long[i:min(i+1000, len(long))]))
	}
	if cap(s.pending) > 2*maxPendingLine {
		t.Errorf("pending grew to %d bytes", cap(s.pending))
	}
	if !s.feed([]byte("\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n")) {
		t.Error("scanner lost its place after an overlong line")
	}
}

func TestEndpointValidate(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{{"127.0.100.1:8000", true}, {"[::1]:80", true}, {"pod.local:8000", false}, {"127.0.0.1", false}, {"127.0.0.1:0", false}, {"127.0.0.1:x", false}} {
		if err := (Endpoint{Addr: c.addr}).Validate(); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.addr, err, c.ok)
		}
	}
}

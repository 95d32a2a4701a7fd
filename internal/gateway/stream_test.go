package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/wire"
)

func TestSplitEvents(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		rest string
	}{
		{"data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}, ""},
		{"data: a\r\n\r\ndata: b", []string{"data: a\r\n\r\n"}, "data: b"},
		{"event: x\ndata: y\n\ndata: partial\n", []string{"event: x\ndata: y\n\n"}, "data: partial\n"},
		{"data: a\r\r", nil, "data: a\r\r"}, // trailing CR undecided
		{"data: a\r\rdata: b\r\r\n", []string{"data: a\r\r", "data: b\r\r\n"}, ""},
		{"", nil, ""},
		{"\n\ndata: a\n\n\ndata: b\n", []string{"\n", "\n", "data: a\n\n", "\n"}, "data: b\n"},
		{"data: a\n\n\n", []string{"data: a\n\n", "\n"}, ""},
	} {
		var got []string
		k := splitEvents([]byte(tc.in), func(ev []byte) { got = append(got, string(ev)) })
		if !slices.Equal(got, tc.want) || tc.in[k:] != tc.rest {
			t.Errorf("%q: events %q rest %q; want %q rest %q", tc.in, got, tc.in[k:], tc.want, tc.rest)
		}
	}
}

// FuzzSplitEvents checks the pass-through's framing: however the input is
// chunked, the events found are the same, and the bytes they span plus the
// kept tail are exactly the input (nothing dropped, duplicated or reordered).
func FuzzSplitEvents(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"), uint8(5))
	f.Add([]byte("event: content_block_delta\r\ndata: {}\r\n\r\n"), uint8(3))
	f.Add([]byte("\r\r\n\n\r"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		// The LF-only fast path agrees with the general splitter.
		if bytes.IndexByte(in, '\r') < 0 {
			var fast, general [][]byte
			kf := splitEventsLF(in, func(ev []byte) { fast = append(fast, bytes.Clone(ev)) })
			kg := splitEventsAny(in, false, func(ev []byte) { general = append(general, bytes.Clone(ev)) })
			if kf != kg || !slices.EqualFunc(fast, general, bytes.Equal) {
				t.Fatalf("LF fast path: %q up to %d; general: %q up to %d", fast, kf, general, kg)
			}
		}
		var whole [][]byte
		k := splitEvents(in, func(ev []byte) { whole = append(whole, bytes.Clone(ev)) })
		if !bytes.Equal(bytes.Join(whole, nil), in[:k]) {
			t.Fatal("events do not concatenate to the consumed prefix")
		}
		// Feed in chunks as the proxy does: pending = tail + next chunk.
		step := int(chunk%16) + 1
		var pending, out []byte
		var events [][]byte
		for i := 0; i < len(in); i += step {
			pending = append(pending, in[i:min(i+step, len(in))]...)
			n := splitEvents(pending, func(ev []byte) { events = append(events, bytes.Clone(ev)) })
			out = append(out, pending[:n]...)
			pending = append([]byte(nil), pending[n:]...)
		}
		if !bytes.Equal(append(out, pending...), in) {
			t.Fatal("chunked pass-through changed the bytes")
		}
		if len(events) != len(whole) {
			t.Fatalf("chunk %d: %d events, whole-buffer %d", step, len(events), len(whole))
		}
		for i := range events {
			if !bytes.Equal(events[i], whole[i]) {
				t.Fatalf("event %d differs: %q vs %q", i, events[i], whole[i])
			}
		}
		// classify must not panic on anything.
		for _, ev := range events {
			classify(ev, false)
			classify(ev, true)
		}
	})
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		ev        string
		anthropic bool
		want      streamInfo
	}{
		{`data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n", false, streamInfo{}},
		{`data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n", false, streamInfo{token: true}},
		{`data: {"choices":[{"text":"x"}]}` + "\n\n", false, streamInfo{token: true}},
		{`data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}` + "\n\n", false, streamInfo{token: true}},
		{`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":42}}` + "\n\n", false, streamInfo{output: 42, input: 5}},
		{`data: {"choices":[],"usage":{"prompt_tokens":500,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":384}}}` + "\n\n", false, streamInfo{output: 4, input: 500, cached: 384, prompt: 500, hasCached: true}},
		{`data: {"choices":[],"usage":{"prompt_tokens":500,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n", false, streamInfo{output: 4, input: 500, prompt: 500, hasCached: true}},
		{"data: [DONE]\n\n", false, streamInfo{done: true}},
		{`data: {"error":{"message":"x"}}` + "\n\n", false, streamInfo{errEv: true}},
		{"event: content_block_delta\ndata: {}\n\n", true, streamInfo{token: true}},
		{"event: message_delta\ndata: {\"usage\":{\"output_tokens\": 17}}\n\n", true, streamInfo{output: 17}},
		{"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n", true, streamInfo{output: 1, input: 12}},
		{"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":380,\"output_tokens\":1}}}\n\n", true, streamInfo{output: 1, input: 20, cached: 380, prompt: 500, hasCached: true}},
		{"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":500,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n", true, streamInfo{output: 1, input: 500, prompt: 500, hasCached: true}},
		{"event: message_stop\ndata: {}\n\n", true, streamInfo{done: true}},
		{"event: error\ndata: {}\n\n", true, streamInfo{errEv: true}},
	} {
		if got := classify([]byte(tc.ev), tc.anthropic); got != tc.want {
			t.Errorf("%q: %+v want %+v", tc.ev, got, tc.want)
		}
	}
}

func TestErrorEventIsValidJSON(t *testing.T) {
	for _, a := range []wire.API{wire.OpenAIChat, wire.Anthropic} {
		ev := errorEvent(a, "backend \"x\"\nfailed")
		var n int
		splitEvents(ev, func([]byte) { n++ })
		if n != 1 {
			t.Fatalf("error event is %d events", n)
		}
		data := ev[bytes.Index(ev, []byte("data: "))+6 : len(ev)-2]
		if !json.Valid(data) {
			t.Fatalf("invalid JSON %s", data)
		}
	}
}

// Error messages reach the client as they were: line breaks, tabs and
// other control characters escaped, not replaced by spaces (the gateway's
// old encoder for them did), in stream error events and in error answers
// of both APIs.
func TestErrorMessagesKeepControlCharacters(t *testing.T) {
	msg := "backend \"x\" failed:\n\tline two\r\x01 \u2028 é \xff"
	want, _ := json.Marshal(msg) // what the client decodes, invalid UTF-8 replaced
	var wantMsg string
	json.Unmarshal(want, &wantMsg)
	for _, api := range []wire.API{wire.OpenAIChat, wire.OpenAICompletions, wire.Anthropic} {
		ev := errorEvent(api, msg)
		data := ev[bytes.Index(ev, []byte("data: "))+6 : len(ev)-2]
		rec := httptest.NewRecorder()
		writeError(rec, api, http.StatusBadGateway, "api_error", msg)
		for what, b := range map[string][]byte{"error event": data, "error answer": rec.Body.Bytes()} {
			var v struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.Error.Message != wantMsg {
				t.Errorf("%s %s: message %q (%v), want %q\n%s", api, what, v.Error.Message, err, wantMsg, b)
			}
		}
	}
}

// TestCanonicalHashAcrossAPIs: the same conversation as an OpenAI request
// (system message, string content) and an Anthropic one ("system" field,
// content parts) hashes to the same blocks.
func TestCanonicalHashAcrossAPIs(t *testing.T) {
	long := string(bytes.Repeat([]byte("policy text "), 100))
	openai := `{"model":"m","messages":[{"role":"system","content":` + string(jsonscan.AppendString(nil, long)) + `},{"role":"user","content":"What is the refund window?"}]}`
	anth := `{"model":"m","system":[{"type":"text","text":` + string(jsonscan.AppendString(nil, long)) + `}],"messages":[{"role":"user","content":[{"type":"text","text":"What is the refund window?"}]}]}`
	hash := func(body string) []uint64 {
		rb, err := llmreq.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		h := sched.NewBlockHasher(0)
		rb.Hash(h)
		return slices.Clone(h.Hashes())
	}
	a, b := hash(openai), hash(anth)
	if len(a) < 4 || !slices.Equal(a, b) {
		t.Fatalf("OpenAI %d blocks, Anthropic %d blocks, equal=%v", len(a), len(b), slices.Equal(a, b))
	}
}

// BenchmarkSplitClassify is what an untranslated event costs the proxy
// (compare with BenchmarkTranslateStream in internal/wire/translate).
func BenchmarkSplitClassify(b *testing.B) {
	ev := []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"finish_reason\":null}]}\n\n")
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		splitEvents(ev, func(e []byte) {
			if classify(e, false).token {
				n++
			}
		})
	}
	if n == 0 {
		b.Fatal("no token")
	}
}

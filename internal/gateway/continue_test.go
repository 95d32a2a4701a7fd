package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/testutil"
	"github.com/ttft-dev/ttft/internal/wire"
)

// TestMidStreamCutContinuedOnAnotherBackend: a backend that dies or stalls
// after three tokens costs the client nothing. The fake backends ignore
// continue_final_message and start their answer over, so this is also the
// case of a new backend repeating what the client has: the repeat is
// dropped, and the client sees every token exactly once, one end, no error
// event, and a usage that counts each token once.
func TestMidStreamCutContinuedOnAnotherBackend(t *testing.T) {
	for _, fault := range []string{"kill-mid", "stall-mid"} {
		for _, anthropic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/anthropic=%v", fault, anthropic), func(t *testing.T) {
				a := newFakeBackend(t, "a", 8)
				b := newFakeBackend(t, "b", 8)
				a.setFault(fault)
				cfg := cfgFor("round-robin", a, b)
				cfg.Limits.IdleStreamTimeout = Duration(500 * time.Millisecond)
				reg := prometheus.NewRegistry()
				var log testutil.SyncBuffer
				_, url := startGateway(t, cfg, Options{Registerer: reg, Gatherer: reg, AccessLog: &log})
				path, body := "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":8,"messages":[{"role":"user","content":"x"}]}`
				if anthropic {
					path, body = "/v1/messages", `{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"x"}]}`
				}
				// Round-robin starts with a: the first request is cut.
				res := readStream(t, post(t, url, path, body, nil), anthropic)
				if res.status != 200 || res.text != expectedText(8) || !res.done || res.errEvent != "" {
					t.Fatalf("status %d text %q done %v error %q\n%s", res.status, res.text, res.done, res.errEvent, res.raw)
				}
				if a.hits.Load() != 1 || b.hits.Load() != 1 {
					t.Fatalf("backend hits a=%d b=%d, want 1 each", a.hits.Load(), b.hits.Load())
				}
				usage := `"completion_tokens":8`
				if anthropic {
					usage = `"output_tokens":8`
				}
				if !strings.Contains(res.raw, usage) {
					t.Errorf("usage does not count each token once (want %s):\n%s", usage, res.raw)
				}
				if n := strings.Count(res.raw, `"role":"assistant"`) + strings.Count(res.raw, "event: message_start"); n > 1 {
					t.Errorf("the role or message start was announced %d times:\n%s", n, res.raw)
				}
				if got := counterSum(t, reg, "ttft_gateway_continuations_total"); got != 1 {
					t.Errorf("ttft_gateway_continuations_total = %v, want 1", got)
				}
				// The access log says where the stream went on.
				for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), `"continued":"a>b (dropped 9 repeated bytes)"`); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("access log does not name the continuation:\n%s", log.String())
					}
				}
			})
		}
	}
}

// TestContinuationBounded: with every backend cutting its streams, a
// stream is continued at most continuation.max times and then ends with an
// error event saying why; each token reached the client once.
func TestContinuationBounded(t *testing.T) {
	var bs []*fakeBackend
	for i := range 4 {
		fb := newFakeBackend(t, fmt.Sprint("b", i), 8)
		fb.setFault("kill-mid")
		bs = append(bs, fb)
	}
	cfg := cfgFor("round-robin", bs...)
	cfg.Continuation.Max = 2
	_, url := startGateway(t, cfg, Options{})
	res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false)
	if res.text != expectedText(3) || res.done || !strings.Contains(res.errEvent, "not continued: exhausted") {
		t.Fatalf("text %q done %v error %q", res.text, res.done, res.errEvent)
	}
	hits := int64(0)
	for _, fb := range bs {
		hits += fb.hits.Load()
	}
	if hits != 3 {
		t.Fatalf("%d backend requests, want 3 (the first and 2 continuations)", hits)
	}
}

// TestContinuationConfig: continuation is on for chat and off for
// completions by default, a route overrides both, and max < 0 turns it off.
func TestContinuationConfig(t *testing.T) {
	on, off := true, false
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		api   wire.API
		model string
		want  bool
	}{
		{"chat default", func(*Config) {}, wire.OpenAIChat, "m", true},
		{"anthropic default", func(*Config) {}, wire.Anthropic, "m", true},
		{"completions default", func(*Config) {}, wire.OpenAICompletions, "m", false},
		{"route off", func(c *Config) { c.Routes = []Route{{Model: "m", Continuation: &off}} }, wire.OpenAIChat, "m", false},
		{"route on for completions", func(c *Config) { c.Routes = []Route{{Model: "m", Continuation: &on}} }, wire.OpenAICompletions, "m", true},
		{"other route", func(c *Config) { c.Routes = []Route{{Model: "small", Continuation: &off}} }, wire.OpenAIChat, "m", true},
		{"max negative", func(c *Config) { c.Continuation.Max = -1 }, wire.OpenAIChat, "m", false},
		{"chat off", func(c *Config) { c.Continuation.Chat = &off }, wire.Anthropic, "m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Backends: []BackendConfig{{Name: "a", URL: "http://127.0.0.1:1"}}}
			tc.edit(&cfg)
			if err := cfg.Validate(nil); err != nil {
				t.Fatal(err)
			}
			g := &Gateway{}
			st := &state{cfg: &cfg, routes: map[string]*Route{}}
			for i := range cfg.Routes {
				st.routes[cfg.Routes[i].Model] = &cfg.Routes[i]
			}
			x := &exchange{api: tc.api, stream: true, model: tc.model}
			if got := g.newSplice(st, x, st.routes[tc.model]) != nil; got != tc.want {
				t.Fatalf("continuation %v, want %v", got, tc.want)
			}
		})
	}
	bad := Config{Backends: []BackendConfig{{Name: "a", URL: "http://127.0.0.1:1"}}, Continuation: Continuation{Max: 11}}
	if err := bad.Validate(nil); err == nil || !strings.Contains(err.Error(), "continuation.max") {
		t.Fatalf("max 11: %v", err)
	}
}

// TestSpliceBlocksWhatCannotContinue: tool-call arguments and reasoning
// are never continued; plain text is recorded exactly, escapes decoded.
func TestSpliceBlocksWhatCannotContinue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		api     wire.API
		events  []string
		text    string
		blocked string
	}{
		{"chat text", wire.OpenAIChat, []string{
			`data: {"choices":[{"delta":{"role":"assistant","content":""}}]}`,
			`data: {"choices":[{"delta":{"content":" a\"b"}}]}`,
			`data: {"choices":[{"delta":{"content":" é\n"}}]}`,
		}, " a\"b é\n", ""},
		{"tool call", wire.OpenAIChat, []string{
			`data: {"choices":[{"delta":{"content":"x"}}]}`,
			`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}`,
		}, "x", blockToolCall},
		{"reasoning", wire.OpenAIChat, []string{`data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}`}, "", blockReasoning},
		{"completions", wire.OpenAICompletions, []string{`data: {"choices":[{"text":" one","index":0}]}`}, " one", ""},
		{"anthropic text", wire.Anthropic, []string{
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}",
		}, "Hi", ""},
		{"anthropic tool", wire.Anthropic, []string{
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\"}}",
		}, "", blockToolCall},
		{"anthropic thinking", wire.Anthropic, []string{
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}",
		}, "", blockReasoning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &splice{api: tc.api, left: 2}
			anthropic := tc.api == wire.Anthropic
			for _, e := range tc.events {
				ev := []byte(e + "\n\n")
				sp.observe(ev, classify(ev, anthropic), anthropic)
			}
			if string(sp.text) != tc.text || sp.blocked != tc.blocked {
				t.Fatalf("text %q blocked %q, want %q and %q", sp.text, sp.blocked, tc.text, tc.blocked)
			}
		})
	}
}

// TestContinuationBody: the request for the rest of the answer, per API.
func TestContinuationBody(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		api        wire.API
		want       map[string]string // field → JSON
		blocked    string
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":10,"min_tokens":10,"stream":true}`, wire.OpenAIChat, map[string]string{
			"messages":               `[{"content":"q","role":"user"},{"content":" a b","role":"assistant"}]`,
			"max_tokens":             "8",
			"min_tokens":             "8",
			"continue_final_message": "true",
			"add_generation_prompt":  "false",
		}, ""},
		{"chat prefilled by the client", `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Sure:"}],"continue_final_message":true}`, wire.OpenAIChat, map[string]string{
			"messages": `[{"content":"q","role":"user"},{"content":"Sure: a b","role":"assistant"}]`,
		}, ""},
		{"completions", `{"model":"m","prompt":"Once","max_tokens":3}`, wire.OpenAICompletions, map[string]string{"prompt": `"Once a b"`, "max_tokens": "1"}, ""},
		{"anthropic", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"}]}`, wire.Anthropic, map[string]string{
			"messages": `[{"content":"q","role":"user"},{"content":" a b","role":"assistant"}]`, "max_tokens": "3",
		}, ""},
		{"max tokens reached", `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":2}`, wire.OpenAIChat, nil, blockMaxTokens},
		{"n > 1", `{"model":"m","messages":[{"role":"user","content":"q"}],"n":2}`, wire.OpenAIChat, nil, blockBody},
		{"token prompt", `{"model":"m","prompt":[1,2,3]}`, wire.OpenAICompletions, nil, blockBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &splice{api: tc.api, body: []byte(tc.body), text: []byte(" a b"), tokens: 2}
			b, why := sp.continuationBody()
			if why != tc.blocked {
				t.Fatalf("blocked %q, want %q", why, tc.blocked)
			}
			if why != "" {
				return
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if string(m[k]) != v {
					t.Errorf("%s = %s, want %s", k, m[k], v)
				}
			}
		})
	}
}

// TestSpliceStripsRepeats: the new stream's text is compared with the text
// so far; a true continuation passes (after at most the events that could
// still be a repeat), a repeat is dropped, a repeat that runs into new text
// is cut at the join.
func TestSpliceStripsRepeats(t *testing.T) {
	chunk := func(s string) string { return `data: {"choices":[{"delta":{"content":"` + s + `"}}]}` + "\n\n" }
	for _, tc := range []struct {
		name string
		cut  string
		in   []string
		want string
	}{
		{"continuation", " the cat", []string{" sat", " down"}, " sat down"},
		{"continuation starting like the text", " the cat", []string{" the", " dog"}, " the dog"},
		{"repeat", " the cat", []string{" the", " cat", " sat"}, " sat"},
		{"repeat across the join", " the cat", []string{" the", " cats", " sat"}, "s sat"},
		{"ends while comparing", " the cat", []string{" the"}, " the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &splice{api: wire.OpenAIChat, text: []byte(tc.cut), tokens: 2}
			sp.begin()
			var got strings.Builder
			emit := func(ev []byte, _ streamInfo) {
				t, _, _, _ := eventText(ev, wire.OpenAIChat)
				got.Write(t)
			}
			for _, s := range tc.in {
				ev := []byte(chunk(s))
				sp.next(ev, classify(ev, false), emit)
			}
			sp.release(emit)
			if got.String() != tc.want {
				t.Fatalf("client got %q, want %q", got.String(), tc.want)
			}
		})
	}
}

// FuzzEventText: the text read from an event and written back into it
// round-trips, and reading never panics.
func FuzzEventText(f *testing.F) {
	f.Add([]byte(`data: {"choices":[{"delta":{"content":" hi"}}]}`+"\n\n"), "x")
	f.Add([]byte(`data: {"choices":[{"delta":{"content":"a\u00e9\"b"}}]}`+"\n\n"), "\n")
	f.Add([]byte(`data: {"choices":[{"delta":{"content":"","content":"y"}}]}`), "")
	f.Fuzz(func(t *testing.T, ev []byte, repl string) {
		if _, _, _, ok := eventText(ev, wire.OpenAIChat); !ok || repl == "" {
			return
		}
		got, _, _, ok := eventText(withText(ev, wire.OpenAIChat, []byte(repl)), wire.OpenAIChat)
		want, _ := json.Marshal(repl)
		var dec string
		json.Unmarshal(want, &dec)
		if !ok || string(got) != dec {
			t.Fatalf("rewritten text %q (ok %v), want %q", got, ok, dec)
		}
	})
}

// BenchmarkSpliceObserve is what continuation adds per token event of a
// stream on the hot path: recording its text (go test ./internal/gateway
// -run XXX -bench SpliceObserve).
func BenchmarkSpliceObserve(b *testing.B) {
	ev := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	si := classify(ev, false)
	sp := &splice{api: wire.OpenAIChat}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%4096 == 0 {
			sp.text, sp.tokens = sp.text[:0], 0 // a stream's length, not the benchmark's
		}
		sp.observe(ev, si, false)
	}
}

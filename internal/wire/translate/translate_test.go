package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ttft-dev/ttft/internal/sse"
	"github.com/ttft-dev/ttft/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixedNow makes "created" fields deterministic in goldens.
var fixedNow = time.Unix(1735689600, 0)

// fixedTranslator is NewStream on fixedNow's clock.
func fixedTranslator(from, to wire.API, model string) *Stream {
	tr := NewStream(from, to, model)
	tr.now = func() time.Time { return fixedNow }
	return tr
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestTranslateRequest(t *testing.T) {
	tests := []struct {
		name     string
		from, to wire.API
		in       string
		want     string // JSON, compared by value
		wantErr  string // a substring of the error
	}{
		{
			name: "anthropic to openai: system blocks, text blocks, sampling, stream, user",
			from: apiAnthropic, to: apiOpenAI,
			in: `{"model":"llama","max_tokens":300,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"type":"text","text":" Be kind."}],
				"messages":[{"role":"user","content":"Hi \"there\"\n"},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"text","text":"Hello"}]},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
				"temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u-1"},"thinking":{"type":"enabled","budget_tokens":1024}}`,
			want: `{"model":"llama","max_tokens":300,"messages":[{"role":"system","content":"Be brief. Be kind."},{"role":"user","content":"Hi \"there\"\n"},{"role":"assistant","content":"Hello"},{"role":"user","content":"ab"}],
				"temperature":0.5,"top_p":0.9,"top_k":40,"stop":["END"],"stream":true,"stream_options":{"include_usage":true},"user":"u-1"}`,
		},
		{
			name: "anthropic to openai: not streamed, no system, null temperature",
			from: apiAnthropic, to: apiOpenAI,
			in:   `{"model":"m","max_tokens":5,"stream":false,"temperature":null,"messages":[{"role":"user","content":"x"}],"tools":[]}`,
			want: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		},
		{name: "anthropic image block", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":[{"type":"image","source":{}}]}]}`,
			wantErr: `messages[2].content[0]: "image" blocks cannot be translated to the OpenAI API`},
		{name: "anthropic document block", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"document","source":{}}]}]}`,
			wantErr: `messages[0].content[1]: "document" blocks`},
		{name: "anthropic tool_use block", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`,
			wantErr: `messages[1].content[0]: "tool_use" blocks`},
		{name: "anthropic tool_result block", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`,
			wantErr: `messages[0].content[0]: "tool_result" blocks`},
		{name: "anthropic tools", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"a"}]}`,
			wantErr: `tools:`},
		{name: "anthropic tool_choice", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"tool_choice":{"type":"auto"},"messages":[{"role":"user","content":"a"}]}`,
			wantErr: `tool_choice:`},
		{name: "anthropic system image", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"a"}]}`,
			wantErr: `system[0]: "image" blocks`},
		{name: "anthropic bad role", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"a"}]}`,
			wantErr: `messages[0].role: "system"`},
		{name: "anthropic content of the wrong type", from: apiAnthropic, to: apiOpenAI,
			in:      `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`,
			wantErr: `messages[0].content: want a string or an array`},
		{name: "anthropic not JSON", from: apiAnthropic, to: apiOpenAI, in: `{"model":`, wantErr: `decoding Anthropic request`},

		{
			name: "openai to anthropic: system and developer lifted, merging, max_completion_tokens wins, stop string",
			from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"claude","messages":[{"role":"system","content":"S1"},{"role":"developer","content":[{"type":"text","text":"S2"}]},
				{"role":"user","content":"u1"},{"role":"user","content":[{"type":"text","text":"u2"},{"type":"text","text":"u3"}]},{"role":"assistant","content":"a1"},{"role":"system","content":"S3"},{"role":"user","content":"u4"}],
				"max_tokens":10,"max_completion_tokens":20,"stop":"###","temperature":0.2,"top_p":1,"stream":true,"stream_options":{"include_usage":true},"user":"x","seed":7,"presence_penalty":0.1,"n":1,"logprobs":false}`,
			want: `{"model":"claude","system":"S1\n\nS2\n\nS3","messages":[{"role":"user","content":[{"type":"text","text":"u1"},{"type":"text","text":"u2u3"}]},{"role":"assistant","content":"a1"},{"role":"user","content":"u4"}],
				"max_tokens":20,"stop_sequences":["###"],"temperature":0.2,"top_p":1,"stream":true}`,
		},
		{
			name: "openai to anthropic: default max_tokens, stop array, null assistant content",
			from: apiOpenAI, to: apiAnthropic,
			in:   `{"model":"c","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null},{"role":"user","content":"r"}],"stop":["a",""],"top_k":3,"tools":null,"response_format":{"type":"text"}}`,
			want: `{"model":"c","messages":[{"role":"user","content":"q"},{"role":"assistant","content":""},{"role":"user","content":"r"}],"max_tokens":4096,"stop_sequences":["a"],"top_k":3}`,
		},
		{
			name: "openai to anthropic: max_tokens when no max_completion_tokens",
			from: apiOpenAI, to: apiAnthropic,
			in:   `{"model":"c","messages":[{"role":"user","content":"q"}],"max_tokens":77}`,
			want: `{"model":"c","messages":[{"role":"user","content":"q"}],"max_tokens":77}`,
		},
		{name: "openai n", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","n":2,"messages":[{"role":"user","content":"q"}]}`, wantErr: `n: 2 choices`},
		{name: "openai tools", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","tools":[{"type":"function"}],"messages":[{"role":"user","content":"q"}]}`, wantErr: `tools:`},
		{name: "openai tool_choice", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","tool_choice":"auto","messages":[{"role":"user","content":"q"}]}`, wantErr: `tool_choice:`},
		{name: "openai functions", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","functions":[{}],"messages":[{"role":"user","content":"q"}]}`, wantErr: `functions:`},
		{name: "openai logprobs", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","logprobs":true,"messages":[{"role":"user","content":"q"}]}`, wantErr: `logprobs:`},
		{name: "openai top_logprobs", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","top_logprobs":3,"messages":[{"role":"user","content":"q"}]}`, wantErr: `top_logprobs:`},
		{name: "openai json mode", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","response_format":{"type":"json_object"},"messages":[{"role":"user","content":"q"}]}`, wantErr: `response_format: "json_object"`},
		{name: "openai image part", from: apiOpenAI, to: apiAnthropic,
			in:      `{"model":"c","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			wantErr: `messages[2].content[1]: "image_url" parts cannot be translated to the Anthropic API`},
		{name: "openai tool message", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","messages":[{"role":"user","content":"q"},{"role":"tool","content":"r","tool_call_id":"1"}]}`, wantErr: `messages[1].role: "tool"`},
		{name: "openai assistant tool_calls", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}]}`, wantErr: `messages[1].tool_calls:`},
		{name: "openai leading assistant", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","messages":[{"role":"system","content":"s"},{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`, wantErr: `messages[1]: the Anthropic API requires the conversation to start with a user message`},
		{name: "openai no conversation", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","messages":[{"role":"system","content":"s"}]}`, wantErr: `messages: the Anthropic API requires at least one user message`},
		{name: "openai bad stop", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","stop":5,"messages":[{"role":"user","content":"q"}]}`, wantErr: `stop: want a string or an array of strings`},
		{name: "openai bad role", from: apiOpenAI, to: apiAnthropic,
			in: `{"model":"c","messages":[{"role":"robot","content":"q"}]}`, wantErr: `messages[0].role: "robot"`},
		{name: "unknown API", from: "gemini", to: apiOpenAI, in: `{}`, wantErr: `unknown API "gemini"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Request([]byte(tt.in), tt.from, tt.to)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q (output %s)", err, tt.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, got, tt.want)
			// The gateway must read the translation as it read the original.
			pin, err1 := parseRequest([]byte(tt.in))
			pout, err2 := parseRequest(got)
			if err1 != nil || err2 != nil || pin.Model != pout.Model || pin.Stream != pout.Stream {
				t.Errorf("parseRequest: in %+v (%v), out %+v (%v)", pin, err1, pout, err2)
			}
		})
	}
	same := []byte(`{"model":"x"}`)
	if got, err := Request(same, apiOpenAI, apiOpenAI); err != nil || !bytes.Equal(got, same) {
		t.Errorf("same API: got %s, %v; want the body unchanged", got, err)
	}
}

func TestTranslateResponse(t *testing.T) {
	tests := []struct {
		name     string
		from, to wire.API
		in       string
		want     string
		wantErr  string
	}{
		{
			name: "openai to anthropic with reasoning and cached prompt",
			from: apiOpenAI, to: apiAnthropic,
			in: `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"qwen3","choices":[{"index":0,"message":{"role":"assistant","content":"Hi <b> & \"you\"","reasoning_content":"think"},"finish_reason":"length"}],
				"usage":{"prompt_tokens":30,"completion_tokens":7,"total_tokens":37,"prompt_tokens_details":{"cached_tokens":10}}}`,
			want: `{"id":"msg_chatcmpl-9","type":"message","role":"assistant","model":"qwen3","content":[{"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"Hi <b> & \"you\""}],
				"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":7,"cache_read_input_tokens":10}}`,
		},
		{
			name: "openai to anthropic: vLLM stop string is a stop_sequence",
			from: apiOpenAI, to: apiAnthropic,
			in:   `{"id":"msg_1","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ab"},"finish_reason":"stop","stop_reason":"###"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
			want: `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ab"}],"stop_reason":"stop_sequence","stop_sequence":"###","usage":{"input_tokens":3,"output_tokens":2}}`,
		},
		{
			name: "openai to anthropic: eos token id is an end_turn, null content an empty text",
			from: apiOpenAI, to: apiAnthropic,
			in:   `{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop","stop_reason":128001}]}`,
			want: `{"id":"msg_x","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":""}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}`,
		},
		{name: "openai tool calls", from: apiOpenAI, to: apiAnthropic,
			in:      `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]},"finish_reason":"tool_calls"}]}`,
			wantErr: `choices[0].message.tool_calls`},
		{name: "openai no choices", from: apiOpenAI, to: apiAnthropic, in: `{"id":"x","choices":[]}`, wantErr: `choices: no choice 0`},
		{
			name: "anthropic to openai with thinking and cache",
			from: apiAnthropic, to: apiOpenAI,
			in: `{"id":"msg_7","type":"message","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"A"},{"type":"text","text":"B\n"}],
				"stop_reason":"stop_sequence","stop_sequence":"X","usage":{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":2,"output_tokens":9}}`,
			want: `{"id":"chatcmpl-msg_7","object":"chat.completion","created":1735689600,"model":"claude","choices":[{"index":0,"message":{"role":"assistant","content":"AB\n","reasoning_content":"hm"},"finish_reason":"stop"}],
				"usage":{"prompt_tokens":107,"completion_tokens":9,"total_tokens":116,"prompt_tokens_details":{"cached_tokens":100}}}`,
		},
		{
			name: "anthropic max_tokens is length",
			from: apiAnthropic, to: apiOpenAI,
			in:   `{"id":"chatcmpl-1","model":"c","content":[],"stop_reason":"max_tokens"}`,
			want: `{"id":"chatcmpl-1","object":"chat.completion","created":1735689600,"model":"c","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}]}`,
		},
		{name: "anthropic tool_use block", from: apiAnthropic, to: apiOpenAI,
			in: `{"id":"m","content":[{"type":"text","text":"x"},{"type":"tool_use","id":"t"}],"stop_reason":"tool_use"}`, wantErr: `content[1]: "tool_use" blocks`},
		{name: "not JSON", from: apiAnthropic, to: apiOpenAI, in: `<html>`, wantErr: `decoding Anthropic message`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := responseAt([]byte(tt.in), tt.from, tt.to, fixedNow)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, got, tt.want)
			// ttft's own client reads the answer back with the same text.
			clientAPI := wire.OpenAIChat
			if tt.to == apiAnthropic {
				clientAPI = wire.Anthropic
			}
			backendAPI := wire.Anthropic
			if tt.from == apiOpenAI {
				backendAPI = wire.OpenAIChat
			}
			c1, err1 := wire.DecodeWhole(backendAPI, []byte(tt.in))
			c2, err2 := wire.DecodeWhole(clientAPI, got)
			if err1 != nil || err2 != nil || c1.Content != c2.Content || c1.Reasoning != c2.Reasoning {
				t.Errorf("decoded text differs: %q/%q (%v) vs %q/%q (%v)", c1.Content, c1.Reasoning, err1, c2.Content, c2.Reasoning, err2)
			}
		})
	}
}

func TestTranslateError(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		status   int
		from, to wire.API
		want     string
	}{
		{"openai error to anthropic", `{"error":{"message":"bad \"model\"","type":"invalid_request_error","param":null,"code":null}}`, 400, apiOpenAI, apiAnthropic,
			`{"type":"error","error":{"type":"invalid_request_error","message":"bad \"model\""}}`},
		{"old vLLM error to anthropic", `{"object":"error","message":"The model ran out of KV cache","type":"InternalServerError","param":null,"code":500}`, 500, apiOpenAI, apiAnthropic,
			`{"type":"error","error":{"type":"api_error","message":"The model ran out of KV cache"}}`},
		{"TGI string error to anthropic", `{"error":"Model is overloaded","error_type":"overloaded"}`, 503, apiOpenAI, apiAnthropic,
			`{"type":"error","error":{"type":"overloaded_error","message":"Model is overloaded"}}`},
		{"FastAPI detail to anthropic", `{"detail":"Not Found"}`, 404, apiOpenAI, apiAnthropic,
			`{"type":"error","error":{"type":"not_found_error","message":"Not Found"}}`},
		{"HTML page to anthropic", "<html>502 Bad Gateway</html>\n", 502, apiOpenAI, apiAnthropic,
			`{"type":"error","error":{"type":"api_error","message":"<html>502 Bad Gateway</html>"}}`},
		{"empty body to openai", ``, 429, apiAnthropic, apiOpenAI,
			`{"error":{"message":"Too Many Requests","type":"rate_limit_error","param":null,"code":429}}`},
		{"anthropic error to openai", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529, apiAnthropic, apiOpenAI,
			`{"error":{"message":"Overloaded","type":"server_error","param":null,"code":529}}`},
		{"anthropic auth error to openai", `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, 401, apiAnthropic, apiOpenAI,
			`{"error":{"message":"invalid x-api-key","type":"authentication_error","param":null,"code":401}}`},
		{"object error without message", `{"error":{"code":"x"}}`, 400, apiAnthropic, apiOpenAI,
			`{"error":{"message":"{\"code\":\"x\"}","type":"invalid_request_error","param":null,"code":400}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jsonEqual(t, Error([]byte(tt.in), tt.status, tt.from, tt.to), tt.want)
		})
	}
	long := bytes.Repeat([]byte("é"), 3000)
	out := Error(long, 500, apiOpenAI, apiAnthropic)
	if len(out) > maxErrorText+200 || !utf8.Valid(out) || !json.Valid(out) {
		t.Errorf("a long non-JSON body must be clipped to valid UTF-8 JSON; got %d bytes", len(out))
	}
}

// translateAll feeds a recorded backend stream through splitEvents and the
// translator, as the gateway would.
func translateAll(tr *Stream, in []byte) []byte {
	var out []byte
	n := splitEvents(in, func(ev []byte) { out = tr.Event(out, ev) })
	if n < len(in) { // a fixture's last event lacking its blank line
		out = tr.Event(out, append(in[n:len(in):len(in)], "\n\n"...))
	}
	return out
}

// decoded is what ttft's own client (internal/wire) reads from a stream.
type decoded struct {
	Content, Reasoning string
	Finish             string
	Usage              *wire.Usage
	Err                string
	Done               bool
	Roles              int
}

func decodeStream(t testing.TB, api wire.API, b []byte) decoded {
	t.Helper()
	var d decoded
	r := sse.NewReader(bytes.NewReader(b), sse.Options{})
	dec := wire.NewDecoder(api)
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return d
		}
		if err != nil {
			t.Fatalf("reading %s stream: %v", api, err)
		}
		if ev.Unterminated {
			t.Fatalf("unterminated event %q", ev.Data)
		}
		var c wire.Chunk
		if err := dec.Decode(ev, &c); err != nil {
			t.Fatalf("decoding %s stream: %v", api, err)
		}
		if d.Done {
			t.Fatalf("event after the end of the stream: %q", ev.Data)
		}
		d.Content += c.Content
		d.Reasoning += c.Reasoning
		if c.Role {
			d.Roles++
		}
		if c.Finish != "" {
			d.Finish = c.Finish
		}
		if c.Usage != nil {
			u := *c.Usage
			d.Usage = &u
		}
		if c.Err != "" {
			d.Err = c.Err
		}
		d.Done = d.Done || c.Done
	}
}

// otherAPI is the API a stream from api is translated to.
func otherAPI(api wire.API) wire.API {
	if api == apiAnthropic {
		return apiOpenAI
	}
	return apiAnthropic
}

// splitEvents calls fn on each complete event at the start of b (its bytes
// through the blank line that ends it) and returns how many bytes they
// span, as the gateway's pass-through splits a backend's stream before
// handing its events to a Stream: lines end in LF, CRLF or CR, and a CR as
// the very last byte waits for a possible LF.
func splitEvents(b []byte, fn func(ev []byte)) int {
	start, lineStart := 0, true
	for i := 0; i < len(b); {
		c := b[i]
		if c != '\r' && c != '\n' {
			i++
			lineStart = false
			continue
		}
		n := 1
		if c == '\r' {
			if i+1 == len(b) {
				break
			}
			if b[i+1] == '\n' {
				n = 2
			}
		}
		i += n
		if lineStart {
			fn(b[start:i])
			start = i
		}
		lineStart = true
	}
	return start
}

// requestFields is a request body as the gateway's reference decoding
// reads it (parseRequestJSON in internal/gateway, which its one-pass
// scanner is fuzzed to agree with; the gateway's own FuzzTranslateRequest
// runs translations through the scanner itself).
type requestFields struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System              json.RawMessage `json:"system"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
}

// parseRequest reads body as the gateway does (requestFields).
func parseRequest(body []byte) (requestFields, error) {
	var r requestFields
	err := json.Unmarshal(body, &r)
	return r, err
}

func TestTranslateStreamGolden(t *testing.T) {
	tests := []struct {
		fixture  string // under internal/
		from, to wire.API
		want     decoded // what the client must read (Usage compared when set)
	}{
		{"wire/testdata/vllm-chat.sse", apiOpenAI, apiAnthropic,
			decoded{Content: "Hello world", Finish: "max_tokens", Usage: &wire.Usage{PromptTokens: 12, CompletionTokens: 2}, Done: true, Roles: 1}},
		{"wire/testdata/reasoning-crlf.sse", apiOpenAI, apiAnthropic,
			decoded{Content: "Answer", Reasoning: "Let me think briefly.", Finish: "end_turn", Usage: &wire.Usage{PromptTokens: 5, CompletionTokens: 4}, Done: true, Roles: 1}},
		{"wire/testdata/vllm-error.sse", apiOpenAI, apiAnthropic,
			decoded{Err: "api_error: The model ran out of KV cache", Roles: 1}},
		{"wire/translate/testdata/anthropic-thinking.sse", apiAnthropic, apiOpenAI,
			decoded{Content: "Hello! 👋 C:\\path — how can I help?", Reasoning: "The user says \"hi\"; answer briefly.\n", Finish: "stop",
				Usage: &wire.Usage{PromptTokens: 50, CompletionTokens: 27}, Done: true, Roles: 1}},
		{"wire/testdata/anthropic.sse", apiAnthropic, apiOpenAI,
			decoded{Content: "Hello!", Finish: "stop", Usage: &wire.Usage{PromptTokens: 125, CompletionTokens: 15}, Done: true, Roles: 1}},
		{"wire/testdata/anthropic-error.sse", apiAnthropic, apiOpenAI,
			decoded{Content: "Par", Err: "overloaded_error: Overloaded", Roles: 1}},
	}
	for _, tt := range tests {
		name := strings.TrimSuffix(filepath.Base(tt.fixture), ".sse") + "." + tt.from.Provider() + "-to-" + tt.to.Provider()
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("..", "..", tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			tr := fixedTranslator(tt.from, tt.to, "client-model")
			out := translateAll(tr, in)
			checkSSE(t, out, tt.to)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs from %s:\n%s", golden, out)
			}
			got := decodeStream(t, tt.to, out)
			if tt.want.Usage == nil {
				got.Usage = nil
			} else if got.Usage != nil {
				got.Usage.CachedPromptTokens = 0
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("client reads %+v (usage %+v)\nwant         %+v (usage %+v)", got, got.Usage, tt.want, tt.want.Usage)
			}
			if tr.Done() != tt.want.Done {
				t.Errorf("Done() = %v, want %v", tr.Done(), tt.want.Done)
			}
			// Nothing is sent after the end or an error.
			if extra := tr.Event(nil, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n")); len(extra) != 0 {
				t.Errorf("event after the end produced %q", extra)
			}
		})
	}
}

// The same stream with LF, CRLF or CR line ends translates identically.
func TestTranslateStreamLineEnds(t *testing.T) {
	in, err := os.ReadFile("testdata/anthropic-thinking.sse")
	if err != nil {
		t.Fatal(err)
	}
	lf := translateAll(fixedTranslator(apiAnthropic, apiOpenAI, ""), in)
	for _, nl := range []string{"\r\n", "\r"} {
		other := bytes.ReplaceAll(in, []byte("\n"), []byte(nl))
		got := translateAll(fixedTranslator(apiAnthropic, apiOpenAI, ""), other)
		if !bytes.Equal(got, lf) {
			t.Errorf("line end %q: output differs:\n%s", nl, got)
		}
	}
}

func TestTranslateStreamEdges(t *testing.T) {
	t.Run("openai [DONE] alone still makes a complete Anthropic stream", func(t *testing.T) {
		tr := fixedTranslator(apiOpenAI, apiAnthropic, "client-model")
		out := translateAll(tr, []byte(": keep-alive\n\ndata: [DONE]\n\n"))
		checkSSE(t, out, apiAnthropic)
		d := decodeStream(t, wire.Anthropic, out)
		if !tr.Done() || !d.Done || d.Roles != 1 || !bytes.Contains(out, []byte(`"model":"client-model"`)) {
			t.Errorf("got %+v from\n%s", d, out)
		}
	})
	t.Run("thinking after text opens a new block", func(t *testing.T) {
		tr := fixedTranslator(apiOpenAI, apiAnthropic, "")
		in := `data: {"id":"a","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n" +
			`data: {"id":"a","model":"m","choices":[{"index":0,"delta":{"reasoning":"r"}}]}` + "\n\n" +
			`data: {"id":"a","model":"m","choices":[{"index":0,"delta":{"content":"y"},"finish_reason":"stop","stop_reason":"END"}]}` + "\n\n" +
			"data: [DONE]\n\n"
		out := string(translateAll(tr, []byte(in)))
		for _, want := range []string{`"index":0,"content_block":{"type":"text"`, `"content_block_stop","index":0`,
			`"index":1,"content_block":{"type":"thinking"`, `"content_block_stop","index":1`, `"index":2,"content_block":{"type":"text"`,
			`"content_block_stop","index":2`, `"stop_reason":"stop_sequence","stop_sequence":"END"`} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %s in\n%s", want, out)
			}
		}
	})
	t.Run("openai malformed chunk ends with an Anthropic error", func(t *testing.T) {
		tr := fixedTranslator(apiOpenAI, apiAnthropic, "")
		out := translateAll(tr, []byte("data: {\"choices\":[\n\ndata: [DONE]\n\n"))
		checkSSE(t, out, apiAnthropic)
		if d := decodeStream(t, wire.Anthropic, out); d.Err == "" || d.Done || tr.Done() {
			t.Errorf("want an error and no end; got %+v\n%s", d, out)
		}
	})
	t.Run("anthropic message_stop without message_delta still finishes", func(t *testing.T) {
		tr := fixedTranslator(apiAnthropic, apiOpenAI, "client-model")
		out := translateAll(tr, []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
		checkSSE(t, out, apiOpenAI)
		d := decodeStream(t, wire.OpenAIChat, out)
		if d.Content != "x" || d.Finish != "stop" || !d.Done || d.Roles != 1 || !bytes.Contains(out, []byte(`"model":"client-model"`)) {
			t.Errorf("got %+v\n%s", d, out)
		}
	})
	t.Run("same API passes through", func(t *testing.T) {
		tr := fixedTranslator(apiOpenAI, apiOpenAI, "")
		in := []byte("data: {\"x\":1}\n\ndata: [DONE]\n\n")
		if out := translateAll(tr, in); !bytes.Equal(out, in) || !tr.Done() {
			t.Errorf("got %q, done %v", out, tr.Done())
		}
	})
}

// checkSSE asserts that out is well-formed for the client's API: complete
// events, each with one data line of valid JSON (or OpenAI's [DONE]), and
// for Anthropic an event line naming the data's type.
func checkSSE(t testing.TB, out []byte, to wire.API) {
	t.Helper()
	if bytes.IndexByte(out, '\r') >= 0 {
		t.Fatalf("output has a CR: %q", out)
	}
	n := splitEvents(out, func(ev []byte) {
		if !bytes.HasSuffix(ev, []byte("\n\n")) || len(ev) < 3 {
			t.Fatalf("event does not end in a blank line: %q", ev)
		}
		lines := strings.Split(string(ev[:len(ev)-2]), "\n")
		name := ""
		if to == apiAnthropic {
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "event: ") {
				t.Fatalf("Anthropic event without an event line: %q", ev)
			}
			name, lines = strings.TrimPrefix(lines[0], "event: "), lines[1:]
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "data: ") {
			t.Fatalf("want one data line: %q", ev)
		}
		data := strings.TrimPrefix(lines[0], "data: ")
		if to == apiOpenAI && data == "[DONE]" {
			return
		}
		var v struct {
			Type string `json:"type"`
		}
		if !json.Valid([]byte(data)) || json.Unmarshal([]byte(data), &v) != nil {
			t.Fatalf("data is not a JSON object: %q", data)
		}
		if to == apiAnthropic && v.Type != name {
			t.Fatalf("event %q carries type %q", name, v.Type)
		}
	})
	if n != len(out) {
		t.Fatalf("output ends in an incomplete event: %q", out[n:])
	}
}

// randText returns text that tends to break hand-made JSON and SSE:
// quotes, backslashes, line ends, non-ASCII, SSE lookalikes, or nothing.
func randText(r *rand.Rand) string {
	pieces := []string{"", "a", "Hello", " ", "\"", "\\", "\n", "\r\n", "\r", "\t", "\x00", "\x1f", "é", "日本語", "😀", "\u2028", "<&>",
		"data: [DONE]\n\n", "event: message_stop", "}]}", `\u0041`, "\ufffd"}
	var b strings.Builder
	for range r.IntN(5) {
		if r.IntN(4) == 0 {
			c := rune(r.IntN(0x10FFFF))
			if utf8.ValidRune(c) {
				b.WriteRune(c)
			}
			continue
		}
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A stream of random deltas translated either way reads, with ttft's own
// client decoder for the client's API, as the same text, reasoning and
// output token count.
func TestTranslateStreamProperty(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		nl := []string{"\n", "\r\n", "\r"}[r.IntN(3)]
		var text, reasoning strings.Builder
		outTok, inTok := r.IntN(1000), r.IntN(1000)
		var in strings.Builder
		ev := func(lines ...string) {
			for _, l := range lines {
				in.WriteString(l + nl)
			}
			in.WriteString(nl)
		}
		fromAnthropic := seed%2 == 1
		if !fromAnthropic {
			chunk := func(delta map[string]any, finish any) string {
				return "data: " + mustJSON(t, map[string]any{"id": "chatcmpl-p", "object": "chat.completion.chunk", "created": 1, "model": "m",
					"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
			}
			ev(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
			for range r.IntN(12) {
				s := randText(r)
				key := "content"
				switch r.IntN(3) {
				case 0:
					key = "reasoning_content"
					reasoning.WriteString(s)
				case 1:
					text.WriteString(s)
				case 2:
					ev(": keep-alive")
					text.WriteString(s)
				}
				ev(chunk(map[string]any{key: s}, nil))
			}
			ev(chunk(map[string]any{}, []string{"stop", "length"}[r.IntN(2)]))
			ev("data: " + mustJSON(t, map[string]any{"id": "chatcmpl-p", "choices": []any{}, "usage": map[string]int{"prompt_tokens": inTok, "completion_tokens": outTok}}))
			ev("data: [DONE]")
		} else {
			ev("event: message_start", "data: "+mustJSON(t, map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_p", "model": "c", "usage": map[string]int{"input_tokens": inTok, "output_tokens": 1}}}))
			idx := 0
			for range r.IntN(4) {
				kind := []string{"text", "thinking"}[r.IntN(2)]
				ev("event: content_block_start", "data: "+mustJSON(t, map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": kind, kind: ""}}))
				for range r.IntN(6) {
					s := randText(r)
					delta := map[string]any{"type": "text_delta", "text": s}
					if kind == "thinking" {
						delta = map[string]any{"type": "thinking_delta", "thinking": s}
						reasoning.WriteString(s)
					} else {
						text.WriteString(s)
					}
					ev("event: content_block_delta", "data: "+mustJSON(t, map[string]any{"type": "content_block_delta", "index": idx, "delta": delta}))
					if r.IntN(4) == 0 {
						ev("event: ping", `data: {"type": "ping"}`)
					}
				}
				ev("event: content_block_stop", "data: "+mustJSON(t, map[string]any{"type": "content_block_stop", "index": idx}))
				idx++
			}
			ev("event: message_delta", "data: "+mustJSON(t, map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]int{"output_tokens": outTok}}))
			ev("event: message_stop", `data: {"type":"message_stop"}`)
		}
		from, to := apiOpenAI, apiAnthropic
		if fromAnthropic {
			from, to = to, from
		}
		tr := fixedTranslator(from, to, "m")
		out := translateAll(tr, []byte(in.String()))
		checkSSE(t, out, to)
		d := decodeStream(t, to, out)
		if d.Content != text.String() || d.Reasoning != reasoning.String() {
			t.Fatalf("seed %d: text %q / reasoning %q, want %q / %q", seed, d.Content, d.Reasoning, text.String(), reasoning.String())
		}
		if d.Usage == nil || d.Usage.CompletionTokens != outTok || d.Usage.PromptTokens != inTok || !d.Done || !tr.Done() || d.Err != "" {
			t.Fatalf("seed %d: usage %+v (want in %d, out %d), done %v/%v, err %q", seed, d.Usage, inTok, outTok, d.Done, tr.Done(), d.Err)
		}
	}
}

func fuzzSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, p := range []string{"../testdata/*.sse", "testdata/*.sse"} {
		files, _ := filepath.Glob(p)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	return seeds
}

// FuzzTranslateStream: arbitrary backend bytes never panic the translator,
// and what it writes is always well-formed SSE for the client's API.
func FuzzTranslateStream(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Add([]byte("data: {\"error\":{\"message\":\"x\",\"code\":429}}\n\n"), false)
	f.Add([]byte("event: error\ndata: \"plain\"\n\n"), true)
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\rdata: [DONE]\r\r"), false)
	f.Fuzz(func(t *testing.T, in []byte, fromAnthropic bool) {
		from, to := apiOpenAI, apiAnthropic
		if fromAnthropic {
			from, to = to, from
		}
		tr := fixedTranslator(from, to, "m")
		var out []byte
		doneAt := -1
		splitEvents(in, func(ev []byte) {
			before := len(out)
			out = tr.Event(out, ev)
			if doneAt >= 0 && len(out) != before {
				t.Fatalf("output after the end: %q", out[before:])
			}
			if tr.Done() && doneAt < 0 {
				doneAt = len(out)
			}
		})
		checkSSE(t, out, to)
		// Bytes that are not one event (the contract's violation) still
		// make well-formed output.
		checkSSE(t, fixedTranslator(from, to, "m").Event(nil, in), to)
		if tr.Done() {
			// A properly ended stream decodes, and ends, for ttft's client.
			if d := decodeStream(t, to, out); !d.Done {
				t.Fatalf("Done() but the client sees no end:\n%s", out)
			}
		}
	})
}

// FuzzTranslateResponse: arbitrary answers never panic, and a translation
// reads, for ttft's client of the other API, as the same text.
func FuzzTranslateResponse(f *testing.F) {
	f.Add([]byte(`{"id":"chatcmpl-9","model":"q","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"t"},"finish_reason":"stop","stop_reason":"x"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}}`), false)
	f.Add([]byte(`{"id":"msg_7","model":"c","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"A"}],"stop_reason":"max_tokens","usage":{"input_tokens":5,"output_tokens":9}}`), true)
	f.Fuzz(func(t *testing.T, in []byte, fromAnthropic bool) {
		from, to := apiOpenAI, apiAnthropic
		if fromAnthropic {
			from, to = to, from
		}
		out, err := Response(in, from, to)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %s", out)
		}
		// What the answer says, read narrowly: choice 0 of an OpenAI
		// answer; text and thinking blocks of an Anthropic one.
		var text, reasoning string
		if fromAnthropic {
			var m wire.AnthropicMessage
			json.Unmarshal(in, &m)
			for _, b := range m.Content {
				switch b.Type {
				case "text":
					text += b.Text
				case "thinking":
					reasoning += b.Thinking
				}
			}
		} else {
			var m openAICompletionIn
			json.Unmarshal(in, &m)
			for _, c := range m.Choices {
				if c.Index == 0 {
					if c.Message.Content != nil {
						text = *c.Message.Content
					}
					reasoning = c.Message.ReasoningContent + c.Message.Reasoning
					break
				}
			}
		}
		c, err := wire.DecodeWhole(to, out)
		if err != nil || c.Err != "" {
			t.Fatalf("the client cannot read the translation: %v %q\n%s", err, c.Err, out)
		}
		if c.Content != text || c.Reasoning != reasoning {
			t.Fatalf("text %q/%q became %q/%q\n%s", text, reasoning, c.Content, c.Reasoning, out)
		}
	})
}

// FuzzTranslateError: any body and status give an error body of the
// client's API, with a message, that ttft's client reads as an error.
func FuzzTranslateError(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m","type":"t","code":400}}`), 400, false)
	f.Add([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), 529, true)
	f.Add([]byte(`{"detail":[{"loc":["body"],"msg":"x"}]}`), 422, false)
	f.Add([]byte("\xff<html>"), 502, true)
	f.Fuzz(func(t *testing.T, in []byte, status int, fromAnthropic bool) {
		from, to := apiOpenAI, apiAnthropic
		if fromAnthropic {
			from, to = to, from
		}
		out := Error(in, status, from, to)
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("invalid JSON: %q", out)
		}
		c, err := wire.DecodeWhole(to, out)
		if err != nil || c.Err == "" {
			t.Fatalf("the client reads no error from %s (%v)", out, err)
		}
	})
}

// BenchmarkTranslateStream is the per-event cost of translating a stream
// (one op = one backend token event; compare with the gateway's
// BenchmarkSplitClassify, what an untranslated event costs the proxy).
func BenchmarkTranslateStream(b *testing.B) {
	for _, tc := range []struct {
		name     string
		from, to wire.API
		ev       string
	}{
		{"openai-to-anthropic", apiOpenAI, apiAnthropic, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"finish_reason\":null}]}\n\n"},
		{"anthropic-to-openai", apiAnthropic, apiOpenAI, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token\"}}\n\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tr := fixedTranslator(tc.from, tc.to, "m")
			start := "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
			if tc.from == apiAnthropic {
				start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n"
			}
			out := tr.Event(nil, []byte(start))
			ev := []byte(tc.ev)
			b.ReportAllocs()
			for b.Loop() {
				out = tr.Event(out[:0], ev)
			}
			if len(out) == 0 {
				b.Fatal("no output")
			}
		})
	}
}

// FuzzTranslateFastPath: the per-token fast paths give byte for byte what
// the full encoding/json path gives, or step aside.
func FuzzTranslateFastPath(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"reasoning_content":"hm","content":"x"}}]}`,
		`{"choices":[{"delta":{"content":"a\"b\\u00e9\n<&>"}}]}`,
		`{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}],"usage":null}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm \ud83d\ude00"}}`,
		`{"delta":{"text":"x","type":"text_delta"},"TYPE":"content_block_delta"}`,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":"b"}}`,
		// Wrong-typed fields the fast path skips (both found by this fuzzer).
		`{"id":[],"choices":[{"delta":{"content":"x"}}]}`,
		`{"choices":[{"index":{},"delta":{"content":"x"}}]}`,
	} {
		f.Add(s)
	}
	starts := map[wire.API]string{
		apiOpenAI:    `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n",
		apiAnthropic: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n",
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.ContainsAny(data, "\r\n") {
			return // one data line: the framing is the splitter's business
		}
		for from, start := range starts {
			to := otherAPI(from)
			fast, slow := fixedTranslator(from, to, "m"), fixedTranslator(from, to, "m")
			slow.noFast = true
			ev := []byte("data: " + data + "\n\n")
			if from == apiAnthropic {
				ev = []byte("event: content_block_delta\ndata: " + data + "\n\n")
			}
			a := fast.Event(fast.Event(nil, []byte(start)), ev)
			b := slow.Event(slow.Event(nil, []byte(start)), ev)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s→%s on %q:\nfast %q\nfull %q", from, to, data, a, b)
			}
		}
	})
}

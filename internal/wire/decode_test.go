package wire

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/sse"
)

type streamResult struct {
	content, reasoning, tools string
	tokenEvents, roleOnly     int
	finish, err               string
	usage                     Usage
	done                      bool
	timings                   bool
}

func decodeFile(t *testing.T, api API, name string) streamResult {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := sse.NewReader(f, sse.Options{})
	dec := NewDecoder(api)
	var res streamResult
	var c Chunk
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return res
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(ev, &c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.HasToken() {
			res.tokenEvents++
		} else if c.Role {
			res.roleOnly++
		}
		res.content += c.Content
		res.reasoning += c.Reasoning
		res.tools += c.ToolArgs
		if c.Finish != "" {
			res.finish = c.Finish
		}
		if c.Usage != nil {
			res.usage = *c.Usage
		}
		if c.Err != "" {
			res.err = c.Err
		}
		if c.Timings != nil {
			res.timings = true
		}
		res.done = res.done || c.Done
	}
}

func TestDecodeRecordedStreams(t *testing.T) {
	for _, tc := range []struct {
		file string
		api  API
		want streamResult
	}{
		{"vllm-chat.sse", OpenAIChat, streamResult{content: "Hello world", tokenEvents: 2, roleOnly: 1, finish: "length", usage: Usage{PromptTokens: 12, CompletionTokens: 2}, done: true}},
		{"reasoning-crlf.sse", OpenAIChat, streamResult{content: "Answer", reasoning: "Let me think briefly.", tokenEvents: 3, roleOnly: 1, finish: "stop", usage: Usage{PromptTokens: 5, CompletionTokens: 4}, done: true}},
		{"openai-toolcall.sse", OpenAIChat, streamResult{tools: `{"city":"Paris"}`, tokenEvents: 2, roleOnly: 1, finish: "tool_calls", usage: Usage{PromptTokens: 30, CompletionTokens: 9}, done: true}},
		// Ollama's first chunk carries the role and the first text together.
		{"ollama-chat.sse", OpenAIChat, streamResult{content: "Hi there", tokenEvents: 2, roleOnly: 1, finish: "stop", usage: Usage{PromptTokens: 20, CompletionTokens: 2}, done: true}},
		{"completions-llamacpp.sse", OpenAICompletions, streamResult{content: " The end", tokenEvents: 2, finish: "length", done: true, timings: true}},
		{"anthropic.sse", Anthropic, streamResult{content: "Hello!", tokenEvents: 2, roleOnly: 1, finish: "end_turn", usage: Usage{PromptTokens: 125, CompletionTokens: 15, CachedPromptTokens: 100}, done: true}},
		{"anthropic-error.sse", Anthropic, streamResult{content: "Par", tokenEvents: 1, roleOnly: 1, err: "overloaded_error: Overloaded", usage: Usage{}}},
		{"vllm-error.sse", OpenAIChat, streamResult{roleOnly: 1, err: "The model ran out of KV cache"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got := decodeFile(t, tc.api, tc.file)
			if got != tc.want {
				t.Errorf("\ngot  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	dec := NewDecoder(OpenAIChat)
	var c Chunk
	err := dec.Decode(&sse.Event{Data: []byte(`{"choices":[{"delta":{"content":"x"`)}, &c)
	if err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("want a malformed-chunk error, got %v", err)
	}
	// TGI's {"error": "..."} string form.
	if err := dec.Decode(&sse.Event{Data: []byte(`{"error":"Input validation error","error_type":"validation"}`)}, &c); err != nil || c.Err != "Input validation error" {
		t.Fatalf("TGI error: %v %+v", err, c)
	}
	if err := dec.Decode(&sse.Event{Type: []byte("error"), Data: []byte(`{"error":{"message":"boom"}}`)}, &c); err != nil || c.Err != "boom" {
		t.Fatalf("error event: %v %+v", err, c)
	}
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"vllm-chat.sse", "anthropic.sse", "openai-toolcall.sse"} {
		b, _ := os.ReadFile(filepath.Join("testdata", name))
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				f.Add([]byte(d))
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Chunk
		for _, api := range []API{OpenAIChat, Anthropic} {
			_ = NewDecoder(api).Decode(&sse.Event{Data: data}, &c) // must not panic
			_, _ = DecodeWhole(api, data)
		}
	})
}

func BenchmarkDecodeChatChunk(b *testing.B) {
	ev := &sse.Event{Data: []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}`)}
	dec := NewDecoder(OpenAIChat)
	var c Chunk
	b.ReportAllocs()
	for b.Loop() {
		if err := dec.Decode(ev, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzFastPathAgrees checks the allocation-light fast path against the
// encoding/json decoder: whenever the fast path answers, both must agree.
func FuzzFastPathAgrees(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"text":" x","finish_reason":"length"}]}`,
		`{"choices":[{"delta":{"reasoning_content":"think"}}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":1}}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0}}}`,
		`{"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":-3,"prompt_tokens_details":null,"x":[{"y":1}]}}`,
		`{"choices":[],"usage":{"prompt_tokens":1.0}}`,
		`{"choices":[],"usage":{"Prompt_Tokens":1}}`,
		`{"choices":[],"usage":{}}`,
		`{"object":"error","message":"x"}`,
		`{"choices":[{"delta":{"content":"a\nb"}}]}`,
		`{"a":[1,-2.5e3,true,false,null,{"b":"c"}],"choices":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast Chunk
		if !fastOpenAI(data, &fast, &openAIDecoder{}) {
			return
		}
		var ch ChatCompletionChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			t.Fatalf("fast path accepted invalid JSON %q: %+v", data, fast)
		}
		var slow Chunk
		d := &openAIDecoder{}
		// Decode's fast path would answer again; compare with the full one.
		decodeSlow(d, data, &slow)
		if fast.Content != slow.Content || fast.Reasoning != slow.Reasoning || fast.Role != slow.Role ||
			fast.Finish != slow.Finish || fast.Model != slow.Model || fast.ID != slow.ID || fast.Err != slow.Err ||
			(fast.Usage == nil) != (slow.Usage == nil) || (fast.Usage != nil && *fast.Usage != *slow.Usage) {
			t.Fatalf("%q:\nfast %+v\nslow %+v", data, fast, slow)
		}
	})
}

// TestFastPathTakesUsage: the usage chunk that ends every request's
// stream is read without encoding/json.
func TestFastPathTakesUsage(t *testing.T) {
	var c Chunk
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4}}}`)
	if !fastOpenAI(data, &c, &openAIDecoder{}) || c.Usage == nil || *c.Usage != (Usage{PromptTokens: 12, CompletionTokens: 8, CachedPromptTokens: 4}) || c.ID != "chatcmpl-1" {
		t.Fatalf("fast path on the usage chunk: %+v", c)
	}
	for _, refused := range []string{`{"usage":{"prompt_tokens":1e3}}`, `{"usage":{"prompt_tokens":1},"usage":null}`, `{"usage":{"PROMPT_TOKENS":1}}`, `{"usage":{"prompt_tokens":1234567890123456789}}`, `{"usage":[]}`} {
		if fastOpenAI([]byte(refused), &Chunk{}, &openAIDecoder{}) {
			t.Errorf("fast path took %s", refused)
		}
	}
}

func BenchmarkDecodeChatChunkSlowPath(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}]}`)
	d := &openAIDecoder{}
	var c Chunk
	b.ReportAllocs()
	for b.Loop() {
		c = Chunk{}
		decodeSlow(d, data, &c)
	}
}

func TestDecodeWhole(t *testing.T) {
	c, err := DecodeWhole(OpenAIChat, []byte(`{"model":"m","choices":[{"message":{"content":"hi","reasoning_content":"hmm"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}`))
	if err != nil || c.Content != "hi" || c.Reasoning != "hmm" || c.Finish != "stop" || *c.Usage != (Usage{5, 3, 2}) {
		t.Fatalf("openai: %+v %v", c, err)
	}
	c, err = DecodeWhole(Anthropic, []byte(`{"model":"c","content":[{"type":"text","text":"yo"}],"stop_reason":"end_turn","usage":{"input_tokens":4,"output_tokens":1,"cache_read_input_tokens":6}}`))
	if err != nil || c.Content != "yo" || *c.Usage != (Usage{10, 1, 6}) {
		t.Fatalf("anthropic: %+v %v", c, err)
	}
	if _, err := DecodeWhole(OpenAIChat, []byte(`{"choices":`)); err == nil {
		t.Fatal("truncated JSON accepted")
	}
	if c, _ := DecodeWhole(OpenAIChat, []byte(`{"error":{"message":"bad"}}`)); c.Err != "bad" {
		t.Fatalf("error body: %+v", c)
	}
}

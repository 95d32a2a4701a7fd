package wire

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ttft-dev/ttft/internal/workload"
)

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:8000":        "http://h:8000",
		"http://h:8000/":       "http://h:8000",
		"http://h:8000/v1":     "http://h:8000",
		"http://h:8000/v1/":    "http://h:8000",
		"https://api.x.com/v1": "https://api.x.com",
		"http://h/proxy/v1":    "http://h/proxy",
		" http://h:1/v1?x=1 ":  "http://h:1",
	} {
		got, err := BaseURL(in)
		if err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"h:8000", "ftp://h", "http://", "::"} {
		if _, err := BaseURL(bad); err == nil {
			t.Errorf("BaseURL(%q) accepted", bad)
		}
	}
}

func TestBodies(t *testing.T) {
	req := &workload.Request{
		Messages:  []workload.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
		MaxTokens: 64, MinTokens: 64,
	}
	opt := &RequestOptions{Model: "m", Temperature: 0.7, APIKey: "sk-secret", Headers: http.Header{"X-Extra": {"1"}}}
	for _, tc := range []struct {
		api  API
		path string
		keys []string
		not  []string
	}{
		{OpenAIChat, "/v1/chat/completions", []string{"model", "messages", "stream", "stream_options", "max_tokens", "temperature", "min_tokens", "ignore_eos"}, []string{"system", "prompt"}},
		{OpenAICompletions, "/v1/completions", []string{"model", "prompt", "stream", "stream_options", "max_tokens"}, []string{"messages"}},
		{Anthropic, "/v1/messages", []string{"model", "messages", "system", "max_tokens", "stream"}, []string{"stream_options", "min_tokens"}},
	} {
		hr, err := NewRequest(context.Background(), tc.api, "http://127.0.0.1:1", req, opt)
		if err != nil {
			t.Fatal(err)
		}
		if hr.URL.Path != tc.path {
			t.Errorf("%s: path %s", tc.api, hr.URL.Path)
		}
		var m map[string]any
		if err := json.NewDecoder(hr.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		for _, k := range tc.keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: body lacks %q: %v", tc.api, k, m)
			}
		}
		for _, k := range tc.not {
			if _, ok := m[k]; ok {
				t.Errorf("%s: body has %q", tc.api, k)
			}
		}
		if tc.api == Anthropic {
			if hr.Header.Get("x-api-key") != "sk-secret" || hr.Header.Get("anthropic-version") == "" || hr.Header.Get("Authorization") != "" {
				t.Errorf("anthropic headers %v", hr.Header)
			}
			if msgs := m["messages"].([]any); len(msgs) != 1 {
				t.Errorf("system message must move to the top-level system field: %v", msgs)
			}
		} else if hr.Header.Get("Authorization") != "Bearer sk-secret" {
			t.Errorf("%s: auth header %q", tc.api, hr.Header.Get("Authorization"))
		}
		if hr.Header.Get("X-Extra") != "1" || hr.Header.Get("Accept-Encoding") != "identity" {
			t.Errorf("%s: headers %v", tc.api, hr.Header)
		}
	}
}

func TestMaxTokensField(t *testing.T) {
	req := &workload.Request{Prompt: "hi", MaxTokens: 7}
	for field, want := range map[string]string{"": "max_tokens", "max_completion_tokens": "max_completion_tokens"} {
		b, err := Body(OpenAIChat, req, &RequestOptions{Model: "m", MaxTokensField: field})
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		if m[want] != float64(7) || (want != "max_tokens" && m["max_tokens"] != nil) {
			t.Errorf("field %q: body %s", field, b)
		}
	}
}

func TestProvider(t *testing.T) {
	for api, want := range map[API]string{OpenAIChat: "openai", OpenAICompletions: "openai", Anthropic: "anthropic", "": "", "gemini": "gemini"} {
		if got := api.Provider(); got != want {
			t.Errorf("%q.Provider() = %q, want %q", api, got, want)
		}
	}
}

// TestTextMessageJSON: Body sends workload messages as they are, so their
// JSON must be TextMessage's.
func TestTextMessageJSON(t *testing.T) {
	w, _ := json.Marshal(workload.Message{Role: "user", Content: "hi <&>"})
	m, _ := json.Marshal(TextMessage{Role: "user", Content: "hi <&>"})
	if string(w) != string(m) {
		t.Fatalf("workload.Message %s, TextMessage %s", w, m)
	}
}

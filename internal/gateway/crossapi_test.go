package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A chat request whose model no backend serves over the client's API goes
// to a backend of the other API, translated both ways, streamed and not;
// mid-stream failures still end with the client's API's error event.
func TestCrossAPITranslation(t *testing.T) {
	openaiOnly := newFakeBackend(t, "vllm", 6)
	anthropicOnly := newFakeBackend(t, "claude", 6)
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{
		{Name: "vllm", URL: openaiOnly.URL(), API: "openai", Models: []string{"llama"}},
		{Name: "claude", URL: anthropicOnly.URL(), API: "anthropic", Models: []string{"sonnet"}},
	}}
	_, url := startGateway(t, cfg, Options{})
	anthropicBody := func(model string, stream bool) string {
		return `{"model":"` + model + `","max_tokens":64,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
			`,"system":"Be terse.","messages":[{"role":"user","content":"hi"}]}`
	}

	t.Run("anthropic client, openai backend, stream", func(t *testing.T) {
		res := readStream(t, post(t, url, "/v1/messages", anthropicBody("llama", true), nil), true)
		if res.status != 200 || res.backend != "vllm" || res.text != expectedText(6) || !res.done || res.errEvent != "" {
			t.Fatalf("status %d backend %q text %q done %v err %q\n%s", res.status, res.backend, res.text, res.done, res.errEvent, res.raw)
		}
		for _, ev := range []string{"event: message_start", "event: content_block_start", "event: message_delta", "event: message_stop"} {
			if !strings.Contains(res.raw, ev) {
				t.Errorf("translated stream lacks %q:\n%s", ev, res.raw)
			}
		}
		if strings.Contains(res.raw, "[DONE]") || strings.Contains(res.raw, "chat.completion.chunk") {
			t.Errorf("OpenAI events leaked to an Anthropic client:\n%s", res.raw)
		}
	})
	t.Run("openai client, anthropic backend, stream", func(t *testing.T) {
		res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("sonnet", true, "hi"), nil), false)
		if res.status != 200 || res.backend != "claude" || res.text != expectedText(6) || !res.done || res.errEvent != "" {
			t.Fatalf("status %d backend %q text %q done %v err %q\n%s", res.status, res.backend, res.text, res.done, res.errEvent, res.raw)
		}
		if strings.Contains(res.raw, "message_start") {
			t.Errorf("Anthropic events leaked to an OpenAI client:\n%s", res.raw)
		}
		hs := anthropicOnly.lastHeaders()
		if v := hs[len(hs)-1].Get("Anthropic-Version"); v == "" {
			t.Error("no anthropic-version header sent to the Anthropic backend")
		}
	})
	t.Run("not streamed, both ways", func(t *testing.T) {
		resp := post(t, url, "/v1/messages", anthropicBody("llama", false), nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var msg struct {
			Type    string `json:"type"`
			Content []struct {
				Type, Text string
			} `json:"content"`
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &msg); err != nil || resp.StatusCode != 200 || msg.Type != "message" || len(msg.Content) == 0 || msg.Content[0].Text != expectedText(6) || msg.Usage.OutputTokens != 6 {
			t.Fatalf("anthropic client: %d %s (%v)", resp.StatusCode, b, err)
		}
		resp = post(t, url, "/v1/chat/completions", chatBody("sonnet", false, "hi"), nil)
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		var cc struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &cc); err != nil || resp.StatusCode != 200 || cc.Object != "chat.completion" || len(cc.Choices) == 0 || cc.Choices[0].Message.Content != expectedText(6) {
			t.Fatalf("openai client: %d %s (%v)", resp.StatusCode, b, err)
		}
	})
	t.Run("untranslatable request", func(t *testing.T) {
		body := `{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`
		resp := post(t, url, "/v1/messages", body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_request_error") || !strings.Contains(string(b), "image") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("mid-stream failure ends with the client's error event", func(t *testing.T) {
		openaiOnly.setFault("kill-mid")
		defer openaiOnly.setFault("")
		res := readStream(t, post(t, url, "/v1/messages", anthropicBody("llama", true), nil), true)
		if res.status != 200 || res.text != expectedText(3) || res.done || res.errEvent == "" || !strings.Contains(res.raw, "event: error") {
			t.Fatalf("status %d text %q done %v err %q\n%s", res.status, res.text, res.done, res.errEvent, res.raw)
		}
	})
	t.Run("completions are not translated", func(t *testing.T) {
		resp := post(t, url, "/v1/completions", `{"model":"sonnet","prompt":"x","max_tokens":4}`, nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
	})
	t.Run("translation off", func(t *testing.T) {
		off := false
		c := cfg
		c.Translate = &off
		_, url := startGateway(t, c, Options{})
		resp := post(t, url, "/v1/messages", anthropicBody("llama", true), nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
	})
}

// Backends configured without a model list (the --backend quick form)
// report their models on /v1/models; the gateway lists them, so that a
// client that asks the gateway which models exist (ttft bench without
// --model) finds them.
func TestModelsLearntFromBackends(t *testing.T) {
	fb := newFakeBackend(t, "any", 2)
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{
		{Name: "any", URL: fb.URL(), API: "openai"},
		{Name: "named", URL: fb.URL(), API: "openai", Models: []string{"z-configured"}},
	}}
	_, url := startGateway(t, cfg, Options{})
	var ids []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []struct{ ID string } `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		ids = ids[:0]
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		if len(ids) == 2 {
			break
		}
	}
	if strings.Join(ids, ",") != "m,z-configured" {
		t.Fatalf("models %v, want the backend's m and the configured z-configured", ids)
	}
}

// Headers named in a Connection header are hop-by-hop and go no further,
// in either direction.
func TestConnectionTokensNotForwarded(t *testing.T) {
	var seen http.Header
	backend := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		seen = r.Header.Clone()
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Connection", "X-Back-Hop")
		w.Header().Set("X-Back-Hop", "1")
		w.Header().Set("X-Kept", "1")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}))
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
	cfg.Health.Disabled = true
	_, url := startGateway(t, cfg, Options{})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", false, "x"), map[string]string{"Connection": "X-Hop", "X-Hop": "secret", "X-End": "1"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || seen == nil {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if seen.Get("X-Hop") != "" || seen.Get("X-End") != "1" {
		t.Errorf("backend saw X-Hop %q, X-End %q: want the hop-by-hop one dropped, the end-to-end one kept", seen.Get("X-Hop"), seen.Get("X-End"))
	}
	if resp.Header.Get("X-Back-Hop") != "" || resp.Header.Get("X-Kept") != "1" {
		t.Errorf("client saw X-Back-Hop %q, X-Kept %q", resp.Header.Get("X-Back-Hop"), resp.Header.Get("X-Kept"))
	}
}

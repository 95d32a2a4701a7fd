package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/ttft-dev/ttft/internal/workload"
)

// TestTokenize: /tokenize answers vLLM's shape with the count the generate
// endpoint reports as usage for the same prompt, and refuses what vLLM
// refuses.
func TestTokenize(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := Start(ctx, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tok := workload.DefaultTokenizer()
	post := func(path string, body any) (int, map[string]any) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL()+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	text := "The quick brown fox jumps over the lazy dog 12345 times."
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		count  int
	}{
		{"prompt", map[string]any{"model": srv.ModelName(), "prompt": text}, 200, tok.Count(text)},
		{"messages", map[string]any{"model": srv.ModelName(), "messages": []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": text}}}, 200, tok.Count("be brief\n" + text)},
		{"ids", map[string]any{"prompt": []int{1, 2, 3}}, 200, 3},
		{"wrong model", map[string]any{"model": "nope", "prompt": text}, 404, 0},
		{"no prompt", map[string]any{"model": srv.ModelName()}, 400, 0},
	} {
		status, m := post("/tokenize", tc.body)
		if status != tc.status {
			t.Errorf("%s: HTTP %d, want %d (%v)", tc.name, status, tc.status, m)
			continue
		}
		if status != 200 {
			continue
		}
		if c, _ := m["count"].(float64); int(c) != tc.count {
			t.Errorf("%s: count %v, want %d", tc.name, m["count"], tc.count)
		}
		if toks, _ := m["tokens"].([]any); len(toks) != tc.count {
			t.Errorf("%s: %d tokens, want %d", tc.name, len(toks), tc.count)
		}
		if mm, _ := m["max_model_len"].(float64); mm <= 0 {
			t.Errorf("%s: max_model_len %v", tc.name, m["max_model_len"])
		}
	}
	// The generate endpoint reports the same count as usage.
	status, m := post("/v1/completions", map[string]any{"model": srv.ModelName(), "prompt": text, "max_tokens": 1})
	if status != 200 {
		t.Fatalf("completion: HTTP %d %v", status, m)
	}
	if u, _ := m["usage"].(map[string]any); u == nil || int(u["prompt_tokens"].(float64)) != tok.Count(text) {
		t.Errorf("completion usage %v, want prompt_tokens %d", m["usage"], tok.Count(text))
	}
}

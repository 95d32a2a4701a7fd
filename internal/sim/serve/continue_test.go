package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/sim"
)

// answer streams one request and returns its text, its usage and the
// status.
func answer(t *testing.T, url, path, body string) (text string, prompt, completion, status int) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", 0, 0, resp.StatusCode
	}
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		for _, c := range ev.Choices {
			b.WriteString(c.Delta.Content + c.Text)
		}
		if ev.Usage != nil {
			prompt, completion = ev.Usage.Prompt, ev.Usage.Completion
		}
	}
	return b.String(), prompt, completion, resp.StatusCode
}

// TestContinuationIsTheRestOfTheAnswer: a reply's text is a function of the
// prompt, the same on every replica, and a request continuing a cut-off
// answer (chat: continue_final_message; completions: the prompt followed by
// the answer so far) gets exactly the rest of it: what the unbroken answer
// had after the prefix, with the unbroken answer's length, and a prompt
// larger by the answer's tokens so far.
func TestContinuationIsTheRestOfTheAnswer(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ServedModelName = "m"
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const n = 24
	q := `[{"role":"system","content":"be brief"},{"role":"user","content":"tell me a story"}]`
	full, p0, c0, _ := answer(t, a.URL(), "/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":%s}`, n, q))
	if again, _, _, _ := answer(t, b.URL(), "/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":%s}`, n, q)); again != full || c0 != n {
		t.Fatalf("another replica answered %q, want %q (%d tokens)", again, full, c0)
	}
	fullC, _, _, _ := answer(t, a.URL(), "/v1/completions", fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"prompt":"Once upon a time"}`, n))
	for _, k := range []int{1, 7, n - 1} {
		prefix := sim.OutputText(textKey("be brief\ntell me a story"), k)
		if !strings.HasPrefix(full, prefix) {
			t.Fatalf("the answer %q does not start with the key's words %q", full, prefix)
		}
		msgs := strings.TrimSuffix(q, "]") + fmt.Sprintf(`,{"role":"assistant","content":%q}]`, prefix)
		rest, p, c, status := answer(t, b.URL(), "/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"continue_final_message":true,"add_generation_prompt":false,"messages":%s}`, n-k, msgs))
		if status != 200 || prefix+rest != full || c != n-k || p != p0+k {
			t.Errorf("chat, %d words so far: status %d, %q + %q != %q, or usage %d+%d, want %d+%d", k, status, prefix, rest, full, p, c, p0+k, n-k)
		}
		// Cut inside a word: the rest of the word comes first.
		part := prefix[:len(prefix)-2]
		msgs = strings.TrimSuffix(q, "]") + fmt.Sprintf(`,{"role":"assistant","content":%q}]`, part)
		if rest, _, _, _ := answer(t, b.URL(), "/v1/chat/completions", fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"continue_final_message":true,"add_generation_prompt":false,"messages":%s}`, n-k+1, msgs)); part+rest != full {
			t.Errorf("chat cut inside a word: %q + %q != %q", part, rest, full)
		}
		prefixC := sim.OutputText(textKey("Once upon a time"), k)
		restC, _, _, _ := answer(t, b.URL(), "/v1/completions", fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"prompt":%q}`, n-k, "Once upon a time"+prefixC))
		if prefixC+restC != fullC {
			t.Errorf("completions, %d words so far: %q + %q != %q", k, prefixC, restC, fullC)
		}
	}
}

// TestContinuationRefusals: what vLLM refuses.
func TestContinuationRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServedModelName = "m"
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct{ name, body string }{
		{"final message not the assistant's", `{"model":"m","continue_final_message":true,"messages":[{"role":"user","content":"q"}]}`},
		{"both flags", `{"model":"m","continue_final_message":true,"add_generation_prompt":true,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":" the"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, status := answer(t, s.URL(), "/v1/chat/completions", tc.body); status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", status)
			}
		})
	}
}

// FuzzCompletionContinuation: any prompt is read without panic, and a
// continuation found is the prompt's own trailing words, keyed by the text
// before them.
func FuzzCompletionContinuation(f *testing.F) {
	f.Add("Once upon a time" + sim.OutputText(textKey("Once upon a time"), 5))
	f.Add(" the the the")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		key, c := completionContinuation(text)
		if c.skip == 0 {
			return
		}
		words := sim.OutputText(key, c.skip)
		if !strings.HasSuffix(text, words) || textKey(strings.TrimSuffix(text, words)) != key {
			t.Fatalf("%q: continuation of %d words keyed %x does not match", text, c.skip, key)
		}
	})
}

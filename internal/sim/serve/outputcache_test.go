package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/workload"
)

// chatTurn posts one non-streaming chat completion and returns the reply
// and usage.
func chatTurn(t *testing.T, url string, msgs []map[string]string, maxTokens int) (reply string, prompt, cached int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "llama-3.1-8b", "messages": msgs, "max_tokens": maxTokens})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decoding the chat response: %v", err)
	}
	if len(out.Choices) != 1 {
		t.Fatalf("%d choices", len(out.Choices))
	}
	return out.Choices[0].Message.Content, out.Usage.PromptTokens, out.Usage.Details.Cached
}

// TestLiveOutputBlocksHitNextTurn: over a loopback socket, turn 2 of a chat
// whose messages carry turn 1's reply is served from the prefix cache for
// turn 1's prompt and the full blocks of its reply. The server joins the
// messages with "\n" and tokenises the whole text; turn 1 ends in "?" so
// that the newline merges with it ("?\n" is one cl100k token), which the
// output chain must follow. Without output caching the hit stops within
// turn 1's prompt (at most its full blocks), which the assertion rules out.
func TestLiveOutputBlocksHitNextTurn(t *testing.T) {
	for _, name := range []string{"", "o200k_base"} {
		t.Run("tokenizer="+name, func(t *testing.T) {
			tok := workload.DefaultTokenizer()
			srv := startTest(t, func(c *Config) {
				if name != "" {
					var err error
					if tok, err = workload.EmbeddedTokenizer(name); err != nil {
						t.Fatal(err)
					}
					c.Tokenizer = tok
				}
			})
			bs := srv.d.BlockSize
			user1 := strings.Repeat("Tell me about the weather in the mountains today, please. ", 9) + "Why is it cold?"
			const out = 60
			reply, p1, c1 := chatTurn(t, srv.URL(), []map[string]string{{"role": "user", "content": user1}}, out)
			if c1 != 0 || p1 != len(tok.Encode(user1)) {
				t.Fatalf("turn 1: %d prompt tokens (%d cached), want %d (0)", p1, c1, len(tok.Encode(user1)))
			}
			msgs := []map[string]string{{"role": "user", "content": user1}, {"role": "assistant", "content": reply}, {"role": "user", "content": "And tomorrow?"}}
			_, p2, c2 := chatTurn(t, srv.URL(), msgs, 4)
			// Turn 1 computed KV for its prompt and all but its last output
			// token.
			want := min((p1+out-1)/bs, (p2-1)/bs) * bs
			promptOnly := p1 / bs * bs
			t.Logf("turn 1: %d prompt tokens, %d reply; turn 2: %d prompt tokens, %d cached (prompt-only caching would give ≤ %d)", p1, out, p2, c2, promptOnly)
			if c2 <= promptOnly {
				t.Errorf("turn 2: %d cached tokens, no more than turn 1's prompt blocks (%d): the reply was not cached", c2, promptOnly)
			}
			if c2 != want {
				t.Errorf("turn 2: %d cached tokens, want %d (full blocks of turn 1's prompt and computed reply)", c2, want)
			}
		})
	}
}

// TestChatBase: the server's shortcut for a chat prompt's next-turn form
// (re-tokenising a short tail) equals tokenising the whole text followed
// by the messages' "\n" joiner, whatever the prompt ends with.
func TestChatBase(t *testing.T) {
	srv := startTest(t, nil)
	long := strings.Repeat("word ", 40)
	for _, text := range []string{
		long + "Why?", long + "End.", long + "plain", long + "trailing ", long + "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
		long + "café", long + "line\n", long + "two\n\n", "?", "a", long + "日本語のテキスト", long + "    ",
	} {
		ids := srv.tok.Encode(text)
		if got, want := srv.chatBase(text, ids), srv.tok.Encode(text+"\n"); !slices.Equal(got, want) {
			t.Errorf("%q: chatBase %v…, want %v…", text[max(0, len(text)-12):], got[max(0, len(got)-4):], want[max(0, len(want)-4):])
		}
	}
}

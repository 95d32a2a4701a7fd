package gateway

// The gateway's side of translation (package internal/wire/translate): its
// request reader must read a translated request as it read the original.

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/wire/translate"
)

const apiOpenAI, apiAnthropic = wire.OpenAIChat, wire.Anthropic

// OpenAI → Anthropic → OpenAI keeps every message's role and text, up to
// the merging Anthropic's alternation requires (and system messages, which
// become one).
func TestTranslateRequestRoundTrip(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 11))
		var msgs []map[string]any
		var system []string
		var want []llmreq.Msg
		for range r.IntN(3) {
			s := randText(r)
			system = append(system, s)
			msgs = append(msgs, map[string]any{"role": []string{"system", "developer"}[r.IntN(2)], "content": s})
		}
		// An empty system prompt is no system prompt to Anthropic.
		if s := strings.Join(system, "\n\n"); s != "" {
			want = append(want, llmreq.Msg{Role: "system", Text: s})
		}
		n := 1 + r.IntN(6)
		for i := range n {
			role := "user"
			if i > 0 && r.IntN(2) == 0 {
				role = "assistant"
			}
			s := randText(r)
			var content any = s
			if r.IntN(3) == 0 {
				content = []map[string]string{{"type": "text", "text": s}}
			}
			msgs = append(msgs, map[string]any{"role": role, "content": content})
			if k := len(want) - 1; k >= 0 && want[k].Role == role {
				want[k].Text += s
			} else {
				want = append(want, llmreq.Msg{Role: role, Text: s})
			}
		}
		body := mustJSON(t, map[string]any{"model": "m" + randText(r), "messages": msgs, "stream": r.IntN(2) == 0, "max_tokens": 9})
		a, err := translate.Request([]byte(body), apiOpenAI, apiAnthropic)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, body)
		}
		o, err := translate.Request(a, apiAnthropic, apiOpenAI)
		if err != nil {
			t.Fatalf("seed %d: back: %v\n%s", seed, err, a)
		}
		pin, _ := llmreq.Parse([]byte(body))
		pout, err := llmreq.Parse(o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pout.Messages, want) || pout.Model != pin.Model || pout.Stream != pin.Stream || pout.MaxTokens != 9 {
			t.Fatalf("seed %d:\n got %+v\nwant %+v\nvia %s", seed, pout, want, a)
		}
	}
}

// FuzzTranslateRequest: arbitrary bodies never panic, and a translation is
// JSON the gateway reads with the same model and stream flag.
func FuzzTranslateRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":5,"stream":true,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`), true)
	f.Add([]byte(`{"model":"m","stream":true,"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"user","content":"b"}],"stop":"x"}`), false)
	f.Add([]byte(`{"MODEL":"m","Stream":true,"messages":[{"role":"user","content":"\u00e9"}],"model":"n"}`), false)
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"a"}],"messages":[{"content":"b"}]}`), true)
	f.Fuzz(func(t *testing.T, in []byte, fromAnthropic bool) {
		from, to := apiOpenAI, apiAnthropic
		if fromAnthropic {
			from, to = to, from
		}
		out, err := translate.Request(in, from, to)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON: %s", out)
		}
		pout, err := llmreq.Parse(out)
		if err != nil {
			t.Fatalf("parseRequest refuses the translation: %v\n%s", err, out)
		}
		if pin, err := llmreq.Parse(in); err == nil && (pin.Model != pout.Model || pin.Stream != pout.Stream) {
			t.Fatalf("model/stream %q/%v became %q/%v\n%s", pin.Model, pin.Stream, pout.Model, pout.Stream, out)
		}
	})
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

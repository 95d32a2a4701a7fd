package enginetest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gguf"
)

// The gateway routes between two real engines: round-robin spreads requests
// over both, and every stream arrives intact through the proxy (role and
// first text in one chunk, the final empty chunk with finish_reason, the
// usage chunk, [DONE]).
func TestGatewayRoutesBetweenTwoOllamas(t *testing.T) {
	bin := Binary(t)
	a, b := Start(t, bin), Start(t, bin)
	c := gguf.DefaultConfig()
	v := a.Create(t, model, c)
	b.Create(t, model, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, o := range []*Ollama{a, b} {
		if _, err := o.Chat(ctx, model, chatMsgs("warm up"), 2); err != nil {
			t.Fatalf("warm-up: %v\n%s", err, o.LogTail())
		}
	}
	before := []int{a.Requests("/v1/chat/completions"), b.Requests("/v1/chat/completions")}

	cfg := gateway.Config{
		Policy: sched.RoundRobin,
		Backends: []gateway.BackendConfig{
			{Name: "ollama-a", URL: a.URL, API: "openai", Models: []string{model}},
			{Name: "ollama-b", URL: b.URL, API: "openai", Models: []string{model}},
		},
	}
	g, err := gateway.New(cfg, gateway.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- g.Serve(sctx, ln) }()
	defer func() { stop(); <-served }()
	gw := "http://" + ln.Addr().String()

	const requests, maxTokens = 6, 10
	for i := 0; i < requests; i++ {
		msgs := chatMsgs(Words(v, 100, uint64(400+i)))
		r, err := StreamChat(ctx, gw, model, msgs, maxTokens)
		if err != nil {
			t.Fatalf("request %d through the gateway: %v", i, err)
		}
		if !r.SawDone || r.FinishReason != "length" || r.ContentChunks != maxTokens || r.OutputTokens != maxTokens {
			t.Errorf("request %d: [DONE] %v finish %q chunks %d usage %d, want true length %d %d", i, r.SawDone, r.FinishReason, r.ContentChunks, r.OutputTokens, maxTokens, maxTokens)
		}
		if want := expectedPromptTokens(v, msgs); r.PromptTokens != want {
			t.Errorf("request %d: usage.prompt_tokens %d through the gateway, want %d", i, r.PromptTokens, want)
		}
	}
	na, nb := served2(a, b, before, requests)
	t.Logf("round-robin: %d requests to a, %d to b", na, nb)
	if na+nb != requests || na == 0 || nb == 0 {
		t.Errorf("backends served %d and %d of %d requests: want all served, both used", na, nb, requests)
	}

	// Prefix affinity keeps a shared prefix on one engine, whose KV cache
	// then serves it: after the first request, TTFT drops.
	cfg.Policy = sched.PrefixAffinity
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	before = []int{a.Requests("/v1/chat/completions"), b.Requests("/v1/chat/completions")}
	prefix := Words(v, 600, 450)
	var ttfts []time.Duration
	for i := 0; i < 4; i++ {
		r, err := StreamChat(ctx, gw, model, chatMsgs(prefix+" "+Words(v, 5, uint64(460+i))), 2)
		if err != nil {
			t.Fatalf("shared-prefix request %d: %v", i, err)
		}
		ttfts = append(ttfts, r.TTFT)
	}
	na, nb = served2(a, b, before, 4)
	t.Logf("prefix-affinity: %d requests to a, %d to b; TTFT %v", na, nb, ttfts)
	if !(na == 4 && nb == 0 || na == 0 && nb == 4) {
		t.Errorf("shared-prefix requests split %d/%d: want all on one backend", na, nb)
	}
	if m := median(ttfts[1:]); m > ttfts[0]/2 {
		t.Errorf("TTFT after the first shared-prefix request: median %v, first %v; want at most half (cache hits)", m, ttfts[0])
	}
}

// served2 counts the chat requests each engine logged since before. An access
// log line is written after the response ends, so a client can finish first:
// wait (bounded) for the expected total.
func served2(a, b *Ollama, before []int, want int) (int, int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		na := a.Requests("/v1/chat/completions") - before[0]
		nb := b.Requests("/v1/chat/completions") - before[1]
		if na+nb >= want || time.Now().After(deadline) {
			return na, nb
		}
		time.Sleep(50 * time.Millisecond)
	}
}

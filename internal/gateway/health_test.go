package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/standin"
)

// End to end over loopback: the gateway's health loop scrapes a stand-in's
// /metrics, learns its KV capacity and the hit rate it counted between two
// scrapes (0 for a new prompt, most of it for the same prompt again),
// bounds the capacity it believes by the engine's, and exports all three.
func TestEngineCacheScraped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const blocks, blockChars = 96, 256
	sv, err := standin.Start(ctx, standin.Config{Name: "a", CacheBlocks: blocks, BlockChars: blockChars, Overhead: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Policy: "slo-predictive",
		Health: Health{Path: "/health", Interval: Duration(20 * time.Millisecond)},
		Backends: []BackendConfig{{
			Name: "a", URL: sv.URL(), API: "openai", MetricsURL: sv.URL() + "/metrics",
		}},
	}
	g, url := startGateway(t, cfg, Options{})
	b := g.Scheduler().Backends()[0]

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (engine cache %+v)", what, b.EngineCache())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wantTokens := float64(blocks * blockChars / 4) // the stand-in's token is 4 characters
	waitFor("the engine's cache size", func() bool { return b.EngineCache().Tokens == wantTokens })
	// The learner's candidates are bounded by it before any evidence: the
	// smallest candidate at least as large (96 index blocks of 64 tokens).
	if got := b.CacheCapacity(); got != 128 {
		t.Errorf("believed capacity %d blocks before any request, want 128 (the engine's %v tokens rounded up)", got, wantTokens)
	}

	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 60)
	send := func() {
		t.Helper()
		resp := post(t, url, "/v1/chat/completions", chatBody("standin", false, prompt), nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	send()
	waitFor("a hit rate of 0 for a new prompt", func() bool { return b.EngineCache().HitRate == 0 })
	send()
	waitFor("a hit rate over 0.8 for the same prompt again", func() bool { return b.EngineCache().HitRate > 0.8 })

	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ttft_gateway_backend_engine_cache_tokens{backend="a"} 6144`,
		`ttft_gateway_backend_prefix_cache_hit_ratio{backend="a"} 0.`,
		`ttft_gateway_backend_cache_capacity_blocks{backend="a"} 128`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("gateway /metrics lacks %q", want)
		}
	}
}

// The first request waits for the first round of health checks and
// metric scrapes: on a cold start the scheduler then knows each engine's
// published KV capacity before it places a prompt group (Serve). The
// backend answers its health check late, and counts whether its metrics
// had been read when the first chat request reached it.
func TestFirstRequestAfterFirstScrape(t *testing.T) {
	fb := newFakeBackend(t, "a", 2)
	var scraped, firstSawScrape, chats atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			time.Sleep(300 * time.Millisecond)
			return
		case "/metrics":
			scraped.Store(1)
			io.WriteString(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n")
			return
		}
		if chats.Add(1) == 1 {
			firstSawScrape.Store(scraped.Load())
		}
		fb.serve(w, r)
	}))
	defer srv.Close()
	cfg := Config{
		Policy: "slo-predictive",
		Health: Health{Path: "/health", Interval: Duration(time.Minute)},
		Backends: []BackendConfig{{
			Name: "a", URL: srv.URL, API: "openai", Models: []string{"m"}, MetricsURL: srv.URL + "/metrics",
		}},
	}
	g, url := startGateway(t, cfg, Options{})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "hello"), nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if firstSawScrape.Load() != 1 {
		t.Error("the first request reached the backend before the gateway had read its metrics")
	}
	if got := g.Scheduler().Backends()[0].EngineCache().Tokens; got != 1600 {
		t.Errorf("engine cache %v tokens, want 1600", got)
	}
}

// A health check that hangs delays serving by no more than its timeout.
func TestHangingHealthCheckDoesNotBlockServing(t *testing.T) {
	fb := newFakeBackend(t, "a", 2)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fb.serve(w, r)
	}))
	defer srv.Close()
	defer close(release)
	cfg := Config{
		Policy:   "round-robin",
		Health:   Health{Path: "/health", Interval: Duration(time.Minute), Timeout: Duration(100 * time.Millisecond)},
		Backends: []BackendConfig{{Name: "a", URL: srv.URL, API: "openai", Models: []string{"m"}}},
	}
	_, url := startGateway(t, cfg, Options{})
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("m", true, "hello")))
	if err != nil {
		t.Fatalf("first request with a hanging health check (timeout 100 ms): %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// A client's first request sees what the first health round learnt: the
// models a backend configured without a model list serves (an OpenAI
// client lists models before it sends anything).
func TestFirstModelListAfterFirstCheck(t *testing.T) {
	fb := newFakeBackend(t, "a", 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			time.Sleep(300 * time.Millisecond)
			return
		}
		fb.serve(w, r)
	}))
	defer srv.Close()
	cfg := Config{
		Policy:   "round-robin",
		Health:   Health{Path: "/health", Interval: Duration(time.Minute)},
		Backends: []BackendConfig{{Name: "a", URL: srv.URL, API: "openai"}},
	}
	_, url := startGateway(t, cfg, Options{})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"id":"m"`) {
		t.Errorf("first /v1/models answer %s, want the backend's model m", body)
	}
}

// Serve's wait for the first round is bounded by the health timeout even
// when the round never ends (a check stuck past its own deadline).
func TestFirstCheckWaitBounded(t *testing.T) {
	g, err := New(Config{
		Policy:   "round-robin",
		Health:   Health{Path: "/health", Interval: Duration(time.Minute), Timeout: Duration(50 * time.Millisecond)},
		Backends: []BackendConfig{{Name: "a", URL: "http://127.0.0.1:1", API: "openai", Models: []string{"m"}}},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	<-g.checked                     // the real round; the health loop no longer touches the field
	g.checked = make(chan struct{}) // a round that never ends
	done := make(chan struct{})
	go func() { g.firstCheckWait(context.Background()); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("firstCheckWait still waiting 10 s into a round that never ends (health timeout 50 ms)")
	}
}

// End to end over loopback: a stand-in that publishes no metrics, asked
// for whole (not streamed) answers, so that no TTFT is observed either.
// The cached tokens each answer's usage reports are the only evidence of
// its cache, and from them the gateway learns a capacity within a factor
// of two of the stand-in's 100 blocks (without them it believes the
// whole index: CacheCapacity 0).
func TestCacheCapacityFromReportedCachedTokens(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sv, err := standin.Start(ctx, standin.Config{Name: "a", CacheBlocks: 100, BlockChars: 256, NoMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Policy:   "slo-predictive",
		Health:   Health{Path: "/health", Interval: Duration(time.Minute)},
		Backends: []BackendConfig{{Name: "a", URL: sv.URL(), API: "openai", Models: []string{"standin"}}},
	}
	g, url := startGateway(t, cfg, Options{})
	sendGroupPrompts(t, 64, func(prompt string) {
		drain(t, post(t, url, "/v1/chat/completions", chatBody("standin", false, prompt), nil))
	})
	if got := g.Scheduler().Backends()[0].CacheCapacity(); got != 64 && got != 128 {
		t.Errorf("believed capacity %d blocks after 64 answers, want 64 or 128 (the stand-in holds 100)", got)
	}
}

// anthropicCacheBackend answers /v1/messages with whole answers from a
// prompt cache of blocks of 256 characters, least recently used first
// out, holding capBlocks: its usage reports the blocks of the prompt's
// longest cached prefix as cache_read_input_tokens, the rest as
// input_tokens, at four characters a token, as Anthropic's does.
func anthropicCacheBackend(t *testing.T, capBlocks int) *httptest.Server {
	var mu sync.Mutex
	lru := map[string]int{} // block key → last use
	clock := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			System   string `json:"system"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if r.URL.Path != "/v1/messages" || json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "want a message", http.StatusBadRequest)
			return
		}
		prompt := body.System
		for _, m := range body.Messages {
			prompt += m.Content
		}
		mu.Lock()
		hit, prefix := 0, true
		for i := 0; i+256 <= len(prompt); i += 256 {
			key := prompt[:i+256]
			_, ok := lru[key]
			if prefix && ok {
				hit++
			} else {
				prefix = false
			}
			clock++
			lru[key] = clock
		}
		for len(lru) > capBlocks {
			oldest, at := "", clock+1
			for k, v := range lru {
				if v < at {
					oldest, at = k, v
				}
			}
			delete(lru, oldest)
		}
		mu.Unlock()
		read := hit * 256 / 4
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":%d,"output_tokens":1}}`,
			len(prompt)/4-read, read)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The same as TestCacheCapacityFromReportedCachedTokens with an
// Anthropic backend, whose usage reports the tokens read from its cache
// apart from input_tokens: the gateway learns its capacity of 100 blocks
// within a factor of two from them.
func TestCacheCapacityFromAnthropicCacheReads(t *testing.T) {
	sv := anthropicCacheBackend(t, 100)
	cfg := Config{
		Policy:   "slo-predictive",
		Health:   Health{Path: "/health", Interval: Duration(time.Minute)},
		Backends: []BackendConfig{{Name: "a", URL: sv.URL, API: "anthropic", Models: []string{"claude"}}},
	}
	g, url := startGateway(t, cfg, Options{})
	sendGroupPrompts(t, 64, func(prompt string) {
		b, _ := json.Marshal(map[string]any{"model": "claude", "max_tokens": 4, "messages": []any{map[string]any{"role": "user", "content": prompt}}})
		drain(t, post(t, url, "/v1/messages", string(b), nil))
	})
	if got := g.Scheduler().Backends()[0].CacheCapacity(); got != 64 && got != 128 {
		t.Errorf("believed capacity %d blocks after 64 answers, want 64 or 128 (the backend holds 100)", got)
	}
}

// sendGroupPrompts sends n prompts, each one of 24 groups' 4 KiB prefix
// then 1 KiB of its own, through send.
func sendGroupPrompts(t *testing.T, n int, send func(prompt string)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range n {
		prefix := strings.Repeat(fmt.Sprintf("group %02d says. ", rng.IntN(24)), 4096/16)
		send(prefix + strings.Repeat(fmt.Sprintf("unique %06d. ", i), 1024/15))
	}
}

// drain reads and closes an answer that must be a 200.
func drain(t *testing.T, resp *http.Response) {
	t.Helper()
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// End to end over loopback: a backend 20 ms away that answers a
// stream's headers before queueing it (as vLLM does) is learnt to spend
// about 20 ms of every TTFT on the wire, and the gateway exports it; one
// that sends its headers with the first token (as Ollama does) shows no
// transit, and none is exported for it.
func TestBackendTransitFromHeaders(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rtt = 20 * time.Millisecond
	early, err := standin.Start(ctx, standin.Config{Name: "early", Network: rtt, Overhead: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	late, err := standin.Start(ctx, standin.Config{Name: "late", Network: rtt, Overhead: time.Millisecond, LateHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Policy: "round-robin",
		Backends: []BackendConfig{
			{Name: "early", URL: early.URL(), API: "openai"},
			{Name: "late", URL: late.URL(), API: "openai"},
		},
	}
	g, url := startGateway(t, cfg, Options{})
	for range 8 {
		resp := post(t, url, "/v1/chat/completions", chatBody("standin", true, "Say something."), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		drain(t, resp)
	}
	for _, b := range g.Scheduler().Backends() {
		got := b.Transit()
		switch b.Name() {
		case "early":
			if got < rtt || got > rtt+15*time.Millisecond {
				t.Errorf("backend early: transit %v, want about %v (its round trip)", got, rtt)
			}
		case "late":
			if got != 0 {
				t.Errorf("backend late: transit %v, want none (its headers come with the first token)", got)
			}
		}
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `ttft_gateway_backend_transit_seconds{backend="early"} 0.02`) {
		t.Errorf("metrics lack the early backend's transit of 0.02… s:\n%s", grepLines(string(body), "transit"))
	}
	if strings.Contains(string(body), `ttft_gateway_backend_transit_seconds{backend="late"}`) {
		t.Errorf("metrics export a transit for the late backend:\n%s", grepLines(string(body), "transit"))
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

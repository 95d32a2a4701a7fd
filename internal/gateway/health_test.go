package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
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

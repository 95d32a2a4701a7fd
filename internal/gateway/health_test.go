package gateway

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// What the scrape reads from each engine's exposition; NaN where the
// engine publishes nothing.
func TestParseEngineStats(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name                             string
		text                             string
		waiting, kv, tokens, q, h, hrate float64
	}{
		{
			name: "vLLM v1 (client_golang names counters with _total)",
			text: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 600
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{model_name="m"} 99999
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048",num_gpu_blocks_override="None"} 1
`,
			waiting: 3, kv: 0.25, tokens: 2048 * 16, q: 1000, h: 600, hrate: nan,
		},
		{
			name: "vLLM before v0.10 (gpu_ names)",
			text: `vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="m"} 50
vllm:gpu_prefix_cache_hits_total{model_name="m"} 5
`,
			waiting: nan, kv: 0.5, tokens: nan, q: 50, h: 5, hrate: nan,
		},
		{
			name: "stand-in (TYPE line without _total), two models summed",
			text: `# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="a"} 10
vllm:prefix_cache_queries_total{model_name="b"} 30
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="a"} 4
vllm:prefix_cache_hits_total{model_name="b"} 6
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="64",num_gpu_blocks="96"} 1
`,
			waiting: nan, kv: nan, tokens: 96 * 64, q: 40, h: 10, hrate: nan,
		},
		{
			name: "KV cache not yet profiled",
			text: `vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1
`,
			waiting: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan,
		},
		{
			name: "SGLang",
			text: `# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m"} 161721
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.75
# TYPE sglang:num_requests_waiting gauge
sglang:num_requests_waiting{model_name="m"} 2
`,
			waiting: 2, kv: nan, tokens: 161721, q: nan, h: nan, hrate: 0.75,
		},
		{
			name: "hits without queries are not a rate",
			text: `vllm:prefix_cache_hits_total 5
`,
			waiting: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan,
		},
	}
	same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := parseEngineStats(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"waiting", es.Waiting, tt.waiting}, {"kv usage", es.KVUsage, tt.kv}, {"cache tokens", es.CacheTokens, tt.tokens},
				{"prefix queries", es.PrefixQueries, tt.q}, {"prefix hits", es.PrefixHits, tt.h}, {"hit rate gauge", es.HitRate, tt.hrate},
			} {
				if !same(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
	if _, err := parseEngineStats(strings.NewReader("vllm:x{ 1\n")); err == nil {
		t.Error("a malformed exposition parsed")
	}
}

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

// The simulator (ttft sim serve) publishes vLLM's names: its KV size and
// prefix-cache counters parse, and its counters count a repeated prompt
// as hits.
func TestEngineStatsFromSimulator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := serve.DefaultConfig()
	cfg.ServedModelName = "m"
	sv, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sv.Close()
	scrape := func() sched.EngineStats {
		t.Helper()
		resp, err := http.Get(sv.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		es, err := parseEngineStats(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	before := scrape()
	if !(before.CacheTokens > 0) {
		t.Errorf("simulator's KV size %v tokens, want a positive number", before.CacheTokens)
	}
	if math.IsNaN(before.PrefixQueries) || math.IsNaN(before.PrefixHits) {
		t.Fatalf("simulator's prefix-cache counters not read: %+v", before)
	}
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 80)
	for range 2 {
		resp := post(t, sv.URL(), "/v1/chat/completions", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"`+prompt+`"}]}`, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	after := scrape()
	dq, dh := after.PrefixQueries-before.PrefixQueries, after.PrefixHits-before.PrefixHits
	if !(dq > 0 && dh > 0.3*dq && dh <= dq) {
		t.Errorf("two equal prompts: %v hits of %v queried tokens, want a hit rate in (0.3, 1]", dh, dq)
	}
}

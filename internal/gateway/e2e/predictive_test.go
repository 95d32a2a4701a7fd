package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// TestSLOPredictiveOnLiveFleet: a live H100 replica and a live A10G replica
// (≈8× slower prefill) behind the gateway running slo-predictive. With
// long, uncached prompts and the chat SLO, the predictors learn within a
// few requests that only the H100 meets the SLO, so it serves most traffic,
// and no request fails.
func TestSLOPredictiveOnLiveFleet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mk := func(gpu string) *serve.Server {
		cfg := serve.DefaultConfig()
		cfg.GPU = gpu
		cfg.MaxModelLen = 8192
		cfg.ServedModelName = "m"
		s, err := serve.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	fast, slow := mk("h100-sxm"), mk("a10g")
	cfg := gateway.Config{Policy: "slo-predictive", SLOClass: "chat", Backends: []gateway.BackendConfig{
		{Name: "h100", URL: fast.URL(), Models: []string{"m"}},
		{Name: "a10g", URL: slow.URL(), Models: []string{"m"}},
	}}
	g, err := gateway.New(cfg, gateway.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ctx, ln)
	url := "http://" + ln.Addr().String()

	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}
	count := map[string]int{}
	const n = 30
	for i := range n {
		var b strings.Builder
		for range 2500 {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, b.String())
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(raw), "[DONE]") {
			t.Fatalf("request %d: status %d\n%s", i, resp.StatusCode, raw)
		}
		count[resp.Header.Get(gateway.HeaderBackend)]++
	}
	t.Logf("h100 served %d, a10g %d of %d", count["h100"], count["a10g"], n)
	if count["h100"] < n*3/4 {
		t.Fatalf("the fast replica served only %d of %d requests (a10g %d)", count["h100"], n, count["a10g"])
	}
}

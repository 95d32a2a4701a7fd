package enginemetrics

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// The simulator (ttft sim serve) publishes vLLM's names: its queue and
// KV gauges, KV size and prefix-cache counters parse, the size is the
// deployment's, and its counters count a repeated prompt as hits.
func TestScrapeSimulator(t *testing.T) {
	ctx := t.Context()
	sv := startSim(t, ctx, "")
	defer sv.Close()
	before, err := Scrape(ctx, http.DefaultClient, sv.URL()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	d := sv.Deployment()
	if want := float64(d.NumBlocks * d.BlockSize); before.CacheTokens != want {
		t.Errorf("simulator's KV size %v tokens, want its deployment's %v", before.CacheTokens, want)
	}
	if _, _, _, ok := Load(before); !ok || before.Waiting != 0 || before.Running != 0 || before.KVUsage != 0 {
		t.Errorf("idle simulator's gauges %+v (ok %v), want 0 waiting, running and KV usage", before, ok)
	}
	if math.IsNaN(before.PrefixQueries) || math.IsNaN(before.PrefixHits) {
		t.Fatalf("simulator's prefix-cache counters not read: %+v", before)
	}
	for range 2 {
		sendPrompt(t, sv.URL())
	}
	after, err := Scrape(ctx, http.DefaultClient, sv.URL()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	dq, dh := after.PrefixQueries-before.PrefixQueries, after.PrefixHits-before.PrefixHits
	if !(dq > 0 && dh > 0.3*dq && dh <= dq) {
		t.Errorf("two equal prompts: %v hits of %v queried tokens, want a hit rate in (0.3, 1]", dh, dq)
	}
}

// A simulator restarted on the same address is seen as a restart by the
// scheduler reading its metrics (its counters start again from zero), and
// the backend's prefix index, which held the prompt sent before, is
// emptied; the simulator publishes the process start time as vLLM's
// Python client does.
func TestSimulatorRestartEmptiesPrefixIndex(t *testing.T) {
	ctx := t.Context()
	sv := startSim(t, ctx, "")
	send := func(url string) { sendPrompt(t, url) }
	b := sched.NewBackend(sched.BackendSpec{Name: "sim"})
	scrape := func(url string) sched.EngineStats {
		t.Helper()
		es, err := Scrape(ctx, http.DefaultClient, url+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b.SetEngineStats(es)
		return es
	}
	first := scrape(sv.URL())
	if !(first.StartTime > 1e9) {
		t.Errorf("simulator's process start time %v, want Unix seconds", first.StartTime)
	}
	send(sv.URL())
	send(sv.URL())
	h := sched.NewBlockHasher(sched.DefaultBlockBytes)
	h.Text(simPrompt)
	b.Prefix().Insert(h.Hashes())
	scrape(sv.URL())
	if b.EngineRestarts() != 0 || b.Prefix().Match(h.Hashes()) == 0 {
		t.Fatalf("running engine: restarts %d, index matches %d blocks", b.EngineRestarts(), b.Prefix().Match(h.Hashes()))
	}

	addr := strings.TrimPrefix(sv.URL(), "http://")
	sv.Close()
	// A pooled keep-alive connection to the old process would carry the
	// next POST to a closed socket (EOF; a POST is not retried).
	http.DefaultClient.CloseIdleConnections()
	sv2 := startSim(t, ctx, addr)
	defer sv2.Close()
	send(sv2.URL()) // fewer tokens queried than before the restart
	scrape(sv2.URL())
	if b.EngineRestarts() != 1 || b.Prefix().Match(h.Hashes()) != 0 {
		t.Fatalf("restarted engine: restarts %d, index matches %d blocks; want 1 and 0", b.EngineRestarts(), b.Prefix().Match(h.Hashes()))
	}
}

var simPrompt = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 80)

// startSim starts a simulator serving model "m" on addr (any loopback
// port when empty).
func startSim(t *testing.T, ctx context.Context, addr string) *serve.Server {
	t.Helper()
	cfg := serve.DefaultConfig()
	cfg.ServedModelName = "m"
	if addr != "" {
		cfg.Addr = addr
	}
	sv, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the simulator on %q: %v", addr, err)
	}
	return sv
}

// sendPrompt sends simPrompt as a one-token chat completion.
func sendPrompt(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"`+simPrompt+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

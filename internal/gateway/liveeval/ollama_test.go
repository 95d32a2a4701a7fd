package liveeval

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/enginetest"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gguf"
)

// TestLiveOllama is the suite's real-engine fleet, short: two Ollama
// instances (TTFT_OLLAMA or ollama on PATH; skipped without one, a
// failure under the integration switch, internal/testutil), each serving
// a generated model (Ollama's per-slot prompt cache is a real prefix
// cache; one slot each, one compute thread), behind the gateway with
// round-robin, prefix affinity and the default, one seed. It asserts
// that every request succeeds through every policy and logs the figures:
// with two cores shared by both engines, the gateway and the load, the
// comparison between policies is not stable enough to assert.
func TestLiveOllama(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two engines")
	}
	bin := enginetest.Binary(t)
	a, b := enginetest.Start(t, bin), enginetest.Start(t, bin)
	const model = "tiny"
	c := gguf.DefaultConfig()
	a.Create(t, model, c)
	b.Create(t, model, c)
	// Prompts well within the model's context, few enough requests for
	// one CPU thread per engine: 4 groups sharing 1 KiB prefixes.
	w := Workload{Groups: 4, PrefixChars: 1024, SuffixMin: 100, SuffixMax: 300, OutputTokens: 4,
		Warmup: 8, Requests: 40, Concurrency: 2}
	f := Fleet{Name: "ollama", About: "2 Ollama instances, generated model, 1 slot each",
		URLs: []string{a.URL, b.URL}, ModelName: model, HealthPath: "/v1/models",
		Workload: w, SLO: 2 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pols := []string{sched.RoundRobin, sched.PrefixAffinity, sched.SLOPredictive}
	rs, err := Run(ctx, Options{Fleets: []Fleet{f}, Policies: pols, Seeds: []uint64{1}})
	if err != nil {
		t.Fatalf("%v\nengine a:\n%s\nengine b:\n%s", err, a.LogTail(), b.LogTail())
	}
	var buf bytes.Buffer
	Format(&buf, Summarize(rs))
	t.Logf("\n%s", buf.String())
	for _, r := range rs {
		if r.N != w.Requests || r.Failed > 0 || r.P50 > r.P99 {
			t.Errorf("%s: %d scored, %d failed, P50 %v P99 %v", r.Policy, r.N, r.Failed, r.P50, r.P99)
		}
	}
}

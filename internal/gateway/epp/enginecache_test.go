package epp

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The picker's scrapes feed the scheduler everything the engine publishes
// about its cache, as the gateway's health check does: the KV size of a
// simulated vLLM engine (its deployment's blocks × block size, not read
// back from the parser's view) and the prefix-cache hit rate it counted
// between two scrapes, low for a new prompt and high for the same prompt
// again.
func TestPickerLearnsEngineCache(t *testing.T) {
	engines := startEngines(t, 1, nil)
	addr := hostPort(engines[0].URL())
	s, env := startPicker(t, Options{ScrapeInterval: 20 * time.Millisecond}, []Endpoint{{Addr: addr}})
	waitReady(t, s)
	b := s.Scheduler().Backends()[0]
	if b.Name() != addr {
		t.Fatalf("backend %q, want %q", b.Name(), addr)
	}
	d := engines[0].Deployment()
	want := float64(d.NumBlocks * d.BlockSize)
	eventually(t, "the engine's KV size learnt", func() bool { return b.EngineCache().Tokens == want })

	model := engines[0].ModelName()
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 80)
	if o := env.mustDo(call{body: chatBody(model, prompt, "hi")}); o.dest != addr {
		t.Fatalf("destination %q, want %s", o.dest, addr)
	}
	eventually(t, "a hit rate under 0.3 for a new prompt", func() bool { return b.EngineCache().HitRate < 0.3 })
	env.mustDo(call{body: chatBody(model, prompt, "hi")})
	eventually(t, "a hit rate over 0.3 for the same prompt again", func() bool { return b.EngineCache().HitRate > 0.3 })

	// Running requests still reach Endpoint: 0 on an idle engine, not NaN.
	em, eligible, ok := s.Endpoint(addr)
	if !ok || !eligible || math.IsNaN(em.Running) || math.IsNaN(em.Waiting) || math.IsNaN(em.KVUsage) {
		t.Errorf("Endpoint(%s) = %+v eligible %v known %v", addr, em, eligible, ok)
	}
}

// An endpoint whose metrics carry none of the queue and KV gauges is not
// picked: the picker can tell nothing about it.
func TestEndpointWithoutGaugesNotPicked(t *testing.T) {
	ip := loopbackAddr(t, 0)
	bare := fakeEngine(t, ip, func() string { return "process_cpu_seconds_total 3\n" })
	good := fakeEngine(t, ip, func() string { return "vllm:num_requests_waiting 0\n" })
	s, _ := startPicker(t, Options{ScrapeInterval: 20 * time.Millisecond, HealthPath: "-"}, []Endpoint{{Addr: bare}, {Addr: good}})
	waitReady(t, s)
	eventually(t, "the endpoint with gauges eligible", func() bool { _, e, _ := s.Endpoint(good); return e })
	if _, eligible, ok := s.Endpoint(bare); !ok || eligible {
		t.Errorf("endpoint without gauges: eligible %v known %v, want known and not eligible", eligible, ok)
	}
}

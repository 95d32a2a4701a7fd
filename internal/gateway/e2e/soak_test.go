package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// soakRequestsEnv sets the fault soak's length (docs/gateway.md): the
// default is short enough for every go test run.
const soakRequestsEnv = "TTFT_SOAK_REQUESTS"

// TestFaultSoak runs many requests through the gateway in front of four
// simulator replicas with injected faults: one answers 503 to 5% of
// requests (before any byte), one cuts a quarter of its streams after 6
// tokens, one stalls a tenth of its streams after 4 tokens for longer than
// idle_stream_timeout, and one is closed a third of the way through (its
// streams cut, its port refusing) and restarted on its port half way. One
// client in eight reads slowly; a quarter speak the Anthropic API
// (translated to the replicas' OpenAI API).
//
// Every request is accounted for: completed with exactly the text an
// unbroken stream has (those the faults cut were continued: the count is
// logged), or failed with a stated class, its text so far a prefix of that
// text; no request's text is lost, repeated or reordered; the heap after
// the run is within a bound of the heap before it; and the restarted
// replica serves again.
func TestFaultSoak(t *testing.T) {
	n := 2500
	if v := os.Getenv(soakRequestsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of requests", soakRequestsEnv, v)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refs := newReferences(t, ctx)
	faults := []serve.FaultConfig{
		{},
		{ErrorRate: 0.05, ErrorStatus: 503},
		{CutAfter: 6, MidRate: 0.25},
		{StallMid: 2 * time.Second, StallMidAfter: 4, MidRate: 0.1},
	}
	reps := make([]*serve.Server, len(faults))
	cfg := gateway.Config{Policy: "least-outstanding"}
	for i, f := range faults {
		reps[i] = startSim(t, ctx, f)
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{Name: fmt.Sprint("r", i), URL: reps[i].URL(), Models: []string{"m"}})
	}
	cfg.Health.Path = "/health"
	cfg.Health.Interval = gateway.Duration(100 * time.Millisecond)
	cfg.Limits.IdleStreamTimeout = gateway.Duration(300 * time.Millisecond)
	cfg.Limits.FirstByteTimeout = gateway.Duration(3 * time.Second)
	url, reg := startGateway(t, ctx, cfg)

	const prompts, workers = 32, 32
	prompt := func(i int) string { return fmt.Sprintf("soak prompt %d: tell me a story", i%prompts) }
	var wg sync.WaitGroup
	for i := range prompts {
		wg.Add(1)
		go func() { defer wg.Done(); refs.want(t, chatAPI, prompt(i), refTokens) }()
	}
	wg.Wait()
	heap0, rss0 := memNow()

	type result struct {
		d      delivered
		want   string
		n      int
		sent   time.Time
		client string
	}
	results := make([]result, n)
	var next atomic.Int64
	var restarted atomic.Int64
	killAt, restartAt := int64(n/3), int64(n/2)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				switch int64(i) {
				case killAt:
					reps[0].Close() // its streams cut, its port refusing
				case restartAt:
					c := serve.DefaultConfig()
					c.ServedModelName = "m"
					c.Addr = strings.TrimPrefix(reps[0].URL(), "http://")
					s, err := serve.Start(ctx, c)
					if err != nil {
						t.Errorf("restarting r0: %v", err)
						break
					}
					t.Cleanup(func() { s.Close() })
					restarted.Store(time.Now().UnixNano())
				}
				c := chatAPI
				if i%4 == 3 {
					c = anthropicAPI
				}
				maxTok := 8 + 8*(i%4)
				r := result{want: refs.want(t, c, prompt(i), maxTok), n: maxTok, sent: time.Now(), client: c.name}
				r.d = streamOnce(ctx, url, c, c.body(prompt(i), maxTok), i%8 == 5)
				results[i] = r
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	heap1, rss1 := memNow()

	classes := map[string]int{}
	completed, failed := 0, 0
	restartedAt := restarted.Load()
	servedAfterReturn := 0
	for i, r := range results {
		d := r.d
		ok := d.transport == nil && d.status == 200 && d.done && d.errEv == "" && d.text == r.want && d.completion == r.n
		switch {
		case ok:
			completed++
			if restartedAt != 0 && r.sent.UnixNano() > restartedAt+int64(time.Second) && d.backend == "r0" {
				servedAfterReturn++
			}
			continue
		case d.transport != nil:
			classes["transport: "+d.transport.Error()]++
		case d.status != 200:
			classes[fmt.Sprintf("status %d", d.status)]++
		case d.errEv != "":
			classes["error event: "+errClass(d.errEv)]++
		default:
			t.Errorf("request %d (%s via %s): ended without an error but is not the unbroken answer: done %v usage %d of %d\n got %q\nwant %q", i, r.client, d.backend, d.done, d.completion, r.n, d.text, r.want)
			continue
		}
		failed++
		// A failed stream's text so far is still the start of its answer:
		// nothing repeated or out of order.
		if !strings.HasPrefix(r.want, d.text) {
			t.Errorf("request %d (failed) delivered %q, not a prefix of %q", i, d.text, r.want)
		}
	}
	continued := counter(t, reg, "ttft_gateway_continuations_total", map[string]string{"outcome": "completed"})
	var cls []string
	for c, k := range classes {
		cls = append(cls, fmt.Sprintf("%d × %s", k, c))
	}
	sort.Strings(cls)
	t.Logf("%d requests in %v: %d completed (%v of them continued mid-stream), %d failed %v; %d served by the restarted replica; heap %d → %d KiB, RSS %d → %d KiB",
		n, elapsed.Round(time.Millisecond), completed, continued, failed, cls, servedAfterReturn, heap0>>10, heap1>>10, rss0>>10, rss1>>10)
	if completed+failed != n {
		t.Errorf("%d completed + %d failed != %d requests", completed, failed, n)
	}
	if failed > n/100 {
		t.Errorf("%d of %d requests failed, want at most 1%%", failed, n)
	}
	if continued == 0 {
		t.Error("no stream was continued: the mid-stream faults hit nothing")
	}
	if servedAfterReturn == 0 {
		t.Error("the restarted replica served no request after it returned")
	}
	// What a run of this length may leave behind: the replicas' engines
	// and caches and the gateway's learnt state are bounded; streams are
	// not kept.
	if growth := int64(heap1) - int64(heap0); growth > 64<<20 {
		t.Errorf("heap grew by %d MiB over the run", growth>>20)
	}
}

// errClass is an error event's message without its backend's name, as a
// failure class.
func errClass(ev string) string {
	var m struct {
		Message string `json:"message"`
	}
	if err := jsonUnmarshal(ev, &m); err != nil || m.Message == "" {
		return ev
	}
	if i := strings.Index(m.Message, "(not continued: "); i >= 0 {
		return m.Message[i:]
	}
	return m.Message
}

// memNow is the heap in use after a collection and the process's resident
// set (0 where /proc is not there).
func memNow() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return ms.HeapAlloc, rss
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// testFaultHeader overrides, for one request, the fault a testBackend
// answers with.
const testFaultHeader = "X-Test-Fault"

// testBackend is an OpenAI-compatible backend on a fixed loopback address
// that can be stopped (every connection closed at once, as when the process
// is killed) and started again on the same port. Faults, per backend
// (setFault) or per request (X-Test-Fault):
//
//	""             200: a whole answer, or a 3-token stream
//	"500"          500
//	"429:N"        429 with Retry-After: N
//	"slow:D"       answer after D (a whole answer: its headers come last)
//	"stall-first"  stream: headers and a role event, then nothing
type testBackend struct {
	name string
	addr string
	idle time.Duration // the server's keep-alive idle timeout (0: none)

	fault atomic.Value
	hits  atomic.Int64
	conns atomic.Int64

	mu  sync.Mutex
	srv *http.Server
}

func newTestBackend(t *testing.T, name string, idle time.Duration) *testBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBackend{name: name, addr: ln.Addr().String(), idle: idle}
	tb.fault.Store("")
	tb.serve(ln)
	t.Cleanup(tb.stop)
	return tb
}

func (tb *testBackend) URL() string       { return "http://" + tb.addr }
func (tb *testBackend) setFault(f string) { tb.fault.Store(f) }

func (tb *testBackend) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(tb.handle), IdleTimeout: tb.idle, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tb.conns.Add(1)
		}
	}}
	tb.mu.Lock()
	tb.srv = srv
	tb.mu.Unlock()
	go srv.Serve(ln)
}

// stop closes the listener and every connection, idle or busy.
func (tb *testBackend) stop() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if tb.srv != nil {
		tb.srv.Close()
		tb.srv = nil
	}
}

// start listens again on the same port.
func (tb *testBackend) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for end := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", tb.addr); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatalf("restarting %s on %s: %v", tb.name, tb.addr, err)
	}
	tb.serve(ln)
}

func (tb *testBackend) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	}
	tb.hits.Add(1)
	body, _ := io.ReadAll(r.Body)
	stream := strings.Contains(string(body), `"stream":true`)
	fault := tb.fault.Load().(string)
	if f := r.Header.Get(testFaultHeader); f != "" {
		fault = f
	}
	wait := func(d time.Duration) bool {
		select {
		case <-r.Context().Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	switch kind, arg, _ := strings.Cut(fault, ":"); kind {
	case "500":
		http.Error(w, `{"error":{"message":"boom"}}`, 500)
		return
	case "429":
		w.Header().Set("Retry-After", arg)
		http.Error(w, `{"error":{"message":"slow down"}}`, 429)
		return
	case "slow":
		d, _ := time.ParseDuration(arg)
		if !wait(d) {
			return
		}
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"t0 t1 t2 "}}],"usage":{"prompt_tokens":5,"completion_tokens":3}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	w.(http.Flusher).Flush()
	if fault == "stall-first" {
		wait(time.Minute)
		return
	}
	for i := range 3 {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func testCfg(bs ...*testBackend) Config {
	c := Config{Policy: "round-robin"}
	for _, b := range bs {
		c.Backends = append(c.Backends, BackendConfig{Name: b.name, URL: b.URL(), Models: []string{"m"}})
	}
	return c
}

// send posts one chat request (fault: X-Test-Fault, "" for none) and
// returns its status, Retry-After and body.
func send(t *testing.T, url string, stream bool, fault string) (int, string, string) {
	t.Helper()
	var hdr map[string]string
	if fault != "" {
		hdr = map[string]string{testFaultHeader: fault}
	}
	resp := post(t, url, "/v1/chat/completions", chatBody("m", stream, "x"), hdr)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// burst sends n concurrent requests, so that the gateway pools several
// connections to the backend, and wants each answered 200.
func burst(t *testing.T, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = send(t, url, false, "slow:50ms")
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("warm-up request %d: status %d", i, c)
		}
	}
}

// A backend killed and restarted on the same port is usable at once: the
// connections pooled to the old process are neither handed to a client
// nor counted by the breaker (they were, one by one, until the pool's 90 s
// idle timeout: a restart cost 10 × 502 and ~880 × 503).
func TestRestartedBackendServesFirstRequest(t *testing.T) {
	for _, health := range []bool{false, true} {
		t.Run(fmt.Sprintf("health=%v", health), func(t *testing.T) {
			tb := newTestBackend(t, "b", 0)
			cfg := testCfg(tb)
			cfg.Health.Disabled = !health
			g, url := startGateway(t, cfg, Options{})
			burst(t, url, 8)
			if n := g.h1.IdleCount(tb.addr); n < 2 {
				t.Fatalf("%d pooled connections after a burst; the test needs several", n)
			}
			tb.stop()
			if health {
				// Down, then up: each transition empties the pool.
				waitHealthy(t, g, false)
				if n := g.h1.IdleCount(tb.addr); n != 0 {
					t.Fatalf("backend marked down with %d connections to the dead process still pooled", n)
				}
				tb.start(t)
				waitHealthy(t, g, true)
			} else {
				time.Sleep(50 * time.Millisecond)
				tb.start(t)
			}
			for i := range 10 {
				if code, _, body := send(t, url, i%2 == 0, ""); code != 200 {
					t.Fatalf("request %d after the restart: status %d %s", i, code, body)
				}
			}
			if st := g.Scheduler().Backends()[0].BreakerState(time.Now()); st != sched.BreakerClosed {
				t.Fatalf("breaker state %d after the restart, want closed", st)
			}
		})
	}
}

func waitHealthy(t *testing.T, g *Gateway, want bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); g.Scheduler().Backends()[0].Healthy() != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("backend not marked healthy=%v within 5 s", want)
		}
	}
}

// A backend that closes idle keep-alive connections (uvicorn, under vLLM
// and SGLang, after 5 s) costs the clients nothing after an idle gap, even
// with several stale connections pooled.
func TestIdleClosingBackendCostsNothing(t *testing.T) {
	tb := newTestBackend(t, "b", 150*time.Millisecond)
	cfg := testCfg(tb)
	cfg.Health.Disabled = true
	g, url := startGateway(t, cfg, Options{})
	for round := range 2 {
		burst(t, url, 6)
		if n := g.h1.IdleCount(tb.addr); n < 2 {
			t.Fatalf("%d pooled connections after a burst; the test needs several", n)
		}
		time.Sleep(500 * time.Millisecond) // the backend closes them all
		for i := range 6 {
			if code, _, body := send(t, url, i%2 == 0, ""); code != 200 {
				t.Fatalf("round %d, request %d after the idle gap: status %d %s", round, i, code, body)
			}
		}
	}
}

// Mixed faults, most of them the requests' own, never leave a fleet with no
// backend in rotation: 429s and client cancellations are no mark against a
// backend, and when too few backends are available the breakers are
// ignored (panic threshold), so fault-free requests are served.
func TestMixedFaultsKeepBackendsInRotation(t *testing.T) {
	var bs []*testBackend
	for i := range 4 {
		bs = append(bs, newTestBackend(t, fmt.Sprint("r", i), 0))
	}
	cfg := testCfg(bs...)
	cfg.Retry.Budget = 1
	g, url := startGateway(t, cfg, Options{})
	breakers := func() []int {
		var st []int
		for _, b := range g.Scheduler().Backends() {
			st = append(st, b.BreakerState(time.Now()))
		}
		return st
	}
	for range 10 {
		send(t, url, false, "429:1")
	}
	for range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody("m", false, "x")))
		req.Header.Set(testFaultHeader, "slow:2s")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	time.Sleep(300 * time.Millisecond) // the gateway notices the hang-ups
	for i, st := range breakers() {
		if st != sched.BreakerClosed {
			t.Fatalf("after 429s and client cancellations, backend r%d's breaker is %d, want closed", i, st)
		}
	}
	// Requests that fail everywhere (a 500 on every backend) open every
	// breaker; requests without a fault must still be served.
	for range 16 {
		send(t, url, false, "500")
	}
	open := 0
	for _, st := range breakers() {
		if st == sched.BreakerOpen {
			open++
		}
	}
	if open < 3 {
		t.Fatalf("only %d of 4 breakers open after 16 failing requests: the test proves nothing", open)
	}
	for i := range 8 {
		if code, _, body := send(t, url, i%2 == 0, ""); code != 200 {
			t.Fatalf("fault-free request %d with %d of 4 breakers open: status %d %s", i, open, code, body)
		}
	}
}

// A backend's 429 reaches the client as 429 with the backend's Retry-After
// (the soonest) when every backend tried said 429; a mix of failures is 502.
func TestBackend429ReachesClient(t *testing.T) {
	a := newTestBackend(t, "a", 0)
	b := newTestBackend(t, "b", 0)
	a.setFault("429:7")
	b.setFault("429:3")
	cfg := testCfg(a, b)
	cfg.Retry.Budget = 1
	_, url := startGateway(t, cfg, Options{})
	for i := range 4 {
		code, ra, body := send(t, url, i%2 == 0, "")
		if code != 429 || ra != "3" || !strings.Contains(body, "rate_limit_error") {
			t.Fatalf("every backend 429: status %d Retry-After %q body %s, want 429 with Retry-After 3", code, ra, body)
		}
	}
	b.setFault("500")
	for i := range 4 {
		if code, ra, body := send(t, url, false, ""); code != 502 || ra != "" {
			t.Fatalf("request %d, 429 and 500: status %d Retry-After %q %s, want 502 without Retry-After", i, code, ra, body)
		}
	}
	b.setFault("")
	for i := range 4 {
		if code, _, body := send(t, url, false, ""); code != 200 {
			t.Fatalf("request %d, 429 and a working backend: status %d %s, want the retry's 200", i, code, body)
		}
	}
}

// A first-token timeout is 504 whether or not the backend's headers came.
func TestFirstTokenTimeoutIs504(t *testing.T) {
	for _, fault := range []string{"stall-first", "slow:5s"} {
		t.Run(fault, func(t *testing.T) {
			tb := newTestBackend(t, "b", 0)
			tb.setFault(fault)
			cfg := testCfg(tb)
			cfg.Limits.FirstByteTimeout = Duration(200 * time.Millisecond)
			_, url := startGateway(t, cfg, Options{})
			code, _, body := send(t, url, true, "")
			if code != 504 || !strings.Contains(body, "first_byte_timeout") {
				t.Fatalf("status %d %s, want 504 naming limits.first_byte_timeout", code, body)
			}
		})
	}
}

// counterSum is the sum of a counter family's series.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// ttft_gateway_retries_total counts retries that happened, not those
// decided on when no other backend was left to retry on.
func TestRetriesMetricCountsRetriesThatHappened(t *testing.T) {
	a := newTestBackend(t, "a", 0)
	b := newTestBackend(t, "b", 0)
	a.setFault("500")
	b.setFault("500")
	cfg := testCfg(a, b)
	cfg.Retry.Budget = 1
	reg := prometheus.NewRegistry()
	_, url := startGateway(t, cfg, Options{Registerer: reg, Gatherer: reg})
	for range 3 {
		if code, _, _ := send(t, url, false, ""); code != 502 {
			t.Fatalf("status %d, want 502", code)
		}
	}
	// Each request tried a, then b (one retry), then found no backend left.
	if n := counterSum(t, reg, "ttft_gateway_retries_total"); n != 3 || a.hits.Load()+b.hits.Load() != 6 {
		t.Fatalf("retries_total %v with %d backend attempts for 3 requests, want 3 (one retry each)", n, a.hits.Load()+b.hits.Load())
	}
}

// A long non-streamed answer runs on one backend: a timeout after the
// backend took the request is not retried elsewhere (where it would take
// as long), and the error names the option that raises the limit.
func TestLongNonStreamedAnswerRunsOnce(t *testing.T) {
	var bs []*testBackend
	for i := range 3 {
		tb := newTestBackend(t, fmt.Sprint("r", i), 0)
		tb.setFault("slow:3s")
		bs = append(bs, tb)
	}
	cfg := testCfg(bs...)
	cfg.Retry.Budget = 1
	cfg.Limits.FirstByteTimeout = Duration(300 * time.Millisecond)
	cfg.Limits.ResponseTimeout = Duration(300 * time.Millisecond)
	g, url := startGateway(t, cfg, Options{})
	code, _, body := send(t, url, false, "")
	hits := int64(0)
	for _, tb := range bs {
		hits += tb.hits.Load()
	}
	if code != 504 || hits != 1 || !strings.Contains(body, "limits.response_timeout") {
		t.Fatalf("status %d after %d backend attempts: %s\nwant 504 after one attempt, naming limits.response_timeout", code, hits, body)
	}
	for i, b := range g.Scheduler().Backends() {
		if b.InFlight() != 0 || b.BreakerState(time.Now()) != sched.BreakerClosed {
			t.Fatalf("backend r%d: in flight %d, breaker %d", i, b.InFlight(), b.BreakerState(time.Now()))
		}
	}
}

// A non-streamed answer may take longer than first_byte_timeout, which
// bounds a stream's first token: its own bound is response_timeout.
func TestNonStreamedAnswerOutlastsFirstByteTimeout(t *testing.T) {
	tb := newTestBackend(t, "b", 0)
	tb.setFault("slow:600ms")
	cfg := testCfg(tb)
	cfg.Limits.FirstByteTimeout = Duration(150 * time.Millisecond)
	_, url := startGateway(t, cfg, Options{})
	if code, _, body := send(t, url, false, ""); code != 200 || tb.hits.Load() != 1 {
		t.Fatalf("status %d after %d attempts: %s", code, tb.hits.Load(), body)
	}
	// A stream still fails over on first_byte_timeout.
	if code, _, _ := send(t, url, true, ""); code != 504 {
		t.Fatalf("stream: status %d, want 504", code)
	}
}

func TestConfigPanicThresholdAndResponseTimeout(t *testing.T) {
	cfg, err := ParseConfig("gw.yaml", []byte("backends:\n  - name: a\n    url: http://127.0.0.1:1\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PanicThreshold != 0.5 || cfg.Limits.ResponseTimeout.Std() != 10*time.Minute {
		t.Fatalf("defaults: panic_threshold %v, response_timeout %v", cfg.PanicThreshold, cfg.Limits.ResponseTimeout.Std())
	}
	if _, err := ParseConfig("gw.yaml", []byte("panic_threshold: -1\nbackends:\n  - name: a\n    url: http://127.0.0.1:1\n"), nil); err != nil {
		t.Fatalf("a negative panic_threshold turns it off: %v", err)
	}
	_, err = ParseConfig("gw.yaml", []byte("panic_threshold: 50\nbackends:\n  - name: a\n    url: http://127.0.0.1:1\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "gw.yaml:1: panic_threshold") {
		t.Fatalf("panic_threshold 50: %v", err)
	}
}

// A backend whose breaker failures opened is back in rotation as soon as
// an active health check answers, not at the end of the breaker's
// cooldown (2 s at first, doubling to 30 s): an engine restart shorter
// than the cooldown kept its backend out for the rest of it.
func TestHealthCheckEndsBreakerCooldown(t *testing.T) {
	a, b := newTestBackend(t, "a", 0), newTestBackend(t, "b", 0)
	cfg := testCfg(a, b)
	cfg.Health.Interval = Duration(50 * time.Millisecond)
	cfg.Health.Failures = 1000 // only the breaker takes a out
	cfg.Retry.Budget = 1
	g, url := startGateway(t, cfg, Options{})
	a.stop()
	for i := range 12 { // round-robin: six tries of a, each retried on b
		if code, _, body := send(t, url, false, ""); code != 200 {
			t.Fatalf("request %d with a down: status %d %s", i, code, body)
		}
	}
	ba := g.Scheduler().Backends()[0]
	if st := ba.BreakerState(time.Now()); st != sched.BreakerOpen {
		t.Fatalf("a's breaker is %d after five failures, want open", st)
	}
	a.start(t)
	restarted := time.Now()
	before := a.hits.Load()
	for a.hits.Load() == before {
		if time.Since(restarted) > time.Second {
			t.Fatalf("a served nothing within 1 s of answering health checks every 50 ms (breaker %d; its cooldown is 2 s)", ba.BreakerState(time.Now()))
		}
		if code, _, body := send(t, url, false, ""); code != 200 {
			t.Fatalf("after a's restart: status %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := ba.BreakerState(time.Now()); st != sched.BreakerClosed {
		t.Fatalf("a's breaker is %d after its trial succeeded, want closed", st)
	}
}

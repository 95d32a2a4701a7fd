package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// startGateway serves a gateway on a loopback port and returns its base URL.
func startGateway(t testing.TB, cfg Config, opts Options) (*Gateway, string) {
	t.Helper()
	if cfg.Health.Interval == 0 {
		cfg.Health.Interval = Duration(50 * time.Millisecond)
	}
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		g.Close()
	})
	return g, "http://" + ln.Addr().String()
}

func chatBody(model string, stream bool, prompt string) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%q}]}`, model, stream, prompt)
}

func post(t testing.TB, url, path, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func cfgFor(policy string, bs ...*fakeBackend) Config {
	c := Config{Policy: policy}
	for _, b := range bs {
		c.Backends = append(c.Backends, BackendConfig{Name: b.name, URL: b.URL(), API: "both", Models: []string{"m", "small"}})
	}
	return c
}

func TestStreamingPassThroughIsByteExact(t *testing.T) {
	fb := newFakeBackend(t, "a", 20)
	_, url := startGateway(t, cfgFor("round-robin", fb), Options{})
	for _, tc := range []struct {
		path      string
		body      string
		anthropic bool
	}{
		{"/v1/chat/completions", chatBody("m", true, "hi"), false},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":20,"system":"You are terse.","messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		direct := readStream(t, post(t, fb.URL(), tc.path, tc.body, nil), tc.anthropic)
		via := readStream(t, post(t, url, tc.path, tc.body, nil), tc.anthropic)
		if via.raw != direct.raw {
			t.Errorf("%s: bytes differ through the gateway\n direct %q\n via    %q", tc.path, direct.raw, via.raw)
		}
		if via.text != expectedText(20) || !via.done || via.backend != "a" {
			t.Errorf("%s: text %q done %v backend %q", tc.path, via.text, via.done, via.backend)
		}
	}
	// Non-streaming answers pass through too.
	resp := post(t, url, "/v1/chat/completions", chatBody("m", false, "hi"), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), expectedText(20)) {
		t.Fatalf("non-streaming: %d %s", resp.StatusCode, b)
	}
}

func TestEventsAreFlushedAsTheyArrive(t *testing.T) {
	fb := newFakeBackend(t, "a", 5)
	fb.gap = 100 * time.Millisecond
	_, url := startGateway(t, cfgFor("round-robin", fb), Options{})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "hi"), nil)
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	var got []byte
	var first time.Time
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if first.IsZero() && bytes.Contains(got, []byte("t0 ")) {
			first = time.Now()
		}
		if err != nil {
			break
		}
	}
	if first.IsZero() {
		t.Fatalf("no first token in %q", got)
	}
	// The backend spaces its 5 tokens 100 ms apart: unbuffered, the first
	// reaches the client ≈400 ms before the stream ends; buffered, together.
	// (Relative, so a loaded machine slows both ends alike.)
	if gap := time.Since(first); gap < 250*time.Millisecond {
		t.Fatalf("first token reached the client only %v before the end: the stream is buffered", gap)
	}
}

// TestPreFirstByteFaultsRetriedInvisibly: every kind of failure before the
// first byte is retried on another backend; the client sees a clean,
// complete stream, and each request's tokens exactly once.
func TestPreFirstByteFaultsRetriedInvisibly(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // nothing listens here: a backend dead at start
	for _, fault := range []string{"500", "cut-before", "cut-after-role", "stall-first", "stall-before", "dead"} {
		t.Run(fault, func(t *testing.T) {
			bad := newFakeBackend(t, "bad", 8)
			good := newFakeBackend(t, "good", 8)
			cfg := cfgFor("round-robin", bad, good)
			if fault == "dead" {
				cfg.Backends[0].URL = deadURL
			} else {
				bad.setFault(fault)
			}
			cfg.Limits.FirstByteTimeout = Duration(400 * time.Millisecond) // ample for a healthy backend on a loaded machine
			cfg.Health.Disabled = true                                     // only retries may save these requests
			_, url := startGateway(t, cfg, Options{})
			retried := 0
			for i := range 6 {
				res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, fmt.Sprint("q", i)), nil), false)
				if res.status != 200 || res.text != expectedText(8) || !res.done || res.errEvent != "" || res.backend != "good" {
					t.Fatalf("request %d: status %d backend %q text %q done %v err %q", i, res.status, res.backend, res.text, res.done, res.errEvent)
				}
				if res.attempts != "1" {
					retried++
				}
			}
			if retried == 0 {
				t.Fatal("no request was retried: the faulty backend was never tried")
			}
		})
	}
}

// TestMidStreamFaultsEndWithErrorEvent: with continuation off, once tokens
// have gone to the client nothing is retried; the stream ends with a
// well-formed error event, and the tokens sent so far are each delivered
// exactly once (continue_test.go has the continued case).
func TestMidStreamFaultsEndWithErrorEvent(t *testing.T) {
	for _, fault := range []string{"kill-mid", "stall-mid"} {
		for _, anthropic := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/anthropic=%v", fault, anthropic), func(t *testing.T) {
				a := newFakeBackend(t, "a", 8)
				b := newFakeBackend(t, "b", 8)
				a.setFault(fault)
				b.setFault(fault)
				cfg := cfgFor("round-robin", a, b)
				cfg.Limits.IdleStreamTimeout = Duration(500 * time.Millisecond)
				cfg.Continuation.Max = -1
				_, url := startGateway(t, cfg, Options{})
				path, body := "/v1/chat/completions", chatBody("m", true, "x")
				if anthropic {
					path, body = "/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`
				}
				res := readStream(t, post(t, url, path, body, nil), anthropic)
				if res.status != 200 || res.text != expectedText(3) || res.done || res.errEvent == "" {
					t.Fatalf("status %d text %q done %v error %q\n%s", res.status, res.text, res.done, res.errEvent, res.raw)
				}
				if !strings.HasSuffix(res.raw, "\n\n") || strings.Contains(res.raw, `"t3`) {
					t.Fatalf("stream not ended cleanly (partial event forwarded?):\n%q", res.raw)
				}
				if a.hits.Load()+b.hits.Load() != 1 {
					t.Fatalf("a mid-stream failure was retried: %d backend hits", a.hits.Load()+b.hits.Load())
				}
			})
		}
	}
}

func TestNoBackendAndUnknownModel(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	_, url := startGateway(t, cfgFor("least-outstanding", fb), Options{})
	resp := post(t, url, "/v1/chat/completions", chatBody("unknown", true, "x"), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
	resp = post(t, url, "/v1/chat/completions", `{"model":`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "not valid JSON") {
		t.Fatalf("bad JSON: %d %s", resp.StatusCode, b)
	}
	resp = post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), map[string]string{"X-Slo-Class": "batch"})
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "X-Slo-Class") {
		t.Fatalf("bad class: %d %s", resp.StatusCode, b)
	}
}

func TestBodyLimit(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	cfg := cfgFor("round-robin", fb)
	cfg.Limits.MaxBodyBytes = 2048
	_, url := startGateway(t, cfg, Options{})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, strings.Repeat("x", 4096)), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || fb.hits.Load() != 0 {
		t.Fatalf("oversized body: status %d, backend hits %d", resp.StatusCode, fb.hits.Load())
	}
}

func TestKeysAndRateLimits(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	cfg := cfgFor("round-robin", fb)
	cfg.Backends[0].APIKeyEnv = "BACKEND_KEY"
	cfg.Keys = []ClientKey{{Name: "team", SHA256: HashKey("sk-client-secret"), RequestsPerMinute: 3}}
	var logBuf testutil.SyncBuffer
	_, url := startGateway(t, cfg, Options{
		Getenv: func(k string) string { return map[string]string{"BACKEND_KEY": "sk-backend"}[k] },
		Logger: slog.New(slog.NewJSONHandler(&logBuf, nil)),
	})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "secret prompt"), nil)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	resp = post(t, url, "/v1/chat/completions", chatBody("m", true, "secret prompt"), map[string]string{"Authorization": "Bearer wrong"})
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d", resp.StatusCode)
	}
	for i := range 3 {
		res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "secret prompt"), map[string]string{"Authorization": "Bearer sk-client-secret"}), false)
		if res.status != 200 {
			t.Fatalf("request %d within limit: %d", i, res.status)
		}
	}
	resp = post(t, url, "/v1/chat/completions", chatBody("m", true, "secret prompt"), map[string]string{"X-Api-Key": "sk-client-secret"})
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("4th request in a minute with limit 3: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for _, h := range fb.lastHeaders() {
		if h.Get("Authorization") != "Bearer sk-backend" || strings.Contains(fmt.Sprint(h), "sk-client") {
			t.Fatalf("backend saw %v: want only the gateway's key", h)
		}
	}
	log := logBuf.String()
	if strings.Contains(log, "secret prompt") || strings.Contains(log, "sk-client") || strings.Contains(log, "sk-backend") {
		t.Fatalf("access log leaks a prompt or key:\n%s", log)
	}
	if !strings.Contains(log, `"key":"team"`) || !strings.Contains(log, `"msg":"request"`) {
		t.Fatalf("access log lacks the key name or request lines:\n%s", log)
	}
}

func TestAdmissionRejectAndDegrade(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	fb.ttft = 50 * time.Millisecond
	cfg := cfgFor("slo-predictive", fb)
	cfg.Routes = []Route{{Model: "m", SLOMs: 1, Admission: AdmitReject}, {Model: "big", SLOMs: 1, Admission: AdmitDegrade, DegradeTo: "small"}}
	cfg.Backends[0].Models = []string{"m", "small", "big"}
	_, url := startGateway(t, cfg, Options{})
	// A cold backend is never rejected (no evidence yet): warm its
	// predictors with requests whose header SLO (10 s) overrides the route's.
	for range 4 {
		readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), map[string]string{"X-Ttft-Slo-Ms": "10000"}), false)
	}
	warm := fb.hits.Load()
	// Now the backend is known to take ≈50 ms: the route's 1 ms SLO cannot be met.
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || fb.hits.Load() != warm {
		t.Fatalf("reject: status %d Retry-After %q hits %d", resp.StatusCode, resp.Header.Get("Retry-After"), fb.hits.Load())
	}
	res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("big", true, "x"), nil), false)
	if res.status != 200 || !strings.Contains(res.raw, `"model":"small"`) {
		t.Fatalf("degrade: status %d, stream %q", res.status, res.raw)
	}
	// The route's admission loop is exported: it started backed off once
	// (0.9 of the SLO) and has moved neither way on five requests.
	m := scrape(t, url)
	for _, want := range []string{
		`ttft_gateway_admission_slo_share{model="m"} 0.9`,
		`ttft_gateway_admission_backoffs_total{model="m"} 0`,
		`ttft_gateway_admission_relaxes_total{model="m"} 0`,
		`ttft_gateway_admission_lateness_seconds{model="m"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMetricsAndTracePropagation(t *testing.T) {
	fb := newFakeBackend(t, "a", 4)
	cfg := cfgFor("slo-predictive", fb)
	cfg.Backends[0].MetricsURL = fb.URL() + "/metrics"
	cfg.Backends[0].Cost = Cost{InputPerMillion: 100_000, OutputPerMillion: 1_000_000} // 5 prompt + 4 output tokens: $4.50
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	g, url := startGateway(t, cfg, Options{TracerProvider: tp})
	parent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), map[string]string{"Traceparent": parent, "X-Slo-Class": "chat"}), false)
	if res.status != 200 {
		t.Fatal(res.status)
	}
	hs := fb.lastHeaders()
	tpHdr := hs[len(hs)-1].Get("Traceparent")
	if !strings.HasPrefix(tpHdr, "00-0af7651916cd43dd8448eb211c80319c-") || strings.Contains(tpHdr, "b7ad6b7169203331") {
		t.Fatalf("backend traceparent %q: want the client's trace id with the gateway's span id", tpHdr)
	}
	// The span ends when the handler returns, which may be just after the
	// client has read the end of the stream.
	// The attempt's CLIENT span (tracing.go) ends before the SERVER span.
	spans := rec.Ended()
	for end := time.Now().Add(2 * time.Second); len(spans) < 2 && time.Now().Before(end); spans = rec.Ended() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(spans) != 2 || spans[1].SpanKind() != trace.SpanKindServer || spans[0].SpanKind() != trace.SpanKindClient ||
		spans[0].Parent().SpanID() != spans[1].SpanContext().SpanID() || !strings.Contains(tpHdr, spans[0].SpanContext().SpanID().String()) {
		t.Fatalf("%d spans ended; want the attempt's CLIENT span, child of the SERVER span, whose id went to the backend", len(spans))
	}
	spans = spans[1:]
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, want := range map[string]string{"ttft.gateway.policy": "slo-predictive", "ttft.backend": "a", "gen_ai.request.model": "m", "ttft.gateway.slo_class": "chat"} {
		if attrs[k] != want {
			t.Errorf("span attribute %s = %q want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	// The engine gauges were scraped into the predictor's features.
	deadline := time.Now().Add(3 * time.Second)
	for {
		w, kv := g.Scheduler().Backends()[0].EngineMetrics()
		if w == 3 && kv == 0.25 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scraped engine metrics: waiting %v kv %v, want 3 and 0.25", w, kv)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(b)
		ok := true
		for _, want := range []string{
			`ttft_gateway_ttft_seconds_count{backend="a",slo_class="chat"} 1`,
			`ttft_gateway_decisions_total{backend="a",policy="slo-predictive"`,
			`ttft_gateway_in_flight{backend="a"} 0`,
			`ttft_gateway_breaker_state{backend="a"} 0`,
			`ttft_gateway_requests_total{backend="a",code="200",slo_class="chat"} 1`,
			`ttft_gateway_itl_seconds_count{backend="a"} 3`,
			`ttft_gateway_tokens_total{backend="a",direction="input"} 5`,
			`ttft_gateway_tokens_total{backend="a",direction="output"} 4`,
			`ttft_gateway_cost_dollars_total{backend="a"} 4.5`,
			`ttft_gateway_predictor_active{backend="a",predictor="linear-rls"}`,
		} {
			if !strings.Contains(m, want) {
				ok = false
				if time.Now().After(deadline) {
					t.Fatalf("metrics lack %s:\n%s", want, m)
				}
			}
		}
		if ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReloadKeepsStreamsAndState(t *testing.T) {
	a := newFakeBackend(t, "a", 10)
	a.gap = 30 * time.Millisecond
	b := newFakeBackend(t, "b", 3)
	cfg := cfgFor("round-robin", a)
	g, url := startGateway(t, cfg, Options{})
	before := g.Scheduler().Backends()[0]
	resCh := make(chan streamResult, 1)
	go func() {
		resCh <- readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false)
	}()
	time.Sleep(100 * time.Millisecond)
	// Reload: a unchanged, b added, policy unchanged.
	if err := g.Reload(cfgFor("round-robin", a, b)); err != nil {
		t.Fatal(err)
	}
	if g.Scheduler().Backends()[0] != before {
		t.Fatal("unchanged backend lost its state on reload")
	}
	// Reload again without a: the in-flight stream on a must still finish.
	if err := g.Reload(cfgFor("round-robin", b)); err != nil {
		t.Fatal(err)
	}
	res := <-resCh
	if res.text != expectedText(10) || !res.done {
		t.Fatalf("stream across reloads: %q done %v", res.text, res.done)
	}
	res2 := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false)
	if res2.backend != "b" {
		t.Fatalf("after reload went to %q", res2.backend)
	}
}

func TestHealthCheckMarksDeadBackendDown(t *testing.T) {
	a := newFakeBackend(t, "a", 3)
	b := newFakeBackend(t, "b", 3)
	g, _ := startGateway(t, cfgFor("round-robin", a, b), Options{})
	b.srv.Close()
	deadline := time.Now().Add(3 * time.Second)
	for g.Scheduler().Backends()[1].Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("closed backend still healthy after 3 s of 50 ms checks")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !g.Scheduler().Backends()[0].Healthy() {
		t.Fatal("live backend marked down")
	}
}

func TestWatchFileReloads(t *testing.T) {
	a := newFakeBackend(t, "a", 3)
	b := newFakeBackend(t, "b", 3)
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	write := func(url string) {
		if err := os.WriteFile(path, []byte("policy: round-robin\nbackends:\n  - name: x\n    url: "+url+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a.URL())
	cfg, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, url := startGateway(t, *cfg, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.WatchFile(ctx, path)
	time.Sleep(50 * time.Millisecond)
	write(b.URL())
	deadline := time.Now().Add(3 * time.Second)
	for b.hits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("config change not picked up")
		}
		readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false)
		time.Sleep(30 * time.Millisecond)
	}
}

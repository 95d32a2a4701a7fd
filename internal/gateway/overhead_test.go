package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/testutil"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// quickBackend answers every streamed chat request at once: a role event,
// eight token events and [DONE]. With no engine time in it, what a client
// measures through a proxy minus what it measures directly is the proxy's
// own added latency.
func quickBackend(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.WriteString("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for i := range 8 {
		fmt.Fprintf(&body, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
	}
	body.WriteString("data: [DONE]\n\n")
	payload := body.Bytes()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(payload)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

var benchBody = []byte(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"system","content":"You are a helpful assistant that answers briefly and precisely."},{"role":"user","content":"What is the capital of France?"}]}`)

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 4096, MaxIdleConnsPerHost: 2048, DisableCompression: true, IdleConnTimeout: time.Minute}}
}

// ttftOnce sends one streamed request and returns the time from sending to
// reading the first token event.
func ttftOnce(c *http.Client, url string) (time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(benchBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	var ttft time.Duration
	for {
		line, err := br.ReadSlice('\n')
		if ttft == 0 && bytes.Contains(line, []byte(`"content":"t`)) {
			ttft = time.Since(start)
		}
		if err != nil {
			if err == io.EOF && ttft > 0 {
				return ttft, nil
			}
			return 0, fmt.Errorf("stream: %v", err)
		}
	}
}

// benchOpenLoop sends requests at a constant rate for d with ttft bench's
// own client and returns the TTFTs and the number of failures. Its times
// come from the kernel (a request is sent when its first write(2) begins,
// a token arrives when the kernel received it), so neither the load
// generator's scheduling nor its wake-ups are in them: what remains is the
// target's. c is kept across rounds so connections stay warm.
func benchOpenLoop(ctx context.Context, t testing.TB, c *http.Client, url string, rate float64, d time.Duration, seed int64) ([]time.Duration, int) {
	t.Helper()
	n := int(rate * d.Seconds())
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 24, MaxTokens: 8, Chat: true, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: url, Request: wire.RequestOptions{Model: "m"},
		Rate: rate, Arrival: "constant", Requests: n, Client: c, RunID: "overhead"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]time.Duration, 0, len(res.Records))
	failed := 0
	for _, rec := range res.Records {
		if !rec.OK() {
			failed++
			continue
		}
		out = append(out, rec.FirstToken.Sub(rec.Sent))
	}
	return out, failed
}

// startNginx runs nginx as a plain streaming reverse proxy to backend, the
// baseline of the overhead comparison. It returns "" when nginx is absent
// (a skip locally, a failure under TTFT_REQUIRE_INTEGRATION=1).
func startNginx(t *testing.T, backend string) string {
	t.Helper()
	u, _ := startNginxPid(t, backend)
	return u
}

// startNginxPid is startNginx that also returns the worker's process id
// (the master only supervises; with one worker, that worker does the work).
func startNginxPid(t *testing.T, backend string) (string, int) {
	t.Helper()
	bin := os.Getenv("TTFT_NGINX")
	if bin == "" {
		for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
			if q, err := exec.LookPath(p); err == nil {
				bin = q
				break
			}
		}
	}
	if bin == "" {
		if testutil.Strict() {
			t.Fatal("nginx is required for the overhead baseline: run .ci/install-nginx.sh")
		}
		t.Log("nginx not found (.ci/install-nginx.sh installs it): comparing with direct only")
		return "", 0
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	user := ""
	if os.Getuid() == 0 {
		user = "user root;"
	}
	conf := fmt.Sprintf(`%s
daemon off;
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream backend { server %[3]s; keepalive 512; }
  server {
    listen %[4]s;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`, user, dir, strings.TrimPrefix(backend, "http://"), addr)
	cf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", cf, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting nginx: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx did not start: %s %s", stderr.String(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr, nginxWorker(cmd.Process.Pid)
}

// nginxWorker finds the worker child of an nginx master (0 if none).
func nginxWorker(master int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(master) {
			return pid
		}
	}
	return 0
}

func envFloat(k string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(k), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// TestOverhead measures the TTFT the gateway adds over a direct connection,
// side by side with nginx, open loop at TTFT_OVERHEAD_RATE req/s (default
// 2000) in rounds that alternate the targets, so that the noisy shared
// machine affects all three alike. Opt-in: TTFT_GATEWAY_OVERHEAD=1.
func TestOverhead(t *testing.T) {
	if os.Getenv("TTFT_GATEWAY_OVERHEAD") != "1" {
		t.Skip("set TTFT_GATEWAY_OVERHEAD=1 to run the overhead benchmark (docs/performance.md)")
	}
	rate := envFloat("TTFT_OVERHEAD_RATE", 2000)
	dur := time.Duration(envFloat("TTFT_OVERHEAD_SECONDS", 3) * float64(time.Second))
	rounds := int(envFloat("TTFT_OVERHEAD_ROUNDS", 3))
	backend := quickBackend(t)
	cfg := Config{Policy: envOr("TTFT_OVERHEAD_POLICY", "slo-predictive"), Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
	var gw string
	gwPid := 0
	var extra []struct {
		name, url string
		pid       int
	}
	if bin := os.Getenv("TTFT_BIN"); bin != "" {
		// The gateway in its own process, as deployed, so that it does not
		// share the Go scheduler with the load generator and the backend.
		gw, gwPid = startGatewayProcess(t, bin, backend, cfg.Policy, nil, os.Getenv("TTFT_OVERHEAD_CPUPROFILE"))
		// Optional variants measured in the same rounds: an earlier build
		// (before/after a change, side by side) and the same build under
		// extra environment (e.g. GOMAXPROCS=1).
		if before := os.Getenv("TTFT_BIN_BEFORE"); before != "" {
			u, pid := startGatewayProcess(t, before, backend, cfg.Policy, nil, "")
			extra = append(extra, struct {
				name, url string
				pid       int
			}{"gateway-before", u, pid})
		}
		if env := os.Getenv("TTFT_OVERHEAD_VARIANT_ENV"); env != "" {
			prof := os.Getenv("TTFT_OVERHEAD_CPUPROFILE")
			if prof != "" {
				prof += ".variant"
			}
			u, pid := startGatewayProcess(t, bin, backend, cfg.Policy, strings.Fields(env), prof)
			extra = append(extra, struct {
				name, url string
				pid       int
			}{"gateway " + env, u, pid})
		}
	} else {
		t.Log("TTFT_BIN not set: the gateway runs inside the test process, sharing its scheduler with the load generator")
		_, gw = startGateway(t, cfg, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	}
	targets := []struct{ name, url string }{{"direct", backend}, {"gateway", gw}}
	pids := map[string]int{"gateway": gwPid}
	for _, e := range extra {
		targets = append(targets, struct{ name, url string }{e.name, e.url})
		pids[e.name] = e.pid
	}
	if gwPid > 0 {
		// A bare net/http reverse proxy in its own process: how much of the
		// gateway's cost is Go's HTTP stack rather than routing.
		rp, pid := startReverseProxyProcess(t, backend)
		targets = append(targets, struct{ name, url string }{"go-reverseproxy", rp})
		pids["go-reverseproxy"] = pid
	}
	if ng, pid := startNginxPid(t, backend); ng != "" {
		targets = append(targets, struct{ name, url string }{"nginx", ng})
		pids["nginx"] = pid
	}
	// ttft bench's own client (kernel-stamped times), one per target so
	// each keeps its warm connections.
	clients := map[string]*http.Client{}
	for _, tg := range targets {
		clients[tg.name] = &http.Client{Transport: bench.NewTransport(256)}
		defer clients[tg.name].CloseIdleConnections()
	}
	// Warm connections and code paths.
	for _, tg := range targets {
		benchOpenLoop(context.Background(), t, clients[tg.name], tg.url, 500, 500*time.Millisecond, 0)
	}
	res := map[string][]time.Duration{}
	failed := map[string]int{}
	cpu := map[string]time.Duration{}
	for range rounds {
		for _, tg := range targets {
			c0 := procCPU(pids[tg.name])
			v, f := benchOpenLoop(context.Background(), t, clients[tg.name], tg.url, rate, dur, int64(len(res[tg.name])))
			cpu[tg.name] += procCPU(pids[tg.name]) - c0
			res[tg.name] = append(res[tg.name], v...)
			failed[tg.name] += f
		}
	}
	q := func(xs []time.Duration, p float64) time.Duration {
		slices.Sort(xs)
		return xs[max(int(p*float64(len(xs)))-1, 0)]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nopen loop %.0f req/s, %d rounds × %v per target, streaming, 8 token events\n", rate, rounds, dur)
	fmt.Fprintf(&b, "| target | requests | failed | TTFT P50 | TTFT P90 | TTFT P99 | added P50 | added P99 | proxy CPU per request |\n|---|---|---|---|---|---|---|---|---|\n")
	d50, d99 := q(res["direct"], 0.5), q(res["direct"], 0.99)
	for _, tg := range targets {
		xs := res[tg.name]
		if len(xs) == 0 {
			t.Fatalf("%s: no successful request", tg.name)
		}
		p50, p90, p99 := q(xs, 0.5), q(xs, 0.9), q(xs, 0.99)
		perReq := "n/a"
		if pids[tg.name] > 0 {
			perReq = (cpu[tg.name] / time.Duration(len(xs)+failed[tg.name])).Round(time.Microsecond).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %v | %v | %v | %v | %v | %s |\n", tg.name, len(xs), failed[tg.name], p50.Round(time.Microsecond), p90.Round(time.Microsecond), p99.Round(time.Microsecond),
			(p50 - d50).Round(time.Microsecond), (p99 - d99).Round(time.Microsecond), perReq)
		if failed[tg.name] > 0 {
			t.Errorf("%s: %d requests failed", tg.name, failed[tg.name])
		}
	}
	t.Log(b.String())
}

// procCPU is a process's user+system CPU time from /proc (0 when unknown).
// On a shared, overloaded machine the latency percentiles mostly measure
// waiting for a CPU; CPU time per request is the proxy's own cost.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// startGatewayProcess runs "ttft gateway" from a built binary, with extra
// environment variables and, when profile is set, a CPU profile written
// there on shutdown.
func startGatewayProcess(t *testing.T, bin, backend, policy string, env []string, profile string) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"gateway", "--backend", "b=" + backend, "--listen", addr, "--policy", policy}
	if profile != "" {
		args = append(args, "--cpu-profile", profile)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard // the access log: written, as in production, then dropped
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s gateway: %v", bin, err)
	}
	t.Cleanup(func() {
		// Interrupt first so that a CPU profile is written; kill if the
		// gateway does not stop within 10 s.
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return "http://" + addr, cmd.Process.Pid
		}
		if i > 100 {
			t.Fatalf("gateway process did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHelperReverseProxy is not a test: startReverseProxyProcess re-runs
// the test binary with it to serve a plain httputil.ReverseProxy.
func TestHelperReverseProxy(t *testing.T) {
	backend, addr := os.Getenv("TTFT_HELPER_RP_BACKEND"), os.Getenv("TTFT_HELPER_RP_ADDR")
	if backend == "" || addr == "" {
		t.Skip("helper process only")
	}
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // flush every write, as a streaming proxy must
	rp.Transport = &http.Transport{Proxy: nil, MaxIdleConns: 4096, MaxIdleConnsPerHost: 1024, DisableCompression: true}
	http.ListenAndServe(addr, rp)
}

func startReverseProxyProcess(t *testing.T, backend string) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperReverseProxy$")
	cmd.Env = append(os.Environ(), "TTFT_HELPER_RP_BACKEND="+backend, "TTFT_HELPER_RP_ADDR="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return "http://" + addr, cmd.Process.Pid
		}
		if i > 100 {
			t.Fatalf("reverse proxy helper did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// BenchmarkStreamRoundTrip is one streamed request at a time, direct and
// through the gateway: the difference per op is the gateway's cost on an
// otherwise idle path.
func BenchmarkStreamRoundTrip(b *testing.B) {
	backend := quickBackend(b)
	cfg := Config{Policy: "slo-predictive", Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
	cfg.Health.Disabled = true
	_, gw := startGateway(b, cfg, Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	c := benchClient()
	for _, tg := range []struct{ name, url string }{{"direct", backend}, {"gateway", gw}} {
		b.Run(tg.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ttftOnce(c, tg.url); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

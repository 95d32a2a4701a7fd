package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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
	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"

	"go.opentelemetry.io/otel/trace"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startSim starts one simulated vLLM replica on a loopback port.
func startSim(t *testing.T, ctx context.Context) *serve.Server {
	t.Helper()
	cfg := serve.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	s, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("starting the simulator: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startGateway routes to the given backends, serving on a loopback port.
func startGateway(t *testing.T, ctx context.Context, tp trace.TracerProvider, backends ...string) string {
	t.Helper()
	cfg, err := gateway.FromBackendURLs(backends)
	if err != nil {
		t.Fatalf("gateway config: %v", err)
	}
	return startGatewayWith(t, ctx, cfg, gateway.Options{TracerProvider: tp, Seed: 1})
}

// startGatewayWith serves a gateway of cfg and opts on a loopback port.
func startGatewayWith(t *testing.T, ctx context.Context, cfg *gateway.Config, opts gateway.Options) string {
	t.Helper()
	g, err := gateway.New(*cfg, opts)
	if err != nil {
		t.Fatalf("starting the gateway: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(sctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		g.Close()
	})
	return "http://" + ln.Addr().String()
}

// runBench sends n chat requests at concurrency c through the real runner.
func runBench(t *testing.T, ctx context.Context, target, model string, n, c int, client *http.Client, obs ...bench.Observer) []record.Record {
	t.Helper()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 200, MaxTokens: 12, MinTokens: 12, Chat: true, Seed: 1, Requests: n})
	if err != nil {
		t.Fatal(err)
	}
	r, err := bench.New(bench.Options{
		API: wire.OpenAIChat, BaseURL: target, Request: wire.RequestOptions{Model: model},
		Concurrency: c, Requests: n, Timeout: 30 * time.Second, Target: target,
		Observers: obs, Client: client, RunID: "it",
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	res, err := r.Run(rctx, src)
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	var ok []record.Record
	for _, rec := range res.Records {
		if rec.OK() && !rec.Warmup {
			ok = append(ok, rec)
		} else if !rec.OK() {
			t.Errorf("request %d failed: %s %s", rec.Index, rec.ErrorClass, rec.Error)
		}
	}
	if len(ok) != n {
		t.Fatalf("%d of %d requests succeeded", len(ok), n)
	}
	return ok
}

// quantileTTFT is the nearest-rank q-quantile of the records' TTFT in seconds.
func quantileTTFT(recs []record.Record, q float64) float64 {
	xs := make([]float64, len(recs))
	for i, r := range recs {
		xs[i] = r.TTFTMs / 1e3
	}
	slices.Sort(xs)
	k := int(q*float64(len(xs))+0.999999) - 1
	return xs[max(0, min(k, len(xs)-1))]
}

// process runs a binary until the test ends, keeping its output for failures.
type process struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func startProcess(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), out: &bytes.Buffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	p.done = exited
	go func() { p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", filepath.Base(bin), tail(p.out.String(), 3000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startRetrying launches a server on freshly picked ports until it comes up:
// ports are picked by binding :0 and closing, so another process can take
// one before the server binds it ("address already in use"). launch starts
// one attempt and returns the process and the URL that answers 200 when
// ready.
func startRetrying(t *testing.T, d time.Duration, launch func() (*process, string)) *process {
	t.Helper()
	var p *process
	var url string
	for attempt := 1; attempt <= 3; attempt++ {
		p, url = launch()
		if ready(url, d, p) {
			return p
		}
		if p.cmd.ProcessState == nil || !strings.Contains(p.out.String(), "address already in use") {
			break
		}
		t.Logf("attempt %d: a port was taken before the server bound it; retrying with new ports", attempt)
	}
	t.Fatalf("%s not ready after %s\n%s", url, d, tail(p.out.String(), 3000))
	return nil
}

// ready polls url until it answers 200 (true), the process exits or d
// passes (false).
func ready(url string, d time.Duration, p *process) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		if p != nil && p.exited() {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// promResult is the data part of a Prometheus /api/v1/query answer.
type promResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} `json:"result"`
}

// promQuery runs an instant query; a parse or execution error is returned
// with Prometheus's own message.
func promQuery(base, q string) (*promResult, error) {
	resp, err := http.PostForm(base+"/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("decoding %q: %w", tail(string(body), 300), err)
	}
	if env.Status != "success" {
		return nil, fmt.Errorf("%s", env.Error)
	}
	var r promResult
	if err := json.Unmarshal(env.Data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// scalar is the single sample's value of a vector result.
func (r *promResult) scalar() (float64, bool) {
	if r == nil || len(r.Result) != 1 {
		return 0, false
	}
	s, _ := r.Result[0].Value[1].(string)
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

func decodeJSON(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

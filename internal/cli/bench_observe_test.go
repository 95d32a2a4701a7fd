package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
)

// vllmLike serves a vLLM-style /metrics whose TTFT count grows by one per
// scrape, on a real loopback port.
func vllmLike(t *testing.T) string {
	t.Helper()
	var n atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		k := n.Add(1)
		fmt.Fprintf(w, "# TYPE vllm:time_to_first_token_seconds histogram\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} %d\nvllm:time_to_first_token_seconds_sum %g\nvllm:time_to_first_token_seconds_count %d\n", k, 0.1*float64(k), k)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

func TestObserveStartStop(t *testing.T) {
	target := vllmLike(t)
	var o observeOptions
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	addObserveFlags(fs, &o)
	if err := fs.Parse([]string{"--metrics-addr", "127.0.0.1:0", "--scrape-metrics", "--scrape-interval", "0"}); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	env := &Env{Stderr: &stderr, Getenv: func(string) string { return "" }}
	ctx := context.Background()
	obs, stop, err := o.start(ctx, env, target)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs) != 2 {
		t.Fatalf("%d observers, want metrics and scraper (tracing is off without OTEL_*)", len(obs))
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(strings.Fields(stderr.String())[len(strings.Fields(stderr.String()))-1], "http://"), "/metrics")
	sent := time.Now()
	rec := &record.Record{Model: "m", Sent: sent, FirstToken: sent.Add(150 * time.Millisecond), End: sent.Add(time.Second)}
	rec.Finalize()
	for _, ob := range obs {
		ob.Done(ob.Start(ctx, nil, rec), rec)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("live metrics endpoint at %q: %v (stderr %q)", addr, err, stderr.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ttft_bench_time_to_first_token_seconds_count") {
		t.Fatalf("live metrics lack the TTFT histogram:\n%s", body)
	}
	lines := strings.Join(stop(ctx), "\n")
	if !strings.Contains(lines, "vllm names") || !strings.Contains(lines, "mean TTFT 150.0 ms (client)") {
		t.Fatalf("stop lines:\n%s", lines)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("metrics endpoint still up after stop")
	}
}

func TestObserveUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad otel protocol", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf"},
		{"bad metrics addr", []string{"--metrics-addr", "256.0.0.1:x"}, nil, "--metrics-addr"},
		{"unreachable scrape", []string{"--scrape-metrics=http://127.0.0.1:1/metrics"}, nil, "--scrape-metrics"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o observeOptions
			fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
			addObserveFlags(fs, &o)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			env := &Env{Stderr: io.Discard, Getenv: func(k string) string { return c.env[k] }}
			_, _, err := o.start(context.Background(), env, "http://127.0.0.1:1")
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a usage error mentioning %q", err, c.want)
			}
		})
	}
}

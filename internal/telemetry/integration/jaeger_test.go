package integration

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// jaegerConfig is a minimal Jaeger v2 (OpenTelemetry Collector) config: an
// OTLP/HTTP receiver, in-memory storage and the query API, every port moved
// to the test's free loopback ports and internal telemetry off.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: %q
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %q
    grpc:
      endpoint: %q
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: %q
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	Logs []struct {
		Timestamp int64 `json:"timestamp"`
		Fields    []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jaegerTrace struct {
	TraceID   string       `json:"traceID"`
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

func (s *jaegerSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

func (s *jaegerSpan) hasEvent(name string) bool {
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" && f.Value == name {
				return true
			}
		}
	}
	return false
}

func jaegerTraces(t *testing.T, query, service string) []jaegerTrace {
	t.Helper()
	resp, err := http.Get(query + "/api/traces?" + url.Values{"service": {service}, "limit": {"200"}, "lookback": {"1h"}}.Encode())
	if err != nil {
		t.Fatalf("querying Jaeger: %v", err)
	}
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := decodeJSON(resp, &out); err != nil {
		t.Fatalf("decoding Jaeger's answer: %v", err)
	}
	return out.Data
}

// TestTracesReachJaeger: bench (TraceObserver + propagating transport) and
// the gateway (SetupTracing with the DynamicSampler at base ratio 0 and the
// tail-keep processor) export over OTLP to a real Jaeger v2; the traces read
// back through Jaeger's query API carry GenAI names and attributes, the
// first-token event, and the bench → gateway parent/child link. Requests
// without a sampled parent are dropped by the gateway's head sampler unless
// they fail, in which case the tail processor keeps them.
func TestTracesReachJaeger(t *testing.T) {
	jaegerBin := testutil.Binary(t, "TTFT_JAEGER", "jaeger", "bash .ci/install-jaeger.sh (builds Jaeger v2 from the Go module proxy into $HOME/go/bin)")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var otlp, query string
	dir := t.TempDir()
	startRetrying(t, 90*time.Second, func() (*process, string) {
		var queryHTTP, queryGRPC, health string
		otlp, queryHTTP, queryGRPC, health = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
		cfg := filepath.Join(dir, "jaeger.yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, health, queryHTTP, queryGRPC, otlp), 0o644); err != nil {
			t.Fatal(err)
		}
		query = "http://" + queryHTTP
		// OTEL_SDK_DISABLED keeps Jaeger from tracing itself to the default
		// localhost:4317, which is not ours.
		return startProcess(t, jaegerBin, []string{"OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none"}, "--config", cfg), query + "/api/services"
	})

	env := func(service string) func(string) string {
		return func(k string) string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + otlp, "OTEL_SERVICE_NAME": service}[k]
		}
	}
	benchTP, benchStop, err := telemetry.SetupTracing(ctx, env("ttft-bench-it"), "ttft-bench")
	if err != nil {
		t.Fatal(err)
	}
	sampler := telemetry.NewDynamicSampler(0, 1200*time.Millisecond, 0.005)
	gwTP, gwStop, err := telemetry.SetupTracing(ctx, env("ttft-gateway-it"), "ttft-gateway",
		telemetry.WithSampler(sampler), telemetry.WithTailKeep(telemetry.TailOptions{}))
	if err != nil {
		t.Fatal(err)
	}

	s := startSim(t, ctx)
	gw := startGateway(t, ctx, gwTP, "sim="+s.URL())
	model := s.ModelName()

	// Traced: bench's spans, with traceparent injected by the transport.
	client := &http.Client{Transport: telemetry.Transport(bench.NewTransport(4))}
	recs := runBench(t, ctx, gw, model, 10, 2, client, telemetry.NewTraceObserver(benchTP, "", "", gw, 0))

	// Untraced, healthy: dropped by the gateway's base ratio of 0.
	// Untraced, failing (unknown model): kept by the tail processor.
	post := func(base, model string) int {
		body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, model)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sink bytes.Buffer
		sink.ReadFrom(resp.Body)
		return resp.StatusCode
	}
	for range 3 {
		if code := post(gw, model); code != http.StatusOK {
			t.Fatalf("plain request through the gateway: HTTP %d", code)
		}
	}
	// A second gateway instance (same tracer provider, same service) whose
	// only backend is a closed port: the request fails in the gateway itself.
	deadGW := startGateway(t, ctx, gwTP, "dead=http://"+freeAddr(t))
	if code := post(deadGW, "dead-model"); code < 500 {
		t.Fatalf("request to a dead backend answered %d, want a 5xx", code)
	}

	for _, stop := range []func(context.Context) error{benchStop, gwStop} {
		if err := stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Jaeger indexes asynchronously: poll, bounded.
	var benchTraces, gwTraces []jaegerTrace
	for range 60 {
		benchTraces, gwTraces = jaegerTraces(t, query, "ttft-bench-it"), jaegerTraces(t, query, "ttft-gateway-it")
		if len(benchTraces) >= len(recs) && len(gwTraces) >= len(recs)+1 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(benchTraces) != len(recs) {
		t.Fatalf("Jaeger has %d bench traces, want %d", len(benchTraces), len(recs))
	}

	t.Logf("Jaeger holds %d bench traces and %d gateway traces", len(benchTraces), len(gwTraces))
	wantName := "chat " + model
	for _, tr := range benchTraces {
		var benchSpan, gwSpan *jaegerSpan
		for i := range tr.Spans {
			sp := &tr.Spans[i]
			switch tr.Processes[sp.ProcessID].ServiceName {
			case "ttft-bench-it":
				benchSpan = sp
			case "ttft-gateway-it":
				gwSpan = sp
			}
		}
		if benchSpan == nil || gwSpan == nil {
			t.Errorf("trace %s: bench span %v, gateway span %v; want both", tr.TraceID, benchSpan != nil, gwSpan != nil)
			continue
		}
		if benchSpan.OperationName != wantName || gwSpan.OperationName != wantName {
			t.Errorf("trace %s: span names %q / %q, want %q", tr.TraceID, benchSpan.OperationName, gwSpan.OperationName, wantName)
		}
		for k, want := range map[string]any{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": model,
			"gen_ai.response.model": model, "span.kind": "client", "gen_ai.usage.output_tokens": float64(12),
		} {
			if got := benchSpan.tag(k); got != want {
				t.Errorf("trace %s: bench span %s = %v (%T), want %v", tr.TraceID, k, got, got, want)
			}
		}
		if f, _ := benchSpan.tag("gen_ai.response.time_to_first_chunk").(float64); f <= 0 {
			t.Errorf("trace %s: time_to_first_chunk %v", tr.TraceID, benchSpan.tag("gen_ai.response.time_to_first_chunk"))
		}
		if !benchSpan.hasEvent(genaiattr.EventFirstToken) {
			t.Errorf("trace %s: bench span lacks the %s event", tr.TraceID, genaiattr.EventFirstToken)
		}
		if tr.TraceID == benchTraces[0].TraceID {
			t.Logf("trace %s: bench span %q (%d tags, %d events) → gateway span %q, child of %s",
				tr.TraceID, benchSpan.OperationName, len(benchSpan.Tags), len(benchSpan.Logs), gwSpan.OperationName, benchSpan.SpanID)
		}
		if gwSpan.tag("span.kind") != "server" {
			t.Errorf("trace %s: gateway span kind %v", tr.TraceID, gwSpan.tag("span.kind"))
		}
		linked := false
		for _, r := range gwSpan.References {
			linked = linked || (r.RefType == "CHILD_OF" && r.SpanID == benchSpan.SpanID && r.TraceID == benchSpan.TraceID)
		}
		if !linked {
			t.Errorf("trace %s: gateway span is not a child of bench's span %s: %+v", tr.TraceID, benchSpan.SpanID, gwSpan.References)
		}
	}

	// Gateway-only traces: exactly the failed request, kept by the tail rule.
	var alone []jaegerSpan
	for _, tr := range gwTraces {
		if len(tr.Spans) == 1 {
			alone = append(alone, tr.Spans[0])
		}
	}
	if len(alone) != 1 {
		names := []string{}
		for _, sp := range alone {
			names = append(names, sp.OperationName+" error="+strconv.Quote(fmt.Sprint(sp.tag("error"))))
		}
		t.Fatalf("%d gateway-only traces %v, want just the failed request's (healthy unsampled ones must be dropped)", len(alone), names)
	}
	if alone[0].tag("error") != true || alone[0].OperationName != "chat dead-model" {
		t.Errorf("kept gateway-only span %q error=%v, want the failed request's", alone[0].OperationName, alone[0].tag("error"))
	}
}

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
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
    metrics:
      receivers: [otlp]
      exporters: [prometheus]
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
  prometheus:
    endpoint: %q
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

	var otlp, query, promExp string
	dir := t.TempDir()
	startRetrying(t, 90*time.Second, func() (*process, string) {
		var queryHTTP, queryGRPC, health string
		otlp, queryHTTP, queryGRPC, health, promExp = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
		cfg := filepath.Join(dir, "jaeger.yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, health, queryHTTP, queryGRPC, otlp, promExp), 0o644); err != nil {
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
	probeTP, probeStop, err := telemetry.SetupTracing(ctx, env("ttft-probe-it"), "ttft-probe")
	if err != nil {
		t.Fatal(err)
	}
	// GenAI metrics over OTLP on the same endpoint variable: bench's
	// client metrics and the gateway's server metrics.
	benchMetrics, benchMetricsStop, _, err := telemetry.StartClientMetrics(ctx, env("ttft-bench-it"), "ttft-bench", "")
	if err != nil || benchMetrics == nil {
		t.Fatalf("client metrics not set up (%v) from OTEL_EXPORTER_OTLP_ENDPOINT", err)
	}
	gwMP, gwMetricsStop, err := telemetry.SetupMetrics(ctx, env("ttft-gateway-it"), "ttft-gateway")
	if err != nil {
		t.Fatal(err)
	}

	s := startSim(t, ctx)
	gwCfg, err := gateway.FromBackendURLs([]string{"sim=" + s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	gw := startGatewayWith(t, ctx, gwCfg, gateway.Options{TracerProvider: gwTP, MeterProvider: gwMP, Seed: 1})
	model := s.ModelName()
	simPort := urlPort(t, s.URL())

	// Traced: bench's spans, with traceparent injected by the transport.
	client := &http.Client{Transport: telemetry.Transport(bench.NewTransport(4))}
	recs := runBench(t, ctx, gw, model, 10, 2, client, telemetry.NewTraceObserver(benchTP, "", "", gw, 0), benchMetrics)

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

	// Retries: a gateway over a backend that answers every completion 503
	// and a healthy one, in turn (round-robin), so that some requests are
	// retried. Each is sent in a sampled trace of its own, and the
	// gateway's X-Ttft-Attempts answer says how many backends it tried.
	failCfg := serve.DefaultConfig()
	failCfg.Addr = "127.0.0.1:0"
	failCfg.Faults = serve.FaultConfig{ErrorRate: 1, ErrorStatus: 503}
	failing, err := serve.Start(ctx, failCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer failing.Close()
	good := startSim(t, ctx)
	retryCfg, err := gateway.FromBackendURLs([]string{"failing=" + failing.URL(), "good=" + good.URL()})
	if err != nil {
		t.Fatal(err)
	}
	retryCfg.Policy, retryCfg.Retry.Budget = sched.RoundRobin, 1
	retryGW := startGatewayWith(t, ctx, retryCfg, gateway.Options{TracerProvider: gwTP, Seed: 1})
	attemptsOf := map[string]int{} // trace ID → the gateway's attempts
	for i := range 4 {
		pctx, span := probeTP.Tracer("it").Start(ctx, "probe")
		body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":4,"messages":[{"role":"user","content":"retry %d"}]}`, good.ModelName(), i)
		req, _ := http.NewRequestWithContext(pctx, http.MethodPost, retryGW+"/v1/chat/completions", bytes.NewBufferString(body))
		telemetry.InjectHeaders(pctx, req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sink bytes.Buffer
		sink.ReadFrom(resp.Body)
		resp.Body.Close()
		span.End()
		n, _ := strconv.Atoi(resp.Header.Get(gateway.HeaderAttempts))
		if resp.StatusCode != http.StatusOK || n < 1 {
			t.Fatalf("retry probe %d: HTTP %d after %q attempts, want 200", i, resp.StatusCode, resp.Header.Get(gateway.HeaderAttempts))
		}
		attemptsOf[span.SpanContext().TraceID().String()] = n
	}

	for _, stop := range []func(context.Context) error{benchStop, gwStop, probeStop, benchMetricsStop, gwMetricsStop} {
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
		var gwClients []*jaegerSpan
		for i := range tr.Spans {
			sp := &tr.Spans[i]
			switch tr.Processes[sp.ProcessID].ServiceName {
			case "ttft-bench-it":
				benchSpan = sp
			case "ttft-gateway-it":
				if sp.tag("span.kind") == "client" {
					gwClients = append(gwClients, sp)
				} else {
					gwSpan = sp
				}
			}
		}
		if benchSpan == nil || gwSpan == nil {
			t.Errorf("trace %s: bench span %v, gateway span %v; want both", tr.TraceID, benchSpan != nil, gwSpan != nil)
			continue
		}
		// The GenAI values are the server's: its completion id and model,
		// the temperature sent, ttft's own id apart.
		if id, _ := benchSpan.tag("gen_ai.response.id").(string); !strings.HasPrefix(id, "chatcmpl-") {
			t.Errorf("trace %s: gen_ai.response.id %q, want the simulator's chatcmpl-… id", tr.TraceID, id)
		}
		if id, _ := benchSpan.tag("ttft.request.id").(string); !strings.HasPrefix(id, "it-") {
			t.Errorf("trace %s: ttft.request.id %q, want the run's record id", tr.TraceID, id)
		}
		if temp, ok := benchSpan.tag("gen_ai.request.temperature").(float64); !ok || temp != 0 {
			t.Errorf("trace %s: gen_ai.request.temperature %v, want 0 (sent)", tr.TraceID, benchSpan.tag("gen_ai.request.temperature"))
		}
		// The gateway: a SERVER span with the HTTP server attributes and
		// one CLIENT child for its one attempt, naming the backend.
		for k, want := range map[string]any{"http.request.method": "POST", "url.path": "/v1/chat/completions",
			"http.response.status_code": float64(200), "server.address": "127.0.0.1", "url.scheme": "http"} {
			if got := gwSpan.tag(k); got != want {
				t.Errorf("trace %s: gateway SERVER span %s = %v, want %v", tr.TraceID, k, got, want)
			}
		}
		if len(gwClients) != 1 {
			t.Errorf("trace %s: %d gateway CLIENT spans, want 1 (one attempt)", tr.TraceID, len(gwClients))
		} else {
			c := gwClients[0]
			if !childOf(c, gwSpan) || c.tag("server.port") != float64(simPort) || c.tag("server.address") != "127.0.0.1" ||
				c.tag("http.response.status_code") != float64(200) || c.tag("gen_ai.usage.output_tokens") != float64(12) {
				t.Errorf("trace %s: gateway CLIENT span: child of SERVER %v, server %v:%v (want port %d), status %v, output tokens %v",
					tr.TraceID, childOf(c, gwSpan), c.tag("server.address"), c.tag("server.port"), simPort, c.tag("http.response.status_code"), c.tag("gen_ai.usage.output_tokens"))
			}
			if in, _ := c.tag("gen_ai.usage.input_tokens").(float64); in <= 0 {
				t.Errorf("trace %s: gateway CLIENT span input tokens %v", tr.TraceID, c.tag("gen_ai.usage.input_tokens"))
			}
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

	// Gateway-only traces: exactly the failed request, kept by the tail rule
	// (its SERVER span; its one CLIENT span, the refused connection, with it).
	var alone []jaegerSpan
	for _, tr := range gwTraces {
		if _, probe := attemptsOf[tr.TraceID]; probe {
			continue
		}
		var server, clients []jaegerSpan
		foreign := false
		for _, sp := range tr.Spans {
			switch {
			case tr.Processes[sp.ProcessID].ServiceName != "ttft-gateway-it":
				foreign = true
			case sp.tag("span.kind") == "client":
				clients = append(clients, sp)
			default:
				server = append(server, sp)
			}
		}
		if foreign {
			continue
		}
		alone = append(alone, server...)
		if len(server) == 1 && (len(clients) != 1 || clients[0].tag("error") != true || clients[0].tag("error.type") != "connect") {
			t.Errorf("failed request's trace: %d CLIENT spans (error %v, error.type %v), want one failed to connect",
				len(clients), len(clients) > 0 && clients[0].tag("error") == true, firstTag(clients, "error.type"))
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
	if et := alone[0].tag("error.type"); et != "502" && et != "503" && et != "504" {
		t.Errorf("failed request's SERVER span error.type %v, want its 5xx status code", et)
	}

	checkRetryTraces(t, query, attemptsOf, urlPort(t, failing.URL()), urlPort(t, good.URL()))
	checkGenAIMetrics(t, "http://"+promExp+"/metrics", len(recs), 12)
}

// checkRetryTraces: each probe's trace holds the gateway's SERVER span and
// one CLIENT child per attempt the gateway reported; a retried request's
// first attempt is the failing backend's 503 and its last the healthy
// backend's 200. At least one probe must have been retried.
func checkRetryTraces(t *testing.T, query string, attemptsOf map[string]int, failPort, goodPort int) {
	t.Helper()
	traces := map[string]jaegerTrace{}
	for range 60 {
		for _, tr := range jaegerTraces(t, query, "ttft-probe-it") {
			traces[tr.TraceID] = tr
		}
		if len(traces) >= len(attemptsOf) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	retried := 0
	for id, attempts := range attemptsOf {
		tr, ok := traces[id]
		if !ok {
			t.Errorf("probe trace %s not in Jaeger", id)
			continue
		}
		var server *jaegerSpan
		var clients []*jaegerSpan
		for i := range tr.Spans {
			sp := &tr.Spans[i]
			if tr.Processes[sp.ProcessID].ServiceName != "ttft-gateway-it" {
				continue
			}
			if sp.tag("span.kind") == "server" {
				server = sp
			} else if sp.tag("span.kind") == "client" {
				clients = append(clients, sp)
			}
		}
		if server == nil || len(clients) != attempts {
			t.Errorf("probe trace %s: SERVER span %v, %d CLIENT spans; want one and %d (the gateway's attempts)", id, server != nil, len(clients), attempts)
			continue
		}
		slices.SortFunc(clients, func(a, b *jaegerSpan) int {
			return int(a.tag("ttft.attempt").(float64) - b.tag("ttft.attempt").(float64))
		})
		for i, c := range clients {
			last := i == len(clients)-1
			wantPort, wantStatus := failPort, float64(503)
			if last {
				wantPort, wantStatus = goodPort, 200
			}
			if !childOf(c, server) || c.tag("server.port") != float64(wantPort) || c.tag("http.response.status_code") != wantStatus {
				t.Errorf("probe trace %s attempt %d/%d: child of SERVER %v, port %v (want %d), status %v (want %v)",
					id, i+1, attempts, childOf(c, server), c.tag("server.port"), wantPort, c.tag("http.response.status_code"), wantStatus)
			}
			if !last && (c.tag("error.type") != "503" || c.tag("error") != true) {
				t.Errorf("probe trace %s attempt %d: error.type %v error %v, want 503 and an error status", id, i+1, c.tag("error.type"), c.tag("error"))
			}
		}
		if attempts > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no probe was retried (attempts %v): the test did not exercise retries", attemptsOf)
	}
	t.Logf("%d of %d probes retried; each trace shows one CLIENT span per attempt", retried, len(attemptsOf))
}

func childOf(child, parent *jaegerSpan) bool {
	for _, r := range child.References {
		if r.RefType == "CHILD_OF" && r.SpanID == parent.SpanID && r.TraceID == parent.TraceID {
			return true
		}
	}
	return false
}

func firstTag(spans []jaegerSpan, k string) any {
	if len(spans) == 0 {
		return nil
	}
	return spans[0].tag(k)
}

func urlPort(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("no port in %q", raw)
	}
	return p
}

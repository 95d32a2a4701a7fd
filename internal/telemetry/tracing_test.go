package telemetry

import (
	"context"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ttft-dev/ttft/internal/record"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestTracingConfigFromEnv(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		enabled  bool
		endpoint string
		service  string
		errHas   string
	}{
		{name: "off by default", env: nil, service: "ttft-bench"},
		{name: "base endpoint gets /v1/traces", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"},
			enabled: true, endpoint: "http://127.0.0.1:4318/v1/traces", service: "ttft-bench"},
		{name: "traces endpoint used as is", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/custom", "OTEL_SERVICE_NAME": "svc"},
			enabled: true, endpoint: "http://127.0.0.1:4318/custom", service: "svc"},
		{name: "service from resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=from%20res,team=a"},
			service: "from res"},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, service: "ttft-bench"},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, service: "ttft-bench"},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, errHas: "http/protobuf"},
		{name: "bad sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, errHas: "OTEL_TRACES_SAMPLER"},
		{name: "bad ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER_ARG": "2"}, errHas: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "bad url", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, errHas: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "bad headers", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, errHas: "OTEL_EXPORTER_OTLP_HEADERS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := TracingConfigFromEnv(envOf(c.env), "ttft-bench")
			if c.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Enabled != c.enabled || cfg.Endpoint != c.endpoint || cfg.ServiceName != c.service {
				t.Errorf("got enabled=%v endpoint=%q service=%q", cfg.Enabled, cfg.Endpoint, cfg.ServiceName)
			}
		})
	}
}

// otlpReceiver is a real OTLP/HTTP trace receiver on a loopback port that
// decodes what the exporter sends.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
	headers []http.Header
	url     string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		for _, rs := range msg.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.service = append(r.service, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

func TestSetupTracingExportsOverOTLP(t *testing.T) {
	rcv := startOTLPReceiver(t)
	ctx := context.Background()
	tp, shutdown, err := SetupTracing(ctx, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url,
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-tenant=t%201",
		"OTEL_SERVICE_NAME":           "ttft-test",
	}), "ttft-bench")
	if err != nil {
		t.Fatal(err)
	}
	o := NewTraceObserver(tp, "openai-chat", "m", "http://127.0.0.1:9", 0)
	now := time.Now()
	for i := range 3 {
		rec := &record.Record{Model: "m", Sent: now, FirstToken: now.Add(time.Duration(i+1) * 10 * time.Millisecond), End: now.Add(time.Second), OutputEvents: 3}
		o.Done(o.Start(ctx, nil, rec), rec)
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 3 {
		t.Fatalf("receiver got %d spans, want 3", len(rcv.spans))
	}
	for _, s := range rcv.spans {
		if s.Name != "chat m" || s.Kind != tracepb.Span_SPAN_KIND_CLIENT || len(s.Events) != 1 {
			t.Errorf("span %q kind %v events %d", s.Name, s.Kind, len(s.Events))
		}
	}
	if len(rcv.service) == 0 || rcv.service[0] != "ttft-test" {
		t.Errorf("service.name %v, want ttft-test", rcv.service)
	}
	if got := rcv.headers[0].Get("X-Tenant"); got != "t 1" {
		t.Errorf("OTLP header x-tenant = %q, want %q", got, "t 1")
	}
}

func TestSetupTracingOffIsNoop(t *testing.T) {
	tp, shutdown, err := SetupTracing(context.Background(), envOf(nil), "ttft-bench")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("tracing is on without any OTEL_EXPORTER_OTLP_* variable")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestPropagationOverLoopback(t *testing.T) {
	tp, _ := newRecorder()
	ctx, span := tp.Tracer("x").Start(context.Background(), "client")
	defer span.End()

	got := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := ExtractHeaders(r.Context(), r.Header)
		sc := traceSpanContext(rctx)
		got <- r.Header.Get("Traceparent") + "|" + sc
	})}
	go srv.Serve(ln)
	defer srv.Close()

	client := &http.Client{Transport: Transport(nil), Timeout: 5 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(req.Header) != 0 {
		t.Error("Transport modified the caller's request headers")
	}
	v := <-got
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01|" + sc.TraceID().String() + "/" + sc.SpanID().String()
	if v != want {
		t.Errorf("server saw %q, want %q", v, want)
	}

	// No span in the context: nothing is injected.
	h := http.Header{}
	InjectHeaders(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("InjectHeaders without a span wrote %v", h)
	}
}

// TestSetupDynamicTracingTailKeep: at base ratio 0 only the failed and the
// slow request's traces reach a real OTLP receiver.
func TestSetupDynamicTracingTailKeep(t *testing.T) {
	rcv := startOTLPReceiver(t)
	ctx := context.Background()
	tp, ds, shutdown, err := SetupDynamicTracing(ctx, envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.url}),
		"ttft-gateway", 0, 1200*time.Millisecond, 0.005, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	o := NewTraceObserver(tp, "openai-chat", "m", "http://127.0.0.1:9", 0)
	now := time.Now()
	recs := []*record.Record{
		{Index: 1, Sent: now, FirstToken: now.Add(50 * time.Millisecond), End: now.Add(time.Second)},
		{Index: 2, Sent: now, FirstToken: now.Add(500 * time.Millisecond), End: now.Add(time.Second)},
		{Index: 3, Sent: now, End: now.Add(time.Second), ErrorClass: record.ErrStreamCut},
	}
	for _, r := range recs {
		o.Done(o.Start(ctx, nil, r), r)
		ds.Observe(r.FirstToken.Sub(r.Sent), !r.OK())
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 2 {
		t.Fatalf("exported %d spans, want the slow and the failed request's 2", len(rcv.spans))
	}
	for _, s := range rcv.spans {
		ttfc := -1.0
		for _, a := range s.Attributes {
			if a.Key == string(genaiattr.AttrTimeToFirstChunk) {
				ttfc = a.GetValue().GetDoubleValue()
			}
		}
		if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR && ttfc < 0.3 {
			t.Errorf("exported a healthy span (ttfc %v, status %v)", ttfc, s.Status)
		}
	}
}

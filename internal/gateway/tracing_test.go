package gateway

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/telemetry"
)

// A request retried on a second backend shows one CLIENT span per attempt,
// both children of the request's SERVER span: the first with the failing
// backend's 500 as error.type, the second with the answering backend's
// status and usage. The GenAI server metrics count the request once.
func TestAttemptSpansAndServerMetrics(t *testing.T) {
	bad, good := newFakeBackend(t, "bad", 5), newFakeBackend(t, "good", 5)
	bad.setFault("500")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rd := sdkmetric.NewManualReader()
	cfg := cfgFor("round-robin", bad, good)
	cfg.Retry.Budget = 1
	_, url := startGateway(t, cfg, Options{TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))})

	retried := false
	for i := range 4 {
		resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), map[string]string{"User-Agent": "ttft-test"})
		res := readStream(t, resp, false)
		if res.status != http.StatusOK {
			t.Fatalf("request %d: HTTP %d", i, res.status)
		}
		attempts, _ := strconv.Atoi(resp.Header.Get(HeaderAttempts))
		// The SERVER span ends when the handler returns, maybe just after
		// the client has read the stream's end.
		var spans []sdktrace.ReadOnlySpan
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if spans = rec.Ended(); len(spans) > 0 && spans[len(spans)-1].SpanKind() == trace.SpanKindServer {
				break
			}
		}
		rec.Reset()
		if len(spans) != attempts+1 {
			t.Fatalf("request %d: %d spans for %d attempts, want one CLIENT span per attempt and the SERVER span", i, len(spans), attempts)
		}
		server := spans[len(spans)-1]
		sa := attribute.NewSet(server.Attributes()...)
		for k, want := range map[attribute.Key]string{"http.request.method": "POST", "url.path": "/v1/chat/completions", "user_agent.original": "ttft-test", "server.address": "127.0.0.1"} {
			if v, _ := sa.Value(k); v.Emit() != want {
				t.Errorf("SERVER span %s = %q, want %q", k, v.Emit(), want)
			}
		}
		// The answer's id and model as the answering backend reported
		// them, on the SERVER span and on its attempt's CLIENT span only.
		for _, sp := range []sdktrace.ReadOnlySpan{server, spans[attempts-1]} {
			a := attribute.NewSet(sp.Attributes()...)
			id, _ := a.Value("gen_ai.response.id")
			model, _ := a.Value("gen_ai.response.model")
			if id.AsString() != "chatcmpl-good" || model.AsString() != "m" {
				t.Errorf("request %d, %s span: gen_ai.response.id %q, gen_ai.response.model %q; want chatcmpl-good and m", i, sp.SpanKind(), id.AsString(), model.AsString())
			}
		}
		for _, c := range spans[:attempts-1] {
			if a := attribute.NewSet(c.Attributes()...); a.HasValue("gen_ai.response.id") || a.HasValue("gen_ai.response.model") {
				t.Errorf("request %d: a failed attempt's span carries a response id or model", i)
			}
		}
		for j, c := range spans[:attempts] {
			a := attribute.NewSet(c.Attributes()...)
			backend, _ := a.Value("ttft.backend")
			status, _ := a.Value("http.response.status_code")
			if c.SpanKind() != trace.SpanKindClient || c.Parent().SpanID() != server.SpanContext().SpanID() {
				t.Fatalf("attempt %d: kind %v, parent %v; want a CLIENT child of the SERVER span", j+1, c.SpanKind(), c.Parent().SpanID())
			}
			if j < attempts-1 {
				et, _ := a.Value("error.type")
				if backend.AsString() != "bad" || et.AsString() != "500" || c.Status().Code != codes.Error {
					t.Errorf("failed attempt %d: backend %v error.type %v status %v", j+1, backend, et, c.Status())
				}
				continue
			}
			out, _ := a.Value("gen_ai.usage.output_tokens")
			if backend.AsString() != "good" || status.AsInt64() != 200 || out.AsInt64() != 5 {
				t.Errorf("answering attempt: backend %v status %v output tokens %v", backend, status, out)
			}
		}
		retried = retried || attempts == 2
	}
	if !retried {
		t.Fatal("no request was retried: round-robin over a failing backend should retry some")
	}

	var rm metricdata.ResourceMetrics
	if err := rd.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					counts[m.Name] += dp.Count
				}
			}
		}
	}
	for _, name := range []string{telemetry.MetricServerRequestDuration, telemetry.MetricServerTimeToFirstToken, telemetry.MetricServerTimePerOutputTok} {
		if counts[name] != 4 {
			t.Errorf("%s counted %d requests, want 4 (once each, however many attempts)", name, counts[name])
		}
	}
}

func TestErrorTypeOfAnExchange(t *testing.T) {
	cases := []struct {
		x    exchange
		want string
	}{
		{exchange{status: 200}, ""},
		{exchange{status: 503}, "503"},
		{exchange{status: 200, errMsg: "backend stream cut"}, "stream_cut"},
		{exchange{status: 200, canceled: true}, "canceled"},
		{exchange{}, "no_response"},
	}
	for _, c := range cases {
		if got := errorType(&c.x); got != c.want {
			t.Errorf("errorType(status %d, err %q, canceled %v) = %q, want %q", c.x.status, c.x.errMsg, c.x.canceled, got, c.want)
		}
	}
}

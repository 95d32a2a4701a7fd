package telemetry

import (
	"context"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

func TestOperationAndProvider(t *testing.T) {
	cases := []struct{ api, op, provider string }{
		{"openai-chat", OpChat, "openai"},
		{"chat", OpChat, "openai"},
		{"openai-completions", OpTextCompletion, "openai"},
		{"completions", OpTextCompletion, "openai"},
		{"anthropic", OpChat, "anthropic"},
		{"anthropic-messages", OpChat, "anthropic"},
		{"", OpChat, "openai"},
	}
	for _, c := range cases {
		if got := OperationForAPI(c.api); got != c.op {
			t.Errorf("OperationForAPI(%q) = %q, want %q", c.api, got, c.op)
		}
		if got := ProviderForAPI(c.api); got != c.provider {
			t.Errorf("ProviderForAPI(%q) = %q, want %q", c.api, got, c.provider)
		}
	}
	if got := SpanName(OpChat, "llama-3-8b"); got != "chat llama-3-8b" {
		t.Errorf("SpanName = %q", got)
	}
	if got := SpanName(OpTextCompletion, ""); got != "text_completion" {
		t.Errorf("SpanName without model = %q", got)
	}
}

// attrMap flattens span attributes for assertions.
func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func newRecorder() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	return tp, exp
}

func TestTraceObserverSpan(t *testing.T) {
	tp, exp := newRecorder()
	o := NewTraceObserver(tp, "openai-chat", "fallback-model", "http://127.0.0.1:8123/v1", 200*time.Millisecond)
	sent := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	temp := 0.7
	cases := []struct {
		name      string
		rec       record.Record
		violated  bool
		errStatus bool
	}{
		{"fast ok", record.Record{Model: "m1", ResponseModel: "m1-2026-01", ResponseID: "chatcmpl-42", ID: "run-7", Temperature: &temp, API: "openai-chat", Sent: sent, FirstToken: sent.Add(120 * time.Millisecond),
			End: sent.Add(time.Second), PromptTokens: 100, PromptTokensUsage: 101, OutputTokensUsage: 20, FinishReason: "stop", ITLMs: []float64{10, 30}}, false, false},
		{"slow ok", record.Record{Model: "m1", API: "openai-completions", Sent: sent, FirstToken: sent.Add(450 * time.Millisecond),
			End: sent.Add(time.Second), PromptTokens: 100, OutputEvents: 7}, true, false},
		{"failed", record.Record{API: "anthropic", Sent: sent, End: sent.Add(30 * time.Millisecond), Status: 503,
			ErrorClass: record.ErrHTTPStatus, Error: "HTTP 503"}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exp.Reset()
			rec := c.rec
			rec.Finalize()
			ctx := o.Start(context.Background(), &workload.Request{MaxTokens: 64}, &rec)
			if !trace.SpanContextFromContext(ctx).IsValid() {
				t.Fatal("Start did not put a span in the context")
			}
			o.Done(ctx, &rec)
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			model := rec.Model
			if model == "" {
				model = "fallback-model"
			}
			wantName := SpanName(OperationForAPI(rec.API), model)
			if s.Name != wantName {
				t.Errorf("name %q, want %q", s.Name, wantName)
			}
			if s.SpanKind != trace.SpanKindClient {
				t.Errorf("kind %v, want client", s.SpanKind)
			}
			if !s.StartTime.Equal(sent) || !s.EndTime.Equal(rec.End) {
				t.Errorf("span [%v, %v], want [%v, %v]", s.StartTime, s.EndTime, sent, rec.End)
			}
			a := attrMap(s.Attributes)
			if a[genaiattr.AttrOperationName].AsString() != OperationForAPI(rec.API) || a[genaiattr.AttrProviderName].AsString() != ProviderForAPI(rec.API) {
				t.Errorf("operation/provider attrs %v", a)
			}
			if a[genaiattr.AttrRequestMaxTokens].AsInt64() != 64 || a[genaiattr.AttrServerAddress].AsString() != "127.0.0.1" || a[genaiattr.AttrServerPort].AsInt64() != 8123 {
				t.Errorf("request attrs: max_tokens %v address %v port %v", a[genaiattr.AttrRequestMaxTokens], a[genaiattr.AttrServerAddress], a[genaiattr.AttrServerPort])
			}
			if got := a[genaiattr.AttrSLOViolated].AsBool(); got != c.violated {
				t.Errorf("slo violated = %v, want %v", got, c.violated)
			}
			if (s.Status.Code == codes.Error) != c.errStatus {
				t.Errorf("status %v, want error=%v", s.Status, c.errStatus)
			}
			// The response's model and id are the server's: absent when
			// it sent none (the requested model is never put there).
			if got, ok := a[genaiattr.AttrResponseModel]; ok != (rec.ResponseModel != "") || got.AsString() != rec.ResponseModel {
				t.Errorf("gen_ai.response.model = %v (present %v), want %q", got, ok, rec.ResponseModel)
			}
			if got, ok := a[genaiattr.AttrResponseID]; ok != (rec.ResponseID != "") || got.AsString() != rec.ResponseID {
				t.Errorf("gen_ai.response.id = %v (present %v), want %q", got, ok, rec.ResponseID)
			}
			if rec.ID != "" && a[genaiattr.AttrRecordID].AsString() != rec.ID {
				t.Errorf("ttft.request.id = %v, want %q", a[genaiattr.AttrRecordID], rec.ID)
			}
			if got, ok := a[genaiattr.AttrRequestTemperature]; ok != (rec.Temperature != nil) || (ok && got.AsFloat64() != *rec.Temperature) {
				t.Errorf("gen_ai.request.temperature = %v (present %v), want %v", got, ok, rec.Temperature)
			}
			if c.errStatus {
				if a[genaiattr.AttrErrorType].AsString() != "503" || a[genaiattr.AttrErrorClass].AsString() != rec.ErrorClass {
					t.Errorf("error.type %v (want the status code, 503), ttft.error.class %v", a[genaiattr.AttrErrorType], a[genaiattr.AttrErrorClass])
				}
				if len(s.Events) != 0 {
					t.Errorf("failed request has a first-token event")
				}
				return
			}
			if len(s.Events) != 1 || s.Events[0].Name != genaiattr.EventFirstToken || !s.Events[0].Time.Equal(rec.FirstToken) {
				t.Fatalf("events %+v, want one %s at %v", s.Events, genaiattr.EventFirstToken, rec.FirstToken)
			}
			if got, want := a[genaiattr.AttrTimeToFirstChunk].AsFloat64(), rec.FirstToken.Sub(sent).Seconds(); got != want {
				t.Errorf("time_to_first_chunk %v, want %v", got, want)
			}
			if got := a[genaiattr.AttrUsageOutputTokens].AsInt64(); got != int64(rec.OutputTokens()) {
				t.Errorf("output tokens %d, want %d", got, rec.OutputTokens())
			}
			if rec.PromptTokensUsage > 0 && a[genaiattr.AttrUsageInputTokens].AsInt64() != int64(rec.PromptTokensUsage) {
				t.Errorf("input tokens %v, want the server's usage %d", a[genaiattr.AttrUsageInputTokens], rec.PromptTokensUsage)
			}
		})
	}
}

func TestErrorType(t *testing.T) {
	cases := []struct {
		rec  record.Record
		want string
	}{
		{record.Record{}, ""},
		{record.Record{ErrorClass: record.ErrHTTPStatus, Status: 429}, "429"},
		{record.Record{ErrorClass: record.ErrHTTPStatus}, record.ErrHTTPStatus}, // no status known
		{record.Record{ErrorClass: record.ErrTimeout}, "timeout"},
		{record.Record{ErrorClass: record.ErrStreamCut, Status: 200}, "stream_cut"},
	}
	for _, c := range cases {
		if got := ErrorType(&c.rec); got != c.want {
			t.Errorf("ErrorType(%+v) = %q, want %q", c.rec, got, c.want)
		}
	}
}

func TestTraceObserverIgnoresForeignContext(t *testing.T) {
	tp, exp := newRecorder()
	o := NewTraceObserver(tp, "chat", "m", "http://127.0.0.1:1", 0)
	// A span the observer did not start must not be ended by Done.
	ctx, other := tp.Tracer("x").Start(context.Background(), "other")
	o.Done(ctx, &record.Record{})
	if len(exp.GetSpans()) != 0 {
		t.Fatal("Done ended a span it did not start")
	}
	other.End()
}

func traceSpanContext(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String() + "/" + sc.SpanID().String()
}

// BenchmarkTraceObserver is the per-request cost of a span with the GenAI
// attributes and the first-token event, recorded and handed to a
// synchronous no-op exporter (tracing on), versus the no-op provider
// (tracing off), side by side.
func BenchmarkTraceObserver(b *testing.B) {
	sent := time.Now()
	rec := &record.Record{Model: "m", API: "openai-chat", Sent: sent, FirstToken: sent.Add(100 * time.Millisecond), End: sent.Add(time.Second),
		PromptTokens: 100, OutputTokensUsage: 20, FinishReason: "stop"}
	rec.Finalize()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"on", sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))},
		{"off", noop.NewTracerProvider()},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := NewTraceObserver(c.tp, "openai-chat", "m", "http://127.0.0.1:8000", 0)
			b.ReportAllocs()
			for b.Loop() {
				o.Done(o.Start(ctx, nil, rec), rec)
			}
		})
	}
}

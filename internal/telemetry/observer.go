package telemetry

import (
	"context"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// TraceObserver is a bench.Observer that wraps each request in a GenAI
// client span ("chat {model}"), started at the send and ended at the last
// byte, with the first token as an event. The context Start returns carries
// the span, so InjectHeaders (or Transport) on the outgoing request sends
// its W3C traceparent to the target.
type TraceObserver struct {
	tracer   trace.Tracer
	api      string
	model    string
	server   []attribute.KeyValue
	sloTTFTs float64
}

type spanKey struct{}

// NewTraceObserver builds the observer. api and model are defaults used
// when the record does not name them at Start; target is the endpoint's
// base URL (for server.address/server.port); sloTTFT > 0 flags requests
// over it with ttft.slo.violated=true so tail sampling keeps them.
func NewTraceObserver(tp trace.TracerProvider, api, model, target string, sloTTFT time.Duration) *TraceObserver {
	o := &TraceObserver{tracer: tp.Tracer(TracerName), api: api, model: model, sloTTFTs: sloTTFT.Seconds()}
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			host = u.Hostname()
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		o.server = append(o.server, genaiattr.AttrServerAddress.String(host))
		if p, err := strconv.Atoi(port); err == nil {
			o.server = append(o.server, genaiattr.AttrServerPort.Int(p))
		}
	}
	return o
}

// Start implements bench.Observer.
func (o *TraceObserver) Start(ctx context.Context, req *workload.Request, rec *record.Record) context.Context {
	api, model := o.api, o.model
	if rec.API != "" {
		api = rec.API
	}
	if rec.Model != "" {
		model = rec.Model
	}
	maxTokens := rec.MaxTokens
	if maxTokens == 0 && req != nil {
		maxTokens = req.MaxTokens
	}
	attrs := append(RequestAttributes(api, model, maxTokens), o.server...)
	if rec.Temperature != nil {
		attrs = append(attrs, genaiattr.AttrRequestTemperature.Float64(*rec.Temperature))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
	if !rec.Sent.IsZero() {
		opts = append(opts, trace.WithTimestamp(rec.Sent))
	}
	ctx, span := o.tracer.Start(ctx, SpanName(OperationForAPI(api), model), opts...)
	return context.WithValue(ctx, spanKey{}, span)
}

// Done implements bench.Observer. It ends only the span its own Start made,
// so a runner passing a different context cannot end someone else's span.
func (o *TraceObserver) Done(ctx context.Context, rec *record.Record) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	EndSpanFromRecord(span, rec, o.sloTTFTs)
}

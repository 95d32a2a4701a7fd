package telemetry

// GenAI metrics through the OpenTelemetry metrics SDK, exported over
// OTLP/HTTP: the client side (bench: gen_ai.client.operation.duration and
// gen_ai.client.token.usage) and the server side (the gateway:
// gen_ai.server.request.duration, gen_ai.server.time_to_first_token and
// gen_ai.server.time_per_output_token), with the conventions' units,
// attributes and advisory bucket boundaries. They are opt-in through the
// same OTEL_EXPORTER_OTLP_* variables as tracing; the Prometheus /metrics
// endpoints are unaffected.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"github.com/ttft-dev/ttft/internal/workload"
)

// GenAI metric names (semantic conventions, gen_ai registry).
const (
	MetricClientOperationDuration = "gen_ai.client.operation.duration"
	MetricClientTokenUsage        = "gen_ai.client.token.usage"
	MetricServerRequestDuration   = "gen_ai.server.request.duration"
	MetricServerTimeToFirstToken  = "gen_ai.server.time_to_first_token"
	MetricServerTimePerOutputTok  = "gen_ai.server.time_per_output_token"
)

// The conventions' advisory bucket boundaries. They are part of the
// contract: dashboards built for other GenAI instrumentations assume them.
// Functions, not variables, so that no caller can change them for all.

// BucketsOperationDuration serves gen_ai.client.operation.duration and
// gen_ai.server.request.duration (seconds).
func BucketsOperationDuration() []float64 {
	return []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
}

// BucketsTokenUsage serves gen_ai.client.token.usage ({token}).
func BucketsTokenUsage() []float64 {
	return []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
}

// BucketsTimeToFirstToken serves gen_ai.server.time_to_first_token (seconds).
func BucketsTimeToFirstToken() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
}

// BucketsTimePerOutputToken serves gen_ai.server.time_per_output_token (seconds).
func BucketsTimePerOutputToken() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
}

// MetricsConfig is what SetupMetrics read from the environment.
type MetricsConfig struct {
	Enabled     bool
	Endpoint    string // full URL of the metrics endpoint (…/v1/metrics)
	Headers     map[string]string
	ServiceName string
	Resource    map[string]string
	Interval    time.Duration // periodic export; the last values are also pushed at shutdown
	Timeout     time.Duration
}

// MetricsConfigFromEnv reads the standard variables through getenv. Metrics
// are exported only when an OTLP endpoint is named:
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (as is) or OTEL_EXPORTER_OTLP_ENDPOINT
// (base URL, "/v1/metrics" appended) — the same base variable that turns
// tracing on — and not switched off by OTEL_SDK_DISABLED=true or
// OTEL_METRICS_EXPORTER=none.
func MetricsConfigFromEnv(getenv func(string) string, serviceName string) (MetricsConfig, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	// Service name and resource are read exactly as tracing reads them.
	tc, err := TracingConfigFromEnv(func(k string) string {
		switch k {
		case "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES":
			return getenv(k)
		}
		return ""
	}, serviceName)
	if err != nil {
		return MetricsConfig{}, err
	}
	cfg := MetricsConfig{ServiceName: tc.ServiceName, Resource: tc.Resource, Interval: 60 * time.Second, Timeout: 10 * time.Second}
	exp, err := otlpExport(getenv, "METRICS", "/v1/metrics")
	if err != nil || !exp.enabled {
		return cfg, err
	}
	cfg.Enabled, cfg.Endpoint, cfg.Headers = true, exp.endpoint, exp.headers
	if exp.timeout > 0 {
		cfg.Timeout = exp.timeout
	}
	if v := getenv("OTEL_METRIC_EXPORT_INTERVAL"); v != "" {
		d, err := positiveMillis("OTEL_METRIC_EXPORT_INTERVAL", v)
		if err != nil {
			return cfg, err
		}
		cfg.Interval = d
	}
	return cfg, nil
}

// otlpSignal is what the OTEL_* environment says about one signal's
// OTLP export (traces or metrics): off (enabled false) unless an endpoint
// is set.
type otlpSignal struct {
	enabled  bool
	endpoint string
	headers  map[string]string
	timeout  time.Duration // 0: the caller's default
}

// otlpExport reads one signal's export settings as the OpenTelemetry
// specification defines them: OTEL_SDK_DISABLED, OTEL_{SIGNAL}_EXPORTER
// (otlp or none), the protocol (http/protobuf only), the endpoint (the
// signal's own as given, else the general one + path), headers (the
// signal's over the general ones) and timeout (the signal's, else the
// general one).
func otlpExport(getenv func(string) string, signal, path string) (otlpSignal, error) {
	var out otlpSignal
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return out, nil
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_" + signal + "_EXPORTER"))); exp {
	case "", "otlp":
	case "none":
		return out, nil
	default:
		return out, fmt.Errorf("OTEL_%s_EXPORTER=%q: only \"otlp\" and \"none\" are supported", signal, exp)
	}
	proto := getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return out, fmt.Errorf("OTLP protocol %q is not supported: ttft exports http/protobuf (point the endpoint at the collector's HTTP port, usually 4318)", proto)
	}
	own := "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"
	if ep := strings.TrimSpace(getenv(own)); ep != "" {
		if err := checkURL(ep); err != nil {
			return out, fmt.Errorf("reading %s: %w", own, err)
		}
		out.endpoint = ep
	} else if ep := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); ep != "" {
		if err := checkURL(ep); err != nil {
			return out, fmt.Errorf("reading OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
		}
		out.endpoint = strings.TrimRight(ep, "/") + path
	} else {
		return out, nil
	}
	out.enabled = true
	hdrs, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return out, fmt.Errorf("reading OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	sh, err := parseKeyValues(getenv("OTEL_EXPORTER_OTLP_" + signal + "_HEADERS"))
	if err != nil {
		return out, fmt.Errorf("reading OTEL_EXPORTER_OTLP_%s_HEADERS: %w", signal, err)
	}
	maps.Copy(hdrs, sh)
	out.headers = hdrs
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + signal + "_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		if v := getenv(k); v != "" {
			if out.timeout, err = positiveMillis(k, v); err != nil {
				return out, err
			}
			break
		}
	}
	return out, nil
}

func positiveMillis(k, v string) (time.Duration, error) {
	ms, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("reading %s=%q: want a positive number of milliseconds", k, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// SetupMetrics builds a MeterProvider from the OTEL_* environment (read
// through getenv). With no OTLP endpoint it returns a no-op provider and a
// no-op shutdown, so instruments cost nothing when metrics are off.
// shutdown pushes the final values and stops the exporter; call it before
// exiting (a bench run usually ends before the first periodic export).
func SetupMetrics(ctx context.Context, getenv func(string) string, serviceName string) (metric.MeterProvider, func(context.Context) error, error) {
	cfg, err := MetricsConfigFromEnv(getenv, serviceName)
	if err != nil {
		return nil, nil, err
	}
	nop := func(context.Context) error { return nil }
	if !cfg.Enabled {
		return metricnoop.NewMeterProvider(), nop, nil
	}
	exp, err := otlpmetrichttp.New(ctx,
		otlpmetrichttp.WithEndpointURL(cfg.Endpoint),
		otlpmetrichttp.WithHeaders(cfg.Headers),
		otlpmetrichttp.WithTimeout(cfg.Timeout),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP metric exporter for %s: %w", cfg.Endpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	for k, v := range cfg.Resource {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(resource.NewWithAttributes("", attrs...)),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval), sdkmetric.WithTimeout(cfg.Timeout))),
	)
	shutdown := func(ctx context.Context) error {
		if err := mp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing metrics to %s: %w", cfg.Endpoint, err)
		}
		return nil
	}
	return mp, shutdown, nil
}

// serverAttrs are server.address and server.port of a base URL (nil when it
// has no host).
func serverAttrs(target string) []attribute.KeyValue {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host = u.Hostname()
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	kv := []attribute.KeyValue{genaiattr.AttrServerAddress.String(host)}
	if p, err := strconv.Atoi(port); err == nil {
		kv = append(kv, genaiattr.AttrServerPort.Int(p))
	}
	return kv
}

// GenAIClientMetrics is a bench.Observer that records each measured
// request in gen_ai.client.operation.duration (send to last byte, seconds)
// and gen_ai.client.token.usage (input and output tokens). Warm-up
// requests are left out, so that the exported totals are the run's
// summary's.
type GenAIClientMetrics struct {
	duration metric.Float64Histogram
	tokens   metric.Int64Histogram
	api      string
	model    string
	server   []attribute.KeyValue
}

// NewGenAIClientMetrics creates the client instruments on mp. api and
// model are defaults for records that do not name them; target gives
// server.address and server.port.
func NewGenAIClientMetrics(mp metric.MeterProvider, api, model, target string) (*GenAIClientMetrics, error) {
	m := mp.Meter(TracerName)
	dur, err := m.Float64Histogram(MetricClientOperationDuration, metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."), metric.WithExplicitBucketBoundaries(BucketsOperationDuration()...))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricClientOperationDuration, err)
	}
	tok, err := m.Int64Histogram(MetricClientTokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."), metric.WithExplicitBucketBoundaries(BucketsTokenUsage()...))
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricClientTokenUsage, err)
	}
	return &GenAIClientMetrics{duration: dur, tokens: tok, api: api, model: model, server: serverAttrs(target)}, nil
}

// Start implements bench.Observer; the metrics need only the final record.
func (m *GenAIClientMetrics) Start(ctx context.Context, _ *workload.Request, _ *record.Record) context.Context {
	return ctx
}

// Done implements bench.Observer.
func (m *GenAIClientMetrics) Done(ctx context.Context, rec *record.Record) {
	if rec.Warmup {
		return
	}
	api, model := m.api, m.model
	if rec.API != "" {
		api = rec.API
	}
	if rec.Model != "" {
		model = rec.Model
	}
	kv := make([]attribute.KeyValue, 0, 8)
	kv = append(kv, genaiattr.AttrOperationName.String(OperationForAPI(api)), genaiattr.AttrProviderName.String(ProviderForAPI(api)))
	if model != "" {
		kv = append(kv, genaiattr.AttrRequestModel.String(model))
	}
	if rec.ResponseModel != "" {
		kv = append(kv, genaiattr.AttrResponseModel.String(rec.ResponseModel))
	}
	kv = append(kv, m.server...)
	if et := ErrorType(rec); et != "" {
		kv = append(kv, genaiattr.AttrErrorType.String(et))
	}
	if !rec.Sent.IsZero() && !rec.End.IsZero() {
		m.duration.Record(ctx, rec.End.Sub(rec.Sent).Seconds(), metric.WithAttributes(kv...))
	}
	// Token usage is recorded for answers only: a failed request's counts
	// would be the intended ones, not tokens used.
	if !rec.OK() {
		return
	}
	if in := rec.InputTokens(); in > 0 {
		m.tokens.Record(ctx, int64(in), metric.WithAttributes(append(kv, genaiattr.AttrTokenType.String("input"))...))
	}
	if out := rec.OutputTokens(); out > 0 {
		m.tokens.Record(ctx, int64(out), metric.WithAttributes(append(kv, genaiattr.AttrTokenType.String("output"))...))
	}
}

// GenAIServerMetrics are the server-side GenAI instruments (the gateway's).
type GenAIServerMetrics struct {
	off      bool // a no-op provider: Record returns at once, allocating nothing
	duration metric.Float64Histogram
	ttft     metric.Float64Histogram
	tpot     metric.Float64Histogram
}

// NewGenAIServerMetrics creates the server instruments on mp (nil: a no-op
// provider).
func NewGenAIServerMetrics(mp metric.MeterProvider) (*GenAIServerMetrics, error) {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(TracerName)
	var s GenAIServerMetrics
	_, s.off = mp.(metricnoop.MeterProvider)
	var err error
	if s.duration, err = m.Float64Histogram(MetricServerRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Generative AI server request duration such as time-to-last byte or last output token."),
		metric.WithExplicitBucketBoundaries(BucketsOperationDuration()...)); err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricServerRequestDuration, err)
	}
	if s.ttft, err = m.Float64Histogram(MetricServerTimeToFirstToken, metric.WithUnit("s"),
		metric.WithDescription("Time to generate first token for successful responses."),
		metric.WithExplicitBucketBoundaries(BucketsTimeToFirstToken()...)); err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricServerTimeToFirstToken, err)
	}
	if s.tpot, err = m.Float64Histogram(MetricServerTimePerOutputTok, metric.WithUnit("s"),
		metric.WithDescription("Time per output token generated after the first token for successful responses."),
		metric.WithExplicitBucketBoundaries(BucketsTimePerOutputToken()...)); err != nil {
		return nil, fmt.Errorf("creating %s: %w", MetricServerTimePerOutputTok, err)
	}
	return &s, nil
}

// ServerRequest is one request as a GenAI server saw it.
type ServerRequest struct {
	API          string // ttft API name: operation and provider follow from it
	Model        string // requested
	ErrorType    string // "" for a success
	Duration     time.Duration
	TTFT         time.Duration // 0: no token
	OutputTokens int
	Server       []attribute.KeyValue // server.address, server.port (optional)
}

// Record adds one finished request: its duration always; time to first
// token and time per output token only for a successful answer that had
// them, as the conventions define both "for successful responses".
func (s *GenAIServerMetrics) Record(ctx context.Context, r ServerRequest) {
	if s.off {
		return
	}
	kv := make([]attribute.KeyValue, 0, 6)
	kv = append(kv, genaiattr.AttrOperationName.String(OperationForAPI(r.API)), genaiattr.AttrProviderName.String(ProviderForAPI(r.API)))
	if r.Model != "" {
		kv = append(kv, genaiattr.AttrRequestModel.String(r.Model))
	}
	kv = append(kv, r.Server...)
	if r.ErrorType != "" {
		s.duration.Record(ctx, r.Duration.Seconds(), metric.WithAttributes(append(kv, genaiattr.AttrErrorType.String(r.ErrorType))...))
		return
	}
	opt := metric.WithAttributes(kv...)
	s.duration.Record(ctx, r.Duration.Seconds(), opt)
	if r.TTFT <= 0 {
		return
	}
	s.ttft.Record(ctx, r.TTFT.Seconds(), opt)
	if r.OutputTokens > 1 && r.Duration > r.TTFT {
		s.tpot.Record(ctx, (r.Duration-r.TTFT).Seconds()/float64(r.OutputTokens-1), opt)
	}
}

// StartClientMetrics sets up the client metrics for a bench run against
// target when the OTEL_* environment turns metrics on: the observer to add
// to the run (nil when metrics are off), the flush to call after it, and
// the endpoint the metrics go to (for a status line).
func StartClientMetrics(ctx context.Context, getenv func(string) string, serviceName, target string) (*GenAIClientMetrics, func(context.Context) error, string, error) {
	cfg, err := MetricsConfigFromEnv(getenv, serviceName)
	if err != nil || !cfg.Enabled {
		return nil, nil, "", err
	}
	mp, shutdown, err := SetupMetrics(ctx, getenv, serviceName)
	if err != nil {
		return nil, nil, "", err
	}
	m, err := NewGenAIClientMetrics(mp, "", "", target)
	if err != nil {
		shutdown(ctx)
		return nil, nil, "", err
	}
	return m, shutdown, cfg.Endpoint, nil
}

package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracerName is the instrumentation scope of every ttft span.
const TracerName = "github.com/ttft-dev/ttft"

// TracingConfig is what SetupTracing read from the environment; exported so
// that callers can print it and tests can assert on it.
type TracingConfig struct {
	Enabled     bool
	Endpoint    string // full URL of the traces endpoint (…/v1/traces)
	Headers     map[string]string
	ServiceName string
	Resource    map[string]string
	Sampler     string // OTEL_TRACES_SAMPLER value, normalised
	SamplerArg  float64
	Timeout     time.Duration
}

// TracingConfigFromEnv reads the standard OpenTelemetry variables through
// getenv (injected so tests and the CLI's Env never touch the process
// environment). Tracing is enabled only when an OTLP endpoint is named:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is) or
// OTEL_EXPORTER_OTLP_ENDPOINT (base URL, "/v1/traces" appended), and not
// switched off by OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func TracingConfigFromEnv(getenv func(string) string, serviceName string) (TracingConfig, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg := TracingConfig{ServiceName: serviceName, Sampler: "parentbased_always_on", SamplerArg: 1, Timeout: 10 * time.Second}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		cfg.ServiceName = v
	}
	res, err := parseKeyValues(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return cfg, fmt.Errorf("reading OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	cfg.Resource = res
	if name, ok := res["service.name"]; ok && getenv("OTEL_SERVICE_NAME") == "" {
		cfg.ServiceName = name
	}

	exp, err := otlpExport(getenv, "TRACES", "/v1/traces")
	if err != nil || !exp.enabled {
		return cfg, err
	}
	cfg.Enabled, cfg.Endpoint, cfg.Headers = true, exp.endpoint, exp.headers
	if exp.timeout > 0 {
		cfg.Timeout = exp.timeout
	}
	if s := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))); s != "" {
		cfg.Sampler = s
	}
	if a := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); a != "" {
		f, err := strconv.ParseFloat(a, 64)
		if err != nil || f < 0 || f > 1 {
			return cfg, fmt.Errorf("reading OTEL_TRACES_SAMPLER_ARG=%q: want a ratio in [0,1]", a)
		}
		cfg.SamplerArg = f
	}
	if _, err := samplerFor(cfg.Sampler, cfg.SamplerArg); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// samplerFor builds the sampler named by OTEL_TRACES_SAMPLER.
func samplerFor(name string, arg float64) (sdktrace.Sampler, error) {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(arg), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(arg)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q is not supported (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", name)
}

// TracingOption adjusts SetupTracing.
type TracingOption func(*tracingSetup)

type tracingSetup struct {
	sampler sdktrace.Sampler
	tail    *TailOptions
}

// WithSampler replaces the sampler chosen from OTEL_TRACES_SAMPLER (the
// gateway passes its DynamicSampler here).
func WithSampler(s sdktrace.Sampler) TracingOption {
	return func(t *tracingSetup) { t.sampler = s }
}

// WithTailKeep wraps the exporter in a TailKeepProcessor so that traces the
// head sampler recorded but did not sample are still exported when they end
// in an error or an SLO miss. Use it with a sampler that returns RecordOnly
// for dropped spans (DynamicSampler does).
func WithTailKeep(o TailOptions) TracingOption {
	return func(t *tracingSetup) { t.tail = &o }
}

// SetupTracing builds a TracerProvider from the standard OTEL_* environment
// (read through getenv). With no OTLP endpoint set it returns a no-op
// provider and a no-op shutdown: tracing is off by default and costs
// nothing. shutdown flushes buffered spans; call it before exiting.
func SetupTracing(ctx context.Context, getenv func(string) string, serviceName string, opts ...TracingOption) (trace.TracerProvider, func(context.Context) error, error) {
	cfg, err := TracingConfigFromEnv(getenv, serviceName)
	if err != nil {
		return nil, nil, err
	}
	nop := func(context.Context) error { return nil }
	if !cfg.Enabled {
		return noop.NewTracerProvider(), nop, nil
	}
	var setup tracingSetup
	for _, o := range opts {
		o(&setup)
	}
	if setup.sampler == nil {
		setup.sampler, _ = samplerFor(cfg.Sampler, cfg.SamplerArg)
	}
	exp, err := otlptracehttp.New(ctx,
		otlptracehttp.WithEndpointURL(cfg.Endpoint),
		otlptracehttp.WithHeaders(cfg.Headers),
		otlptracehttp.WithTimeout(cfg.Timeout),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the OTLP trace exporter for %s: %w", cfg.Endpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	for k, v := range cfg.Resource {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	res := resource.NewWithAttributes("", attrs...)
	var proc sdktrace.SpanProcessor = sdktrace.NewBatchSpanProcessor(exp)
	if setup.tail != nil {
		proc = NewTailKeepProcessor(proc, *setup.tail)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(setup.sampler),
		sdktrace.WithSpanProcessor(proc),
	)
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("flushing traces to %s: %w", cfg.Endpoint, err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// propagator is W3C trace context plus baggage. It is an immutable value,
// not process state: ttft never touches otel's global propagator.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// InjectHeaders writes the W3C traceparent (and tracestate, baggage) of the
// span in ctx into h. With no recording or sampled span in ctx it writes
// nothing, so it is safe to call unconditionally on every request.
func InjectHeaders(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// ExtractHeaders returns ctx carrying the remote span context found in h
// (the gateway calls it on each incoming request).
func ExtractHeaders(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Transport wraps an http.RoundTripper so that every request carries the
// trace context of its own context. It clones the request before adding
// headers, as RoundTripper's contract requires.
func Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return injectingTransport{next: next}
}

type injectingTransport struct{ next http.RoundTripper }

func (t injectingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(req.Context()).IsValid() {
		req = req.Clone(req.Context())
		InjectHeaders(req.Context(), req.Header)
	}
	return t.next.RoundTrip(req)
}

// parseKeyValues parses the OTEL "k1=v1,k2=v2" form with percent-encoded
// values (used by OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS).
func parseKeyValues(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("item %d %q: want key=value", i+1, part)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("item %d %q: %w", i+1, part, err)
		}
		out[k] = dv
	}
	return out, nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	}
	if u.Host == "" {
		return errors.New("missing host in " + strconv.Quote(s))
	}
	return nil
}

package telemetry

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
)

func TestMetricsConfigFromEnv(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		enabled  bool
		endpoint string
		interval time.Duration
		wantErr  bool
	}{
		{"off by default", nil, false, "", 60 * time.Second, false},
		{"base endpoint, as tracing", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}, true, "http://127.0.0.1:4318/v1/metrics", 60 * time.Second, false},
		{"metrics endpoint as is", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, true, "http://c:4318/custom", 60 * time.Second, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}, false, "", 60 * time.Second, false},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false, "", 60 * time.Second, false},
		{"interval", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRIC_EXPORT_INTERVAL": "500"}, true, "http://c:4318/v1/metrics", 500 * time.Millisecond, false},
		{"bad interval", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRIC_EXPORT_INTERVAL": "soon"}, false, "", 0, true},
		{"grpc refused", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "", 0, true},
		{"prometheus exporter refused", map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, false, "", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := MetricsConfigFromEnv(func(k string) string { return c.env[k] }, "svc")
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if c.wantErr {
				return
			}
			if cfg.Enabled != c.enabled || cfg.Endpoint != c.endpoint || cfg.Interval != c.interval || cfg.ServiceName != "svc" {
				t.Errorf("got %+v, want enabled %v endpoint %q interval %v", cfg, c.enabled, c.endpoint, c.interval)
			}
		})
	}
}

// collect reads every metric of a manual reader by name.
func collect(t *testing.T, rd *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func attrOf(set attribute.Set, k attribute.Key) (string, bool) {
	v, ok := set.Value(k)
	return v.Emit(), ok
}

func TestGenAIClientMetrics(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	m, err := NewGenAIClientMetrics(mp, "openai-chat", "m", "http://127.0.0.1:8123/v1")
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	recs := []record.Record{
		{Model: "m", ResponseModel: "m-served", Sent: sent, FirstToken: sent.Add(50 * time.Millisecond), End: sent.Add(300 * time.Millisecond),
			PromptTokens: 100, PromptTokensUsage: 104, OutputTokensUsage: 20},
		{Model: "m", Sent: sent, End: sent.Add(5 * time.Millisecond), Status: 503, ErrorClass: record.ErrHTTPStatus, PromptTokens: 100},
		{Model: "m", Warmup: true, Sent: sent, End: sent.Add(time.Second), OutputTokensUsage: 9},
	}
	for i := range recs {
		m.Done(m.Start(context.Background(), nil, &recs[i]), &recs[i])
	}
	got := collect(t, rd)

	dur, ok := got[MetricClientOperationDuration].Data.(metricdata.Histogram[float64])
	if !ok || got[MetricClientOperationDuration].Unit != "s" {
		t.Fatalf("%s: %+v", MetricClientOperationDuration, got[MetricClientOperationDuration])
	}
	if len(dur.DataPoints) != 2 {
		t.Fatalf("%d duration series, want 2 (ok and 503; warm-up left out)", len(dur.DataPoints))
	}
	for _, dp := range dur.DataPoints {
		if !slices.Equal(dp.Bounds, BucketsOperationDuration()) {
			t.Errorf("bounds %v, want the conventions' %v", dp.Bounds, BucketsOperationDuration())
		}
		et, failed := attrOf(dp.Attributes, genaiattr.AttrErrorType)
		rm, hasModel := attrOf(dp.Attributes, genaiattr.AttrResponseModel)
		switch {
		case failed && (et != "503" || hasModel):
			t.Errorf("failed request: error.type %q, response.model %q (want 503 and none)", et, rm)
		case !failed && (rm != "m-served" || dp.Sum < 0.299 || dp.Sum > 0.301):
			t.Errorf("ok request: response.model %q sum %v, want m-served and 0.3 s", rm, dp.Sum)
		}
		if addr, _ := attrOf(dp.Attributes, genaiattr.AttrServerAddress); addr != "127.0.0.1" {
			t.Errorf("server.address %q", addr)
		}
		if op, _ := attrOf(dp.Attributes, genaiattr.AttrOperationName); op != "chat" {
			t.Errorf("gen_ai.operation.name %q", op)
		}
	}

	tok, ok := got[MetricClientTokenUsage].Data.(metricdata.Histogram[int64])
	if !ok || got[MetricClientTokenUsage].Unit != "{token}" {
		t.Fatalf("%s: %+v", MetricClientTokenUsage, got[MetricClientTokenUsage])
	}
	sums := map[string]int64{}
	for _, dp := range tok.DataPoints {
		typ, _ := attrOf(dp.Attributes, genaiattr.AttrTokenType)
		sums[typ] += dp.Sum
		if !slices.Equal(dp.Bounds, BucketsTokenUsage()) {
			t.Errorf("token bounds %v", dp.Bounds)
		}
	}
	// The server's usage (104, 20) of the one answer; nothing for the 503.
	if sums["input"] != 104 || sums["output"] != 20 || len(sums) != 2 {
		t.Errorf("token usage %v, want input 104 and output 20", sums)
	}
}

func TestGenAIServerMetrics(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	s, err := NewGenAIServerMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.Record(ctx, ServerRequest{API: "openai-chat", Model: "m", Duration: 1100 * time.Millisecond, TTFT: 100 * time.Millisecond, OutputTokens: 11})
	s.Record(ctx, ServerRequest{API: "openai-chat", Model: "m", Duration: 20 * time.Millisecond, ErrorType: "502"})
	got := collect(t, rd)
	cases := []struct {
		name   string
		bounds []float64
		count  uint64
		sum    float64
	}{
		{MetricServerRequestDuration, BucketsOperationDuration(), 2, 1.12},
		{MetricServerTimeToFirstToken, BucketsTimeToFirstToken(), 1, 0.1},
		{MetricServerTimePerOutputTok, BucketsTimePerOutputToken(), 1, 0.1}, // (1.1 − 0.1) s / 10
	}
	for _, c := range cases {
		h, ok := got[c.name].Data.(metricdata.Histogram[float64])
		if !ok || got[c.name].Unit != "s" {
			t.Errorf("%s missing or not a histogram in seconds: %+v", c.name, got[c.name])
			continue
		}
		var n uint64
		var sum float64
		for _, dp := range h.DataPoints {
			n += dp.Count
			sum += dp.Sum
			if !slices.Equal(dp.Bounds, c.bounds) {
				t.Errorf("%s bounds %v, want %v", c.name, dp.Bounds, c.bounds)
			}
		}
		if n != c.count || sum < c.sum-1e-9 || sum > c.sum+1e-9 {
			t.Errorf("%s: count %d sum %v, want %d and %v", c.name, n, sum, c.count, c.sum)
		}
	}
}

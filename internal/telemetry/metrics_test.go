package telemetry

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/nativehist"
)

func TestBenchMetricsObserver(t *testing.T) {
	t.Setenv(nativehist.Env, "") // the default
	m := NewBenchMetrics(prometheus.Labels{"run": "r1"})
	ctx := context.Background()
	sent := time.Now()
	recs := []*record.Record{
		{Model: "m", Intended: sent.Add(-10 * time.Millisecond), Sent: sent, FirstToken: sent.Add(100 * time.Millisecond), End: sent.Add(300 * time.Millisecond),
			ITLMs: []float64{10, 20, 30}, PromptTokens: 50, OutputEvents: 4},
		{Model: "m", Sent: sent, FirstToken: sent.Add(300 * time.Millisecond), End: sent.Add(500 * time.Millisecond), PromptTokens: 50, OutputEvents: 2},
		{Model: "m", Sent: sent, End: sent.Add(5 * time.Millisecond), ErrorClass: record.ErrHTTPStatus, Status: 500},
		{Model: "m", Warmup: true, Sent: sent, FirstToken: sent.Add(time.Second), End: sent.Add(2 * time.Second)},
	}
	var ctxs []context.Context
	for _, r := range recs {
		r.Finalize()
		ctxs = append(ctxs, m.Start(ctx, nil, r))
	}
	srv, err := ServeMetrics("127.0.0.1:0", m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	if got := scrapeFamilies(t, srv.Addr())["ttft_bench_requests_in_flight"].Sum; got != 4 {
		t.Fatalf("in flight %v, want 4", got)
	}
	for i, r := range recs {
		m.Done(ctxs[i], r)
	}
	fams := scrapeFamilies(t, srv.Addr())
	check := func(name string, sum, count float64) {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("%s missing", name)
		}
		if math.Abs(f.Sum-sum) > 1e-9 || f.Count != count {
			t.Errorf("%s: sum %v count %v, want %v and %v", name, f.Sum, f.Count, sum, count)
		}
	}
	check("ttft_bench_time_to_first_token_seconds", 0.4, 2) // warm-up excluded
	check("ttft_bench_time_to_first_token_from_intended_seconds", 0.11, 1)
	check("ttft_bench_inter_token_latency_seconds", 0.06, 3)
	check("ttft_bench_e2e_request_latency_seconds", 0.8, 2) // failed request excluded
	check("ttft_bench_requests_in_flight", 0, 0)
	check("ttft_bench_requests_total", 3, 0)
	check("ttft_bench_errors_total", 1, 0)
	check("ttft_bench_prompt_tokens_total", 100, 0)
	check("ttft_bench_generation_tokens_total", 6, 0)

	// Classic buckets only by default: a Prometheus scraping with native
	// histograms on keeps the _bucket series the rules and dashboards read.
	if h := ttftHistogram(t, m); h.Schema != nil || len(h.GetBucket()) != len(TTFTBuckets) {
		t.Errorf("TTFT histogram: native schema %v, %d classic buckets; want none and %d", h.Schema, len(h.GetBucket()), len(TTFTBuckets))
	}
}

// TestBenchMetricsNativeOptIn: TTFT_NATIVE_HISTOGRAMS=1 adds a native
// histogram beside the classic buckets (visible to protobuf scrapers).
func TestBenchMetricsNativeOptIn(t *testing.T) {
	t.Setenv(nativehist.Env, "1")
	m := NewBenchMetrics(prometheus.Labels{"run": "r1"})
	sent := time.Now()
	rec := &record.Record{Model: "m", Sent: sent, FirstToken: sent.Add(100 * time.Millisecond), End: sent.Add(300 * time.Millisecond)}
	rec.Finalize()
	m.Done(m.Start(context.Background(), nil, rec), rec)
	if h := ttftHistogram(t, m); h.Schema == nil || len(h.GetBucket()) != len(TTFTBuckets) {
		t.Errorf("TTFT histogram: native schema %v, %d classic buckets; want one and %d", h.Schema, len(h.GetBucket()), len(TTFTBuckets))
	}
}

// ttftHistogram gathers bench's TTFT histogram (one model, labels model
// and run).
func ttftHistogram(t *testing.T, m *BenchMetrics) *dto.Histogram {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ttft_bench_time_to_first_token_seconds" {
			if lbl := mf.GetMetric()[0].GetLabel(); len(lbl) != 2 {
				t.Errorf("labels %v, want model and run", lbl)
			}
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatal("ttft_bench_time_to_first_token_seconds not gathered")
	return nil
}

func scrapeFamilies(t *testing.T, addr string) map[string]*FamilyTotal {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `ttft_bench_time_to_first_token_seconds_bucket{model="m",run="r1",le="0.1"}`) &&
		!strings.Contains(string(body), "# TYPE ttft_bench_requests_in_flight gauge") {
		t.Fatalf("unexpected exposition:\n%s", body)
	}
	s, err := ParseSnapshot(strings.NewReader(string(body)), expfmt.ResponseFormat(resp.Header), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.Families
}

func TestServeMetricsBusyPort(t *testing.T) {
	a, err := ServeMetrics("127.0.0.1:0", prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	if _, err := ServeMetrics(a.Addr(), prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), a.Addr()) {
		t.Fatalf("err = %v, want one naming %s", err, a.Addr())
	}
}

func BenchmarkBenchMetricsDone(b *testing.B) {
	m := NewBenchMetrics(nil)
	sent := time.Now()
	rec := &record.Record{Model: "m", Sent: sent, FirstToken: sent.Add(100 * time.Millisecond), End: sent.Add(time.Second),
		ITLMs: make([]float64, 32), PromptTokens: 100, OutputEvents: 33}
	rec.Finalize()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Done(m.Start(ctx, nil, rec), rec)
	}
}

// BenchmarkHistogramObserve compares, side by side in one run, the cost of
// one observation with classic buckets only (ttft's default) and with a
// native histogram alongside (TTFT_NATIVE_HISTOGRAMS=1).
func BenchmarkHistogramObserve(b *testing.B) {
	for _, c := range []struct {
		name   string
		factor float64
	}{{"classic", 0}, {"classic+native", NativeBucketFactor}} {
		b.Run(c.name, func(b *testing.B) {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", Buckets: TTFTBuckets,
				NativeHistogramBucketFactor: c.factor, NativeHistogramMaxBucketNumber: NativeMaxBucketNumber})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h.Observe(float64(i%5000) * 1e-4)
			}
		})
	}
}

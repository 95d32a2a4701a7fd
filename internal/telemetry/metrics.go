package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sloclass"
	"github.com/ttft-dev/ttft/internal/telemetry/nativehist"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Classic bucket boundaries in seconds. They are what Prometheus stores
// (native histograms are opt-in: package nativehist), so they are dense
// where TTFT SLOs live (100 ms – 2 s); TTFT's are the gateway's too
// (sloclass.TTFTBuckets).
var (
	TTFTBuckets = sloclass.TTFTBuckets()
	ITLBuckets  = []float64{.001, .0025, .005, .01, .015, .02, .025, .03, .04, .05, .075, .1, .15, .2, .3, .4, .5, .75, 1, 2.5, 5}
	E2EBuckets  = []float64{.05, .1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 300}
)

// Native histogram settings used alongside the classic buckets when
// TTFT_NATIVE_HISTOGRAMS opts in (nativehist.Enabled).
const (
	NativeBucketFactor     = nativehist.BucketFactor
	NativeMaxBucketNumber  = nativehist.MaxBucketNumber
	NativeMinResetDuration = nativehist.MinResetDuration
)

// NewHistogramVec builds a histogram with classic buckets, plus a native
// (sparse) histogram when TTFT_NATIVE_HISTOGRAMS opts in, the way every
// ttft histogram is exposed.
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(nativehist.Opts(prometheus.HistogramOpts{
		Name:    name,
		Help:    help,
		Buckets: buckets,
	}), labels)
}

// BenchMetrics is the live client-side view of a bench run as Prometheus
// metrics (prefix ttft_bench_). It is a bench.Observer: Start and Done are
// lock-free apart from the client library's own atomics. Warm-up requests
// count towards in-flight only, so the histograms match the summary.
type BenchMetrics struct {
	reg *prometheus.Registry

	ttft, ttftIntended, itl, e2e, tpot, lag *prometheus.HistogramVec
	inFlight                                prometheus.Gauge
	requests                                *prometheus.CounterVec
	errors                                  *prometheus.CounterVec
	promptTokens, outputTokens              *prometheus.CounterVec
}

// NewBenchMetrics registers the bench metrics in a fresh registry. constLabels
// (e.g. run ID, target) are attached to every series.
func NewBenchMetrics(constLabels prometheus.Labels) *BenchMetrics {
	m := &BenchMetrics{reg: prometheus.NewRegistry()}
	reg := prometheus.WrapRegistererWith(constLabels, m.reg)
	m.ttft = NewHistogramVec("ttft_bench_time_to_first_token_seconds",
		"Client-side time from sending a request to its first token.", TTFTBuckets, "model")
	m.ttftIntended = NewHistogramVec("ttft_bench_time_to_first_token_from_intended_seconds",
		"Time from the open-loop schedule's intended send time to the first token (includes client schedule lag; free of coordinated omission).", TTFTBuckets, "model")
	m.itl = NewHistogramVec("ttft_bench_inter_token_latency_seconds",
		"Gaps between consecutive token events as received.", ITLBuckets, "model")
	m.e2e = NewHistogramVec("ttft_bench_e2e_request_latency_seconds",
		"Client-side time from sending a request to its last byte.", E2EBuckets, "model")
	m.tpot = NewHistogramVec("ttft_bench_time_per_output_token_seconds",
		"Per-request mean time per output token after the first.", ITLBuckets, "model")
	m.lag = NewHistogramVec("ttft_bench_schedule_lag_seconds",
		"How late requests were sent relative to the open-loop schedule.", TTFTBuckets, "model")
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ttft_bench_requests_in_flight", Help: "Requests sent and not yet finished.",
	})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ttft_bench_requests_total", Help: "Finished requests by outcome (ok, error).",
	}, []string{"model", "outcome"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ttft_bench_errors_total", Help: "Failed requests by error class (see record.Err*).",
	}, []string{"model", "class"})
	m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ttft_bench_prompt_tokens_total", Help: "Prompt tokens sent (server usage when reported).",
	}, []string{"model"})
	m.outputTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ttft_bench_generation_tokens_total", Help: "Output tokens received.",
	}, []string{"model"})
	reg.MustRegister(m.ttft, m.ttftIntended, m.itl, m.e2e, m.tpot, m.lag, m.inFlight,
		m.requests, m.errors, m.promptTokens, m.outputTokens)
	return m
}

// Registry is the registry to serve (ServeMetrics) or gather in tests.
func (m *BenchMetrics) Registry() *prometheus.Registry { return m.reg }

// Start implements bench.Observer.
func (m *BenchMetrics) Start(ctx context.Context, _ *workload.Request, _ *record.Record) context.Context {
	m.inFlight.Inc()
	return ctx
}

// Done implements bench.Observer.
func (m *BenchMetrics) Done(_ context.Context, rec *record.Record) {
	m.inFlight.Dec()
	if rec.Warmup {
		return
	}
	model := rec.Model
	if rec.OK() {
		m.requests.WithLabelValues(model, "ok").Inc()
	} else {
		m.requests.WithLabelValues(model, "error").Inc()
		m.errors.WithLabelValues(model, rec.ErrorClass).Inc()
	}
	if !rec.FirstToken.IsZero() && !rec.Sent.IsZero() {
		m.ttft.WithLabelValues(model).Observe(rec.FirstToken.Sub(rec.Sent).Seconds())
		if !rec.Intended.IsZero() {
			m.ttftIntended.WithLabelValues(model).Observe(rec.FirstToken.Sub(rec.Intended).Seconds())
		}
	}
	if !rec.Intended.IsZero() && !rec.Sent.IsZero() {
		m.lag.WithLabelValues(model).Observe(max(0, rec.Sent.Sub(rec.Intended).Seconds()))
	}
	if len(rec.ITLMs) > 0 {
		h := m.itl.WithLabelValues(model)
		for _, v := range rec.ITLMs {
			h.Observe(v / 1e3)
		}
	}
	if rec.OK() && !rec.End.IsZero() && !rec.Sent.IsZero() {
		m.e2e.WithLabelValues(model).Observe(rec.End.Sub(rec.Sent).Seconds())
	}
	if rec.TPOTMs > 0 {
		m.tpot.WithLabelValues(model).Observe(rec.TPOTMs / 1e3)
	}
	if n := firstPositive(rec.PromptTokensUsage, rec.PromptTokens); n > 0 {
		m.promptTokens.WithLabelValues(model).Add(float64(n))
	}
	if n := rec.OutputTokens(); n > 0 {
		m.outputTokens.WithLabelValues(model).Add(float64(n))
	}
}

// MetricsServer serves a Prometheus registry over HTTP at /metrics.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// ServeMetrics listens on addr (HOST:PORT; port 0 picks a free one) and
// serves g at /metrics with content negotiation (text, OpenMetrics or
// protobuf, whichever the scraper asks for; native histograms, when opted
// into, travel only over protobuf).
// Listening happens before it returns, so a busy port is reported at once.
func ServeMetrics(addr string, g prometheus.Gatherer) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ttft metrics: see /metrics")
	})
	s := &MetricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address actually listened on.
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server, letting an in-progress scrape finish.
func (s *MetricsServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("stopping the metrics server on %s: %w", s.Addr(), err)
	}
	return nil
}

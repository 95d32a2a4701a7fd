package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/telemetry/nativehist"
)

// vLLM v1's histogram buckets (vllm/v1/metrics/loggers.py).
var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// serverMetrics mirrors vLLM's Prometheus metrics, one registry per server
// (no global state, so a fleet in one process keeps replicas apart).
type serverMetrics struct {
	reg                                       *prometheus.Registry
	ttft, itl, tpot, e2e, queue, prefill, dec prometheus.Observer
	inference                                 prometheus.Observer
	running, waiting, kvUsage                 prometheus.Gauge
	promptTok, genTok, pcQueries, pcHits, pre prometheus.Counter
	success                                   *prometheus.CounterVec
	lastStats                                 sim.EngineStats
	detail                                    detailMetrics // metrics_detail.go
}

func newServerMetrics(model, engine string, d *sim.Deployment) *serverMetrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": model, "engine": engine}
	r := registrar{reg: reg, labels: labels}
	hist, gauge, counter := r.hist, r.gauge, r.counter
	m := &serverMetrics{reg: reg}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	m.tpot = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets)
	m.dec = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets)
	m.inference = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestBuckets)
	m.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	m.kvUsage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	m.promptTok = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTok = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.pcQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.pcHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	m.pre = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	// process_start_time_seconds and the other process series, as vLLM's
	// Python client publishes them: schedulers read the start time to
	// tell a restarted engine (an empty cache) from a running one.
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registerDetail(d, r)
	return m
}

// update publishes the engine's gauges and counter deltas after a step.
func (m *serverMetrics) update(e *sim.Engine) {
	st := e.Stats()
	m.running.Set(float64(e.NumRunning()))
	m.waiting.Set(float64(e.NumWaiting()))
	m.kvUsage.Set(e.KVUsage())
	m.promptTok.Add(float64(st.PromptTokens - m.lastStats.PromptTokens))
	m.genTok.Add(float64(st.GenTokens - m.lastStats.GenTokens))
	m.pcQueries.Add(float64(st.PrefixQueries - m.lastStats.PrefixQueries))
	m.pcHits.Add(float64(st.PrefixHits - m.lastStats.PrefixHits))
	m.pre.Add(float64(st.Preemptions - m.lastStats.Preemptions))
	m.lastStats = st
	m.updateDetail(e)
}

// registrar makes and registers the server's series, each with the
// model_name and engine labels.
type registrar struct {
	reg    *prometheus.Registry
	labels prometheus.Labels
}

// hist is a histogram with vLLM's classic buckets (vLLM exports nothing
// else), plus a native one only when TTFT_NATIVE_HISTOGRAMS opts in.
func (r registrar) hist(name, help string, b []float64) prometheus.Observer {
	h := prometheus.NewHistogram(nativehist.Opts(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: r.labels}))
	r.reg.MustRegister(h)
	return h
}

func (r registrar) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: r.labels})
	r.reg.MustRegister(g)
	return g
}

func (r registrar) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: r.labels})
	r.reg.MustRegister(c)
	return c
}

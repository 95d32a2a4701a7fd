package gateway

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sloclass"
	"github.com/ttft-dev/ttft/internal/telemetry/nativehist"
)

// metrics are the gateway's Prometheus series, all prefixed ttft_gateway_.
// Gauges that mirror scheduler state (in-flight, breaker, predictor error)
// are read at scrape time by stateCollector instead of being updated on the
// request path.
type metrics struct {
	ttft      *prometheus.HistogramVec
	itl       *prometheus.HistogramVec
	e2e       *prometheus.HistogramVec
	requests  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	sloViol   *prometheus.CounterVec
	retries   *prometheus.CounterVec
	admission *prometheus.CounterVec
	streamErr *prometheus.CounterVec
	// continuations counts streams carried over to another backend, by
	// that backend and outcome (continue.go).
	continuations *prometheus.CounterVec
	predAPE       *prometheus.HistogramVec
	schedTime     prometheus.Histogram
	// pluginTime is each scheduler plugin's share of a decision (sampled:
	// sched.Options.PluginLatencyEvery).
	pluginTime *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	cost       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, g *Gateway) (*metrics, error) {
	m := &metrics{
		// Classic buckets, plus native histograms when TTFT_NATIVE_HISTOGRAMS
		// opts in (package nativehist says why not by default).
		ttft: prometheus.NewHistogramVec(nativehist.Opts(prometheus.HistogramOpts{
			Name: "ttft_gateway_ttft_seconds", Help: "Time to first token seen through the gateway, from request arrival.",
			Buckets: sloclass.TTFTBuckets(), // bench's too; every SLO class's target is a bound
		}), []string{"backend", "slo_class"}),
		itl: prometheus.NewHistogramVec(nativehist.Opts(prometheus.HistogramOpts{
			Name: "ttft_gateway_itl_seconds", Help: "Gaps between consecutive token events passed through.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1},
		}), []string{"backend"}),
		e2e: prometheus.NewHistogramVec(nativehist.Opts(prometheus.HistogramOpts{
			Name: "ttft_gateway_e2e_seconds", Help: "Request duration through the gateway.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}), []string{"backend", "slo_class"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_requests_total", Help: "Requests answered, by backend, SLO class and status code.",
		}, []string{"backend", "slo_class", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_decisions_total", Help: "Scheduling decisions by policy, reason and chosen backend.",
		}, []string{"policy", "reason", "backend"}),
		sloViol: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_slo_violations_total", Help: "Requests whose TTFT exceeded their SLO.",
		}, []string{"backend", "slo_class"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_retries_total", Help: "Attempts retried on another backend before the first byte, by failed backend and reason.",
		}, []string{"backend", "reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_tokens_total", Help: "Tokens of successful requests, by backend and direction (input: the backend's usage when reported, else the gateway's estimate; output: the backend's usage).",
		}, []string{"backend", "direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_cost_dollars_total", Help: "Spend of successful requests at the backends' configured price per million input and output tokens.",
		}, []string{"backend"}),
		admission: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_admission_total", Help: "Requests no backend was predicted to serve within SLO, by action taken.",
		}, []string{"action"}),
		streamErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_stream_errors_total", Help: "Streams ended by the gateway with an error event after the first byte.",
		}, []string{"backend", "reason"}),
		continuations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ttft_gateway_continuations_total", Help: "Streams cut mid-answer carried on on another backend, by that backend and outcome (completed, interrupted, failed, client_gone; skipped_<reason> with the backend that failed when none was tried).",
		}, []string{"backend", "outcome"}),
		predAPE: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ttft_gateway_predictor_abs_error_ratio", Help: "|actual − predicted| / actual of the TTFT prediction used for each decision.",
			Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.12, 0.2, 0.3, 0.5, 1, 2},
		}, []string{"backend"}),
		schedTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ttft_gateway_scheduling_seconds", Help: "Time to take one scheduling decision.",
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3},
		}),
		pluginTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ttft_gateway_scheduler_plugin_duration_seconds", Help: "Time each scheduler plugin (filter, scorer, picker) takes in a decision; a random sample of the decisions.",
			Buckets: []float64{1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3},
		}, []string{"plugin", "kind"}),
	}
	for _, c := range []prometheus.Collector{m.ttft, m.itl, m.e2e, m.requests, m.decisions, m.sloViol, m.retries, m.admission, m.streamErr, m.continuations, m.predAPE, m.schedTime, m.pluginTime, m.tokens, m.cost, &stateCollector{g: g}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// pluginLatency gives the scheduler each plugin's duration histogram
// (sched.Options.PluginLatency).
func (m *metrics) pluginLatency(kind, plugin string) sched.Observer {
	return m.pluginTime.WithLabelValues(plugin, kind)
}

// stateCollector exports scheduler state at scrape time.
type stateCollector struct{ g *Gateway }

var (
	descInFlight = prometheus.NewDesc("ttft_gateway_in_flight", "Requests in flight per backend.", []string{"backend"}, nil)
	descQueued   = prometheus.NewDesc("ttft_gateway_queued_prompt_tokens", "Uncached prompt tokens sent to a backend still awaiting their first token.", []string{"backend"}, nil)
	descBreaker  = prometheus.NewDesc("ttft_gateway_breaker_state", "Circuit breaker state: 0 closed, 1 half-open, 2 open.", []string{"backend"}, nil)
	descHealthy  = prometheus.NewDesc("ttft_gateway_backend_healthy", "1 when the last active health check passed.", []string{"backend"}, nil)
	descDemoted  = prometheus.NewDesc("ttft_gateway_slo_state", "SLO tracker state: 0 ok, 1 demoted, 2 probing.", []string{"backend"}, nil)
	descMAPE     = prometheus.NewDesc("ttft_gateway_predictor_mape", "Online mean absolute percentage error of each TTFT predictor (ratio).", []string{"backend", "predictor"}, nil)
	descActive   = prometheus.NewDesc("ttft_gateway_predictor_active", "1 for the predictor currently used for a backend.", []string{"backend", "predictor"}, nil)
	// What a backend's engine publishes about its cache (health.go), and
	// what the scheduler has learnt it holds; absent while unknown.
	descEngineCache = prometheus.NewDesc("ttft_gateway_backend_engine_cache_tokens", "KV cache capacity the backend's engine publishes, in tokens (vLLM cache_config_info num_gpu_blocks x block_size, SGLang max_total_num_tokens).", []string{"backend"}, nil)
	descEngineHit   = prometheus.NewDesc("ttft_gateway_backend_prefix_cache_hit_ratio", "Share of the prompt tokens the backend's engine looked up in its prefix cache between the last two scrapes that it found there (its counters), or the engine's own hit-rate gauge.", []string{"backend"}, nil)
	descRestarts    = prometheus.NewDesc("ttft_gateway_backend_engine_restarts_total", "Restarts of the backend's engine seen in its metrics (process start time changed, or prefix-cache counters went down); each emptied the backend's prefix index.", []string{"backend"}, nil)
	// The admission loop of each route (sched.AdmissionRoutes): what
	// share of the SLO admitted requests' bounds may take, what is added
	// to them now, and how often the share moved.
	descAdmitShare    = prometheus.NewDesc("ttft_gateway_admission_slo_share", "Share of its TTFT SLO an admitted request's predicted bound may take on the route (the admission feedback loop; 1 = the whole SLO).", []string{"model"}, nil)
	descAdmitLate     = prometheus.NewDesc("ttft_gateway_admission_lateness_seconds", "Median lateness of the route's last first tokens against their predictions, added to every admission bound (0 when on time or stale).", []string{"model"}, nil)
	descAdmitBackoffs = prometheus.NewDesc("ttft_gateway_admission_backoffs_total", "Times the route's admitted requests were shown missing their SLO more than 1% of the time and the SLO share was cut.", []string{"model"}, nil)
	descAdmitRelaxes  = prometheus.NewDesc("ttft_gateway_admission_relaxes_total", "Times the route's admitted requests were shown within their SLO and the SLO share was raised.", []string{"model"}, nil)
	descLearntCap     = prometheus.NewDesc("ttft_gateway_backend_cache_capacity_blocks", "Prefix-cache capacity the scheduler believes the backend holds, in prefix-index blocks; only policies that route by TTFT predictions learn it.", []string{"backend"}, nil)
	descTransit       = prometheus.NewDesc("ttft_gateway_backend_transit_seconds", "Least recent time to a stream's response headers, where the backend sends them before its first token: its round trip and front end, which hold no slot; absent while unknown.", []string{"backend"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descQueued, descBreaker, descHealthy, descDemoted, descMAPE, descActive, descEngineCache, descEngineHit, descRestarts, descLearntCap, descTransit, descAdmitShare, descAdmitLate, descAdmitBackoffs, descAdmitRelaxes} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.st.Load()
	if st == nil {
		return
	}
	now := time.Now()
	for _, b := range st.sched.Backends() {
		n := b.Name()
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(b.InFlight()), n)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(b.QueuedTokens()), n)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, float64(b.BreakerState(now)), n)
		h := 0.0
		if b.Healthy() {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, h, n)
		ch <- prometheus.MustNewConstMetric(descDemoted, prometheus.GaugeValue, float64(b.SLOState(now)), n)
		ps := b.PredictorStats()
		for p, v := range ps.MAPE {
			ch <- prometheus.MustNewConstMetric(descMAPE, prometheus.GaugeValue, v, n, p)
		}
		for _, p := range []string{sched.PredictorLinear, sched.PredictorQueue} {
			a := 0.0
			if p == ps.Active {
				a = 1
			}
			ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, a, n, p)
		}
		ec := b.EngineCache()
		if !math.IsNaN(ec.Tokens) {
			ch <- prometheus.MustNewConstMetric(descEngineCache, prometheus.GaugeValue, ec.Tokens, n)
		}
		if !math.IsNaN(ec.HitRate) {
			ch <- prometheus.MustNewConstMetric(descEngineHit, prometheus.GaugeValue, ec.HitRate, n)
		}
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(b.EngineRestarts()), n)
		if c := b.CacheCapacity(); c > 0 {
			ch <- prometheus.MustNewConstMetric(descLearntCap, prometheus.GaugeValue, float64(c), n)
		}
		if d := b.Transit(); d > 0 {
			ch <- prometheus.MustNewConstMetric(descTransit, prometheus.GaugeValue, d.Seconds(), n)
		}
	}
	for _, r := range st.sched.AdmissionRoutes() {
		ch <- prometheus.MustNewConstMetric(descAdmitShare, prometheus.GaugeValue, r.Use, r.Model)
		ch <- prometheus.MustNewConstMetric(descAdmitLate, prometheus.GaugeValue, r.Late.Seconds(), r.Model)
		ch <- prometheus.MustNewConstMetric(descAdmitBackoffs, prometheus.CounterValue, float64(r.Backoffs), r.Model)
		ch <- prometheus.MustNewConstMetric(descAdmitRelaxes, prometheus.CounterValue, float64(r.Relaxes), r.Model)
	}
}

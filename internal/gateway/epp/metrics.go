package epp

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Decision results (a bounded set: metric label values).
const (
	resultPicked     = "picked"
	resultNoEndpoint = "no_endpoint"
	resultShed       = "shed"
	resultBadRequest = "bad_request"
)

// metrics are the picker's own series. Without a registerer they are
// still counted (cheaply) but exported nowhere.
type metrics struct {
	decisions *prometheus.CounterVec
	// reasons counts picks by the scheduler's reason, as the gateway's
	// ttft_gateway_decisions_total does: which of the policy's rules
	// decided (prefix-hit, headroom, explore, …).
	reasons  *prometheus.CounterVec
	overhead prometheus.Histogram
	served   *prometheus.CounterVec
	ttft     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ttft_epp_decisions_total",
			Help: "Endpoint-picking decisions, by result (picked, no_endpoint, shed, bad_request)."}, []string{"result"}),
		reasons: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ttft_epp_picks_total",
			Help: "Endpoints picked, by the scheduler's reason (prefix-hit, headroom, explore, …)."}, []string{"reason"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ttft_epp_decision_duration_seconds",
			Help:    "Time from the request body's end reaching the picker to its header mutation being sent.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 14)}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ttft_epp_served_total",
			Help: "Responses by the endpoint the data plane reported serving them, and whether it was the picked one."}, []string{"endpoint", "picked"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ttft_epp_time_to_first_token_seconds",
			Help:    "Time from the pick to the first token event passing the picker.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.reasons, m.overhead, m.served, m.ttft)
	}
	return m
}

func (m *metrics) decided(result string) { m.decisions.WithLabelValues(result).Inc() }

func (m *metrics) overheadSeen(d time.Duration) { m.overhead.Observe(d.Seconds()) }

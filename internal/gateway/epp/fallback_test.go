package epp

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// TestFallbackTTFTLearnt: when the data plane reports that another
// endpoint than the chosen one served a request, that endpoint's
// predictors learn the request's TTFT, and the chosen one's do not.
func TestFallbackTTFTLearnt(t *testing.T) {
	engines := startEngines(t, 2, nil)
	chosen, fallback := hostPort(engines[0].URL()), hostPort(engines[1].URL())
	reg := prometheus.NewRegistry()
	s, env := startPicker(t, Options{Registerer: reg, Seed: 1}, []Endpoint{{Addr: chosen}, {Addr: fallback}})
	// Out of the picker's rotation, so that it never learns as the chosen
	// endpoint: only a fallback's answers can teach it.
	s.SetDraining(fallback, true)
	waitReady(t, s)
	model := engines[0].ModelName()
	// One fewer than the failures that open the chosen endpoint's breaker
	// (each redirect is one): enough for a predictor to be ready.
	const n = 4
	for i := range n {
		o := env.mustDo(call{body: chatBody(model, prefixPrompt(i), "hi"), served: fallback})
		if o.primary() != chosen || o.status != 200 {
			t.Fatalf("request %d: picked %q (status %d), want %s", i, o.dest, o.status, chosen)
		}
	}
	for _, b := range s.Scheduler().Backends() {
		eventually(t, b.Name()+" has nothing in flight", func() bool { return b.InFlight() == 0 && b.QueuedTokens() == 0 })
	}
	if got := testutil.ToFloat64(s.m.served.WithLabelValues(fallback, "false")); got != n {
		t.Errorf("served by the fallback: counted %v, want %d", got, n)
	}
	if got := testutil.CollectAndCount(s.m.ttft); got != 1 {
		t.Fatalf("TTFT histogram: %d series", got)
	}
	if got := histogramCount(t, s.m.ttft); got != n {
		t.Errorf("TTFTs observed through the picker: %d, want %d (the fallback's answers are dropped)", got, n)
	}
	s.SetDraining(fallback, false)
	for _, tc := range []struct {
		addr, other string
		learnt      bool
	}{{fallback, chosen, true}, {chosen, fallback, false}} {
		tk, err := s.Scheduler().Pick(&sched.Request{Model: model, PromptTokens: 100, Exclude: []string{tc.other}})
		if err != nil {
			t.Fatal(err)
		}
		if tk.Backend.Name() != tc.addr {
			t.Fatalf("picked %s, want %s", tk.Backend.Name(), tc.addr)
		}
		if tk.Prediction.Ready != tc.learnt {
			t.Errorf("%s (learnt %v): prediction %+v after %d requests it served as the fallback", tc.addr, tc.learnt, tk.Prediction, n)
		}
		tk.End(sched.OutcomeCanceled)
	}
}

// histogram is h's one series, read back.
func histogram(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(fmt.Errorf("reading the histogram: %w", err))
	}
	return m.GetHistogram()
}

// histogramCount is h's number of observations.
func histogramCount(t *testing.T, h prometheus.Histogram) int {
	return int(histogram(t, h).GetSampleCount())
}

// histogramMean is h's mean observation.
func histogramMean(t *testing.T, h prometheus.Histogram) float64 {
	m := histogram(t, h)
	return m.GetSampleSum() / float64(m.GetSampleCount())
}

// TestTransitFromResponseHeaders: the simulator answers a stream's
// headers before it queues the request (as vLLM does), and the picker,
// told of them by the data plane's response-headers message, learns the
// endpoint's transit: positive, and less than any of its TTFTs.
func TestTransitFromResponseHeaders(t *testing.T) {
	engines := startEngines(t, 1, nil)
	addr := hostPort(engines[0].URL())
	s, env := startPicker(t, Options{Seed: 1}, []Endpoint{{Addr: addr}})
	waitReady(t, s)
	model := engines[0].ModelName()
	for i := range 4 {
		if o := env.mustDo(call{body: chatBody(model, prefixPrompt(i), "hi")}); o.status != 200 {
			t.Fatalf("request %d: status %d", i, o.status)
		}
	}
	b := s.Scheduler().Backends()[0]
	eventually(t, "nothing in flight", func() bool { return b.InFlight() == 0 })
	if d, mean := b.Transit(), histogramMean(t, s.m.ttft); d <= 0 || d.Seconds() >= mean {
		t.Errorf("transit %v; want more than 0 and less than the mean TTFT, %.4f s", d, mean)
	}
}

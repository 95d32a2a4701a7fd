package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestQuantileMatchesNumpyDefault(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ q, want float64 }{
		{0, 1}, {0.5, 5.5}, {0.9, 9.1}, {0.95, 9.55}, {0.99, 9.91}, {1, 10},
	} {
		if got := Quantile(xs, tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Error("Quantile of nothing should be NaN")
	}
}

// An infinite value (a request that never got its first token, counted
// as unboundedly slow) must come through a quantile as itself, not as the
// NaN that ∞ − ∞ or 0 × ∞ make.
func TestQuantileInfinite(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{1, 2, inf}, 0.5, 2},      // on a rank: that value
		{[]float64{1, inf}, 0.5, inf},       // between a number and ∞
		{[]float64{1, inf, inf}, 0.75, inf}, // between two ∞
		{[]float64{1, inf, inf}, 0.5, inf},  // on an ∞ rank
		{[]float64{1, 2, 3}, 0.25, 1.5},     // finite: unchanged
	} {
		if got := Quantile(tc.xs, tc.q); got != tc.want {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	m := Describe([]float64{4, 2, math.NaN(), 6, 8}, DescribeOptions{CI: true, Seed: 1})
	if m.Count != 4 || m.Mean != 5 || m.Min != 2 || m.Max != 8 || m.P50 != 5 {
		t.Fatalf("unexpected %+v", m)
	}
	if want := math.Sqrt(20.0 / 3); math.Abs(m.Std-want) > 1e-12 {
		t.Fatalf("std %v, want %v", m.Std, want)
	}
	for _, k := range []string{"mean", "p50", "p90", "p95", "p99", "p99_9"} {
		ci, ok := m.CI95[k]
		if !ok || ci[0] > ci[1] {
			t.Fatalf("CI %s = %v (present %v)", k, ci, ok)
		}
	}
}

// Coverage: over many synthetic samples from a known distribution, the 95%
// intervals must contain the true value close to 95% of the time.
func TestCIsCoverTruthAtStatedRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	const trials, n = 200, 200
	// Exponential(1): mean 1, p90 = ln 10, p50 = ln 2.
	truth := map[string]float64{"mean": 1, "p50": math.Ln2, "p90": math.Log(10)}
	hits := map[string]int{}
	xs := make([]float64, n)
	for trial := range trials {
		for i := range xs {
			xs[i] = rng.ExpFloat64()
		}
		m := Describe(xs, DescribeOptions{CI: true, Seed: int64(trial), Resamples: 300})
		for k, v := range truth {
			if ci := m.CI95[k]; ci[0] <= v && v <= ci[1] {
				hits[k]++
			}
		}
	}
	for k := range truth {
		rate := float64(hits[k]) / trials
		// Binomial sd at 95% over 200 trials is ~1.5%; bootstrap intervals of
		// a skewed mean run a little short. Accept 88–99.5%.
		if rate < 0.88 || rate > 0.995 {
			t.Errorf("%s: coverage %.3f, want ≈0.95", k, rate)
		}
	}
}

func TestQuantileCIBracketsEstimate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]float64, 1000)
	for i := range xs {
		xs[i] = rng.NormFloat64()
	}
	slices.Sort(xs)
	for _, q := range []float64{0.01, 0.5, 0.95, 0.999} {
		ci := QuantileCI(xs, q, 0.95)
		est := Quantile(xs, q)
		if !(ci[0] <= est && est <= ci[1]) {
			t.Errorf("q=%v: CI %v does not contain estimate %v", q, ci, est)
		}
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(i int, ttft, e2e time.Duration, out int, class string) record.Record {
		r := record.Record{Index: i, Sent: t0.Add(time.Duration(i) * time.Second), OutputTokensUsage: out, ErrorClass: class}
		r.Intended = r.Sent
		if class == "" {
			r.FirstToken = r.Sent.Add(ttft)
			r.FirstByte = r.Sent.Add(ttft / 2)
		}
		r.End = r.Sent.Add(e2e)
		r.ITLMs = []float64{10, 20}
		r.Finalize()
		return r
	}
	recs := []record.Record{
		mk(0, 100*time.Millisecond, time.Second, 11, ""),
		mk(1, 200*time.Millisecond, time.Second, 11, ""),
		mk(2, 0, time.Second, 0, record.ErrHTTPStatus),
	}
	w := mk(3, time.Millisecond, time.Second, 5, "")
	w.Warmup = true
	recs = append(recs, w)
	s := Summarize(recs, SummaryOptions{Source: "bench"})
	if s.Requests.Total != 3 || s.Requests.Completed != 2 || s.Requests.Failed != 1 || s.Requests.Warmup != 1 {
		t.Fatalf("requests %+v", s.Requests)
	}
	if s.Requests.Errors[record.ErrHTTPStatus] != 1 {
		t.Fatalf("errors %+v", s.Requests.Errors)
	}
	if s.TTFT.Mean != 150 || s.TTFT.Count != 2 {
		t.Fatalf("ttft %+v", s.TTFT)
	}
	if s.TPOT.Mean != 85 { // (1000-100)/10, (1000-200)/10
		t.Fatalf("tpot %+v", s.TPOT)
	}
	if s.ITL.Count != 4 || s.ITL.Mean != 15 {
		t.Fatalf("itl %+v", s.ITL)
	}
	// Window: first send at t0, last end at t0+3s.
	if s.DurationS != 3 || math.Abs(s.Throughput.OutputTokensPerS-22.0/3) > 1e-9 {
		t.Fatalf("duration %v throughput %+v", s.DurationS, s.Throughput)
	}
}

// TestSummarizeReadDelay: the client's read delay of kernel-stamped first
// tokens is summarised, and a large one is warned about.
func TestSummarizeReadDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(delay float64, clock string) record.Record {
		r := record.Record{Sent: t0, FirstToken: t0.Add(50 * time.Millisecond), End: t0.Add(time.Second),
			ArrivalClock: clock, FirstTokenReadDelayMs: delay}
		r.Finalize()
		return r
	}
	warned := func(s record.Summary) bool {
		for _, w := range s.Warnings {
			if strings.Contains(w, "read first tokens") {
				return true
			}
		}
		return false
	}
	quiet := Summarize([]record.Record{mk(0.1, record.ClockKernel), mk(0.3, record.ClockKernel), mk(40, "")}, SummaryOptions{NoCI: true})
	if quiet.ReadDelay.Count != 2 || math.Abs(quiet.ReadDelay.Max-0.3) > 1e-12 || warned(quiet) {
		t.Errorf("read delay %+v, warnings %q; want 2 kernel-stamped values, no warning", quiet.ReadDelay, quiet.Warnings)
	}
	busy := Summarize([]record.Record{mk(0.1, record.ClockKernel), mk(12, record.ClockKernel)}, SummaryOptions{NoCI: true})
	if !warned(busy) {
		t.Errorf("no warning for a 12 ms read delay: %q", busy.Warnings)
	}
	if none := Summarize([]record.Record{mk(0, "")}, SummaryOptions{NoCI: true}); none.ReadDelay.Count != 0 {
		t.Errorf("read delay summarised without kernel stamps: %+v", none.ReadDelay)
	}
}

func TestSummarizeSketchFallback(t *testing.T) {
	r := record.Record{Sent: time.Unix(0, 0), FirstToken: time.Unix(0, 1e6), End: time.Unix(1, 0)}
	for i := range 1000 {
		r.ITLMs = append(r.ITLMs, float64(i+1))
	}
	r.Finalize()
	s := Summarize([]record.Record{r}, SummaryOptions{MaxITLSamples: 100, NoCI: true})
	if s.ITL.Count != 1000 || math.Abs(s.ITL.P50-500)/500 > 0.02 || len(s.Warnings) == 0 {
		t.Fatalf("sketch ITL %+v warnings %v", s.ITL, s.Warnings)
	}
}

func BenchmarkSummarize10k(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	recs := make([]record.Record, 10000)
	t0 := time.Unix(0, 0)
	for i := range recs {
		r := &recs[i]
		r.Sent = t0.Add(time.Duration(i) * time.Millisecond)
		r.FirstToken = r.Sent.Add(time.Duration(50+rng.IntN(50)) * time.Millisecond)
		r.End = r.FirstToken.Add(time.Second)
		r.ITLMs = make([]float64, 100)
		for j := range r.ITLMs {
			r.ITLMs[j] = 10 + rng.Float64()
		}
		r.OutputEvents = 101
		r.Finalize()
	}
	b.ResetTimer()
	for b.Loop() {
		Summarize(recs, SummaryOptions{})
	}
}

package stats

import (
	"math"

	"github.com/ttft-dev/ttft/internal/record"
)

// DescribeOptions controls Describe.
type DescribeOptions struct {
	// CI asks for 95% confidence intervals.
	CI bool
	// Seed makes the bootstrap of the mean repeatable.
	Seed int64
	// Resamples for the bootstrap of the mean (default 1000).
	Resamples int
}

// Quantile returns the q-quantile (0..1) of sorted data by linear
// interpolation between closest ranks (type 7, as numpy's default), so
// results match what users get from their own scripts.
func Quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	switch {
	case n == 0:
		return math.NaN()
	case n == 1 || q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[n-1]
	}
	h := q * float64(n-1)
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= n {
		return sorted[n-1]
	}
	return Lerp(sorted[i], sorted[i+1], h-lo)
}

// Lerp interpolates from a to b by t in [0, 1), as a quantile between
// two order statistics does. Equal ends, or t = 0, give a itself, so that
// infinite values (an unbounded latency) come through instead of turning
// into NaN as ∞ − ∞ or 0 × ∞ would.
func Lerp(a, b, t float64) float64 {
	if t == 0 || a == b {
		return a
	}
	return a + t*(b-a)
}

// quantileStats lists the percentiles every Metric carries.
var quantileStats = []struct {
	name string
	q    float64
}{{"p50", 0.50}, {"p90", 0.90}, {"p95", 0.95}, {"p99", 0.99}, {"p99_9", 0.999}}

// Describe summarises xs (which it does not modify). NaNs are ignored.
func Describe(xs []float64, opt DescribeOptions) record.Metric {
	return describeSorted(sortedCopy(xs), opt)
}

func describeSorted(s []float64, opt DescribeOptions) record.Metric {
	n := len(s)
	if n == 0 {
		return record.Metric{}
	}
	// Welford for a stable variance.
	var mean, m2 float64
	for i, x := range s {
		d := x - mean
		mean += d / float64(i+1)
		m2 += d * (x - mean)
	}
	std := 0.0
	if n > 1 {
		std = math.Sqrt(m2 / float64(n-1))
	}
	m := record.Metric{
		Count: n, Mean: mean, Std: std, Min: s[0], Max: s[n-1],
		P50: Quantile(s, .50), P90: Quantile(s, .90), P95: Quantile(s, .95),
		P99: Quantile(s, .99), P999: Quantile(s, .999),
	}
	if opt.CI && n >= 2 {
		m.CI95 = make(map[string][2]float64, 1+len(quantileStats))
		m.CI95["mean"] = BootstrapMeanCI(s, 0.95, opt.Resamples, opt.Seed)
		for _, qs := range quantileStats {
			m.CI95[qs.name] = QuantileCI(s, qs.q, 0.95)
		}
	}
	return m
}

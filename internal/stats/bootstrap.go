package stats

import (
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mathext"
)

// BootstrapMeanCI is the percentile-bootstrap confidence interval of the
// mean. Above maxBootstrapN samples it uses the normal approximation the
// bootstrap converges to, keeping summaries of huge runs fast.
func BootstrapMeanCI(xs []float64, level float64, resamples int, seed int64) [2]float64 {
	n := len(xs)
	if n < 2 {
		if n == 1 {
			return [2]float64{xs[0], xs[0]}
		}
		return [2]float64{math.NaN(), math.NaN()}
	}
	if resamples <= 0 {
		resamples = 1000
	}
	alpha := (1 - level) / 2
	if n > maxBootstrapN {
		var mean, m2 float64
		for i, x := range xs {
			d := x - mean
			mean += d / float64(i+1)
			m2 += d * (x - mean)
		}
		se := math.Sqrt(m2/float64(n-1)) / math.Sqrt(float64(n))
		z := normalQuantile(1 - alpha)
		return [2]float64{mean - z*se, mean + z*se}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7474667462)) // "ttftb"
	means := make([]float64, resamples)
	for b := range means {
		var sum float64
		for range n {
			sum += xs[rng.IntN(n)]
		}
		means[b] = sum / float64(n)
	}
	slices.Sort(means)
	return [2]float64{Quantile(means, alpha), Quantile(means, 1-alpha)}
}

const maxBootstrapN = 50_000

// QuantileCI is the percentile-bootstrap confidence interval of the
// q-quantile of sorted data, computed exactly rather than by resampling: the
// k-th order statistic of a bootstrap resample is at most x(j) exactly when
// at least k of the n draws land in the j smallest values, a Binomial(n, j/n)
// event. Inverting that distribution gives the bootstrap interval with no
// Monte-Carlo noise and O(log n) work.
func QuantileCI(sorted []float64, q, level float64) [2]float64 {
	n := len(sorted)
	if n == 0 {
		return [2]float64{math.NaN(), math.NaN()}
	}
	if n == 1 {
		return [2]float64{sorted[0], sorted[0]}
	}
	alpha := (1 - level) / 2
	// Rank of the sample quantile (1-based, rounded to the nearest order
	// statistic of the interpolated estimate).
	k := int(math.Round(q*float64(n-1))) + 1
	// cdf(j) = P(X*(k) <= x(j)) = P(Bin(n, j/n) >= k), increasing in j.
	cdf := func(j int) float64 {
		if j >= n {
			return 1
		}
		p := float64(j) / float64(n)
		// P(Bin(n,p) >= k) = I_p(k, n-k+1).
		return mathext.RegIncBeta(float64(k), float64(n-k+1), p)
	}
	search := func(target float64) int {
		lo, hi := 1, n
		for lo < hi {
			mid := (lo + hi) / 2
			if cdf(mid) >= target {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return lo
	}
	lo := search(alpha)
	hi := search(1 - alpha)
	return [2]float64{sorted[lo-1], sorted[hi-1]}
}

// normalQuantile is the standard normal inverse CDF.
func normalQuantile(p float64) float64 {
	return -math.Sqrt2 * math.Erfcinv(2*p)
}

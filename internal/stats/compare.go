package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// CompareResamples is the number of bootstrap resamples CompareSamples
// draws: enough for a stable 95% percentile interval (the 2.5% tail holds 50
// resamples) while staying fast on samples of tens of thousands.
const CompareResamples = 2000

// MinCompareN is the smallest sample CompareSamples will call a difference
// significant with.
const MinCompareN = 10

// CompareStats are the statistics CompareSamples understands.
var CompareStats = []string{"mean", "p50", "p90", "p95", "p99"}

// CheckStat returns an error naming the accepted statistics when stat is not
// one CompareSamples understands; CLIs call it while parsing flags.
func CheckStat(stat string) error {
	if _, ok := statQuantile(stat); ok || stat == "mean" {
		return nil
	}
	return fmt.Errorf("unknown statistic %q (want one of %s)", stat, strings.Join(CompareStats, ", "))
}

// statQuantile maps "p95" to 0.95.
func statQuantile(stat string) (float64, bool) {
	switch stat {
	case "p50", "median":
		return 0.50, true
	case "p90":
		return 0.90, true
	case "p95":
		return 0.95, true
	case "p99":
		return 0.99, true
	}
	return 0, false
}

// Comparison is the difference B − A of one statistic between two samples
// (typically TTFT in milliseconds of two runs).
type Comparison struct {
	Stat string `json:"stat"`
	NA   int    `json:"n_a"`
	NB   int    `json:"n_b"`
	// A and B are the statistic of each sample; Diff = B − A and
	// RelDiff = Diff / A (NaN when A is 0).
	A       float64 `json:"a"`
	B       float64 `json:"b"`
	Diff    float64 `json:"diff"`
	RelDiff float64 `json:"rel_diff"`
	// CI95 is the percentile-bootstrap 95% interval of Diff, resampling each
	// sample independently (Resamples times, seeded by Seed).
	CI95      [2]float64 `json:"ci95"`
	Resamples int        `json:"resamples"`
	Seed      int64      `json:"seed"`
	// Mann–Whitney U test of "the two distributions are the same" against a
	// shift either way: U counts pairs (a, b) with b < a (ties count one
	// half), Z is its normal approximation with tie and continuity
	// correction, PValue is two-sided. ProbBLess = U / (NA·NB) is the
	// probability that a random B value is below a random A value.
	U         float64 `json:"u"`
	Z         float64 `json:"z"`
	PValue    float64 `json:"p_value"`
	ProbBLess float64 `json:"prob_b_less"`
	// Significant is true when the bootstrap interval excludes zero: the
	// verdict is about the statistic asked for (a P95 can move while the
	// medians stay put), the U test is reported beside it.
	Significant bool `json:"significant"`
	// Warning is set when the samples are too small for the interval to be
	// trusted (fewer than MinCompareN values in one); Significant is then
	// false whatever the interval says.
	Warning string `json:"warning,omitempty"`
	// Err is set (and the numbers are NaN) when the comparison could not be
	// made: an unknown statistic, an empty sample, a NaN or infinite value.
	Err error `json:"-"`
}

// CompareSamples compares statistic stat ("mean", "p50", "p90", "p95",
// "p99") of samples a and b. It is deterministic for a given seed. The
// inputs are not modified.
func CompareSamples(a, b []float64, stat string, seed int64) Comparison {
	return compareSamples(a, b, stat, seed, CompareResamples)
}

func compareSamples(a, b []float64, stat string, seed int64, resamples int) Comparison {
	nan := math.NaN()
	c := Comparison{Stat: stat, NA: len(a), NB: len(b), Seed: seed, Resamples: resamples,
		A: nan, B: nan, Diff: nan, RelDiff: nan, CI95: [2]float64{nan, nan},
		U: nan, Z: nan, PValue: nan, ProbBLess: nan}
	if err := CheckStat(stat); err != nil {
		c.Err = err
		return c
	}
	for name, xs := range map[string][]float64{"A": a, "B": b} {
		if len(xs) == 0 {
			c.Err = fmt.Errorf("comparing %s: sample %s is empty", stat, name)
			return c
		}
		for i, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				c.Err = fmt.Errorf("comparing %s: sample %s value %d is %v", stat, name, i, x)
				return c
			}
		}
	}
	sa, sb := slices.Clone(a), slices.Clone(b)
	slices.Sort(sa)
	slices.Sort(sb)
	ea, eb := newResampler(sa, stat), newResampler(sb, stat)
	c.A, c.B = ea.full(), eb.full()
	c.Diff = c.B - c.A
	if c.A != 0 {
		c.RelDiff = c.Diff / c.A
	}

	src := rand.NewPCG(uint64(seed), 0x5eed_c0ffee)
	rng := rand.New(src)
	diffs := make([]float64, resamples)
	for i := range diffs {
		diffs[i] = eb.resample(rng, src) - ea.resample(rng, src)
	}
	slices.Sort(diffs)
	c.CI95 = [2]float64{Quantile(diffs, 0.025), Quantile(diffs, 0.975)}
	c.Significant = c.CI95[0] > 0 || c.CI95[1] < 0
	if n := min(len(a), len(b)); n < MinCompareN {
		// A bootstrap of a handful of values has a degenerate, far too
		// narrow distribution: one value per run gives a zero-width
		// interval around any difference.
		c.Significant = false
		c.Warning = fmt.Sprintf("too few values to compare (%d and %d; want at least %d each)", len(a), len(b), MinCompareN)
	}

	m := mannWhitneySorted(sa, sb)
	c.U, c.Z, c.PValue = m.U, m.Z, m.PValue
	c.ProbBLess = m.U / (float64(len(a)) * float64(len(b)))
	return c
}

// Verdict says in one sentence what the comparison means, for latency
// metrics where lower is better: "B is faster than A at TTFT P95 by 43 ms,
// 95% CI 31–55 ms (Mann–Whitney p=0.002)" or "no significant difference
// between A and B at TTFT P95 (B − A = 3 ms, 95% CI −4–9 ms, ...)".
// metric names the latency ("TTFT"); it may be empty.
func (c Comparison) Verdict(nameA, nameB, metric string) string {
	at := strings.ToUpper(c.Stat)
	if c.Stat == "mean" {
		at = "mean"
	}
	if metric != "" {
		at = metric + " " + at
	}
	if c.Err != nil {
		return fmt.Sprintf("cannot compare %s and %s at %s: %v", nameA, nameB, at, c.Err)
	}
	p := fmtP(c.PValue)
	if c.Warning != "" {
		return fmt.Sprintf("cannot tell %s and %s apart at %s: %s", nameA, nameB, at, c.Warning)
	}
	if !c.Significant {
		return fmt.Sprintf("no significant difference between %s and %s at %s (%s − %s = %s ms, 95%% CI %s to %s ms; Mann–Whitney %s)",
			nameA, nameB, at, nameB, nameA, FormatMs(c.Diff), FormatMs(c.CI95[0]), FormatMs(c.CI95[1]), p)
	}
	if c.Diff < 0 {
		return fmt.Sprintf("%s is faster than %s at %s by %s ms, 95%% CI %s–%s ms (Mann–Whitney %s)",
			nameB, nameA, at, FormatMs(-c.Diff), FormatMs(-c.CI95[1]), FormatMs(-c.CI95[0]), p)
	}
	return fmt.Sprintf("%s is faster than %s at %s by %s ms, 95%% CI %s–%s ms (Mann–Whitney %s)",
		nameA, nameB, at, FormatMs(c.Diff), FormatMs(c.CI95[0]), FormatMs(c.CI95[1]), p)
}

// FormatMs prints milliseconds with precision that suits their size: 430,
// 43.1, 4.25; "-" for NaN. Every table in ttft uses it so figures read alike.
func FormatMs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	a := math.Abs(v)
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtP(p float64) string {
	if p < 0.001 {
		return "p<0.001"
	}
	return fmt.Sprintf("p=%.3f", p)
}

// resampler computes one statistic on bootstrap resamples of a sorted
// sample without materialising them. A quantile of a resample depends only
// on how many draws fall at or below each sorted value, so its order
// statistics are found by descending a binary split of the sample: the
// number of the m draws that land in the left half of a range is
// Binomial(m, left/size), and the halves are then independent. One resample
// costs O(log n) binomial draws instead of n uniform draws and a sort,
// which keeps per-token samples (ITL, millions of values) fast.
type resampler struct {
	sorted []float64
	mean   bool
	q      float64
	// Sum and sum of squares for the large-sample mean.
	sum, sumSq float64
}

// meanBootstrapMax is the sample size above which the mean's bootstrap
// distribution is replaced by its normal limit (the bootstrap of a mean of
// this many values is normal to well within the resampling noise, and an
// O(n) resample of millions of values would take seconds).
const meanBootstrapMax = 20000

func newResampler(sorted []float64, stat string) *resampler {
	q, _ := statQuantile(stat)
	r := &resampler{sorted: sorted, mean: stat == "mean", q: q}
	for _, x := range sorted {
		r.sum += x
		r.sumSq += x * x
	}
	return r
}

func (r *resampler) full() float64 {
	if r.mean {
		return r.sum / float64(len(r.sorted))
	}
	return Quantile(r.sorted, r.q)
}

// normalMean reports whether the mean uses the normal limit, and its
// standard error.
func (r *resampler) normalMean() (bool, float64) {
	n := float64(len(r.sorted))
	if !r.mean || len(r.sorted) <= meanBootstrapMax {
		return false, 0
	}
	m := r.sum / n
	v := math.Max(0, (r.sumSq-n*m*m)/(n-1))
	return true, math.Sqrt(v / n)
}

func (r *resampler) resample(rng *rand.Rand, src rand.Source) float64 {
	n := len(r.sorted)
	if r.mean {
		if ok, se := r.normalMean(); ok {
			return r.full() + se*rng.NormFloat64()
		}
		s := 0.0
		for range n {
			s += r.sorted[rng.IntN(n)]
		}
		return s / float64(n)
	}
	// Type-7 quantile: order statistics lo and lo+1 of the resample.
	h := r.q * float64(n-1)
	lo := int(math.Floor(h))
	frac := h - float64(lo)
	if frac == 0 || lo+1 >= n {
		return r.sorted[kthOfResample(src, 0, n, n, lo)]
	}
	a, b := 0, n  // range of sorted indices
	m, k := n, lo // m draws in [a,b); we want draws k and k+1 (0-based)
	for b-a > 1 {
		mid := a + (b-a)/2
		left := binomial(src, m, float64(mid-a)/float64(b-a))
		switch {
		case k+1 < left:
			b, m = mid, left
		case k >= left:
			a, k, m = mid, k-left, m-left
		default:
			// Draw k is the largest in the left half, k+1 the smallest in
			// the right; given the split the halves are independent.
			xlo := r.sorted[kthOfResample(src, a, mid, left, left-1)]
			xhi := r.sorted[kthOfResample(src, mid, b, m-left, 0)]
			return xlo + frac*(xhi-xlo)
		}
	}
	// Both draws are copies of one value.
	return r.sorted[a]
}

// kthOfResample returns the sorted index of the k-th smallest (0-based) of
// m draws uniform over indices [a, b).
func kthOfResample(src rand.Source, a, b, m, k int) int {
	for b-a > 1 {
		mid := a + (b-a)/2
		left := binomial(src, m, float64(mid-a)/float64(b-a))
		if k < left {
			b, m = mid, left
		} else {
			a, k, m = mid, k-left, m-left
		}
	}
	return a
}

func binomial(src rand.Source, n int, p float64) int {
	switch {
	case p <= 0 || n == 0:
		return 0
	case p >= 1:
		return n
	}
	return int(distuv.Binomial{N: float64(n), P: p, Src: src}.Rand())
}

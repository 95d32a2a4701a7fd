package stats

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
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

// CompareStats are the statistics CompareSamples understands: a mean or a
// quantile (compared by the bootstrap) or "distribution" (the Mann–Whitney
// U test of the whole distributions).
var CompareStats = []string{"mean", "p50", "p90", "p95", "p99", StatDistribution}

// StatDistribution asks CompareSamples for the rank test of the two
// distributions rather than the difference of one statistic.
const StatDistribution = "distribution"

// Comparison.Method values: which test a row's p-value and verdict are from.
const (
	MethodBootstrap   = "bootstrap"
	MethodMannWhitney = "mann-whitney"
)

// CheckStat returns an error naming the accepted statistics when stat is not
// one CompareSamples understands; CLIs call it while parsing flags.
func CheckStat(stat string) error {
	if _, ok := statQuantile(stat); ok || stat == "mean" || stat == StatDistribution {
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

// Comparison is one row of a comparison of two samples (typically TTFT in
// milliseconds of two runs): either the difference B − A of one statistic
// (a mean or a quantile), tested by the bootstrap, or (Stat
// "distribution") a Mann–Whitney U test of the two distributions. Each row
// carries its own test: PValue, Significant and the verdict sentence all
// come from it, so they cannot disagree. Figures a row does not have are
// NaN (null in JSON).
type Comparison struct {
	Stat string `json:"stat"`
	// Method is the test behind PValue and Significant: MethodBootstrap
	// for a statistic's difference, MethodMannWhitney for "distribution".
	Method string `json:"method"`
	NA     int    `json:"n_a"`
	NB     int    `json:"n_b"`
	// A and B are the statistic of each sample; Diff = B − A and
	// RelDiff = Diff / A (NaN when A is 0). NaN in a distribution row.
	A       float64 `json:"a"`
	B       float64 `json:"b"`
	Diff    float64 `json:"diff"`
	RelDiff float64 `json:"rel_diff"`
	// CI95 is the percentile-bootstrap 95% interval of Diff, resampling each
	// sample independently (Resamples times, seeded by Seed).
	CI95      [2]float64 `json:"ci95"`
	Resamples int        `json:"resamples,omitempty"`
	Seed      int64      `json:"seed"`
	// PValue is two-sided. In a bootstrap row it is the smallest level at
	// which the percentile interval excludes 0: twice the share of
	// resampled differences on the far side of zero (read off the same
	// interpolated quantiles as CI95), so PValue < 0.05 exactly when CI95
	// excludes 0. Its resolution is about 1/Resamples. In a distribution
	// row it is the Mann–Whitney p.
	PValue float64 `json:"p_value"`
	// Mann–Whitney U test of "the two distributions are the same" against a
	// shift either way (distribution rows only): U counts pairs (a, b) with
	// b < a (ties count one half), Z is its normal approximation with tie
	// and continuity correction. ProbBLess = U / (NA·NB) is the probability
	// that a random B value is below a random A value (ties half).
	U         float64 `json:"u"`
	Z         float64 `json:"z"`
	ProbBLess float64 `json:"prob_b_less"`
	// Significant is PValue < 0.05 of this row's own test: for a
	// statistic, that its bootstrap interval excludes zero (a P95 can move
	// while the medians stay put); for a distribution, that the rank test
	// rejects equal distributions.
	Significant bool `json:"significant"`
	// Warning is set when the samples are too small for the test to be
	// trusted (fewer than MinCompareN values in one); Significant is then
	// false and PValue NaN whatever the resamples say.
	Warning string `json:"warning,omitempty"`
	// Err is set (and the numbers are NaN) when the comparison could not be
	// made: an unknown statistic, an empty sample, a NaN or infinite value.
	Err error `json:"-"`
}

// MarshalJSON writes NaN and infinite figures (what a row does not have,
// or a comparison that could not be made) as null, which encoding/json
// would otherwise refuse, and the error as "error".
func (c Comparison) MarshalJSON() ([]byte, error) {
	type plain Comparison
	fin := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	var ci *[2]float64
	if fin(c.CI95[0]) != nil && fin(c.CI95[1]) != nil {
		ci = &c.CI95
	}
	errText := ""
	if c.Err != nil {
		errText = c.Err.Error()
	}
	return json.Marshal(struct {
		plain
		A         *float64    `json:"a"`
		B         *float64    `json:"b"`
		Diff      *float64    `json:"diff"`
		RelDiff   *float64    `json:"rel_diff"`
		CI95      *[2]float64 `json:"ci95"`
		PValue    *float64    `json:"p_value"`
		U         *float64    `json:"u"`
		Z         *float64    `json:"z"`
		ProbBLess *float64    `json:"prob_b_less"`
		Error     string      `json:"error,omitempty"`
	}{plain(c), fin(c.A), fin(c.B), fin(c.Diff), fin(c.RelDiff), ci, fin(c.PValue), fin(c.U), fin(c.Z), fin(c.ProbBLess), errText})
}

// UnmarshalJSON reads what MarshalJSON writes (null as NaN).
func (c *Comparison) UnmarshalJSON(raw []byte) error {
	type plain Comparison
	var v struct {
		plain
		A         *float64    `json:"a"`
		B         *float64    `json:"b"`
		Diff      *float64    `json:"diff"`
		RelDiff   *float64    `json:"rel_diff"`
		CI95      *[2]float64 `json:"ci95"`
		PValue    *float64    `json:"p_value"`
		U         *float64    `json:"u"`
		Z         *float64    `json:"z"`
		ProbBLess *float64    `json:"prob_b_less"`
		Error     string      `json:"error"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	val := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*c = Comparison(v.plain)
	c.A, c.B, c.Diff, c.RelDiff = val(v.A), val(v.B), val(v.Diff), val(v.RelDiff)
	c.PValue, c.U, c.Z, c.ProbBLess = val(v.PValue), val(v.U), val(v.Z), val(v.ProbBLess)
	c.CI95 = [2]float64{math.NaN(), math.NaN()}
	if v.CI95 != nil {
		c.CI95 = *v.CI95
	}
	if v.Error != "" {
		c.Err = errors.New(v.Error)
	}
	return nil
}

// CompareSamples compares statistic stat ("mean", "p50", "p90", "p95",
// "p99") of samples a and b by the bootstrap, or with stat "distribution"
// their distributions by the Mann–Whitney U test. It is deterministic for
// a given seed. The inputs are not modified.
func CompareSamples(a, b []float64, stat string, seed int64) Comparison {
	return compareSamples(a, b, stat, seed, CompareResamples)
}

func compareSamples(a, b []float64, stat string, seed int64, resamples int) Comparison {
	nan := math.NaN()
	c := Comparison{Stat: stat, Method: MethodBootstrap, NA: len(a), NB: len(b), Seed: seed, Resamples: resamples,
		A: nan, B: nan, Diff: nan, RelDiff: nan, CI95: [2]float64{nan, nan},
		U: nan, Z: nan, PValue: nan, ProbBLess: nan}
	if stat == StatDistribution {
		c.Method, c.Resamples, c.Seed = MethodMannWhitney, 0, 0
	}
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
	tooFew := min(len(a), len(b)) < MinCompareN

	if stat == StatDistribution {
		m := mannWhitneySorted(sa, sb)
		c.U, c.Z, c.PValue = m.U, m.Z, m.PValue
		c.ProbBLess = m.U / (float64(len(a)) * float64(len(b)))
		c.Significant = c.PValue < 0.05
		if tooFew {
			// The normal approximation is not accurate below about 10
			// values per sample.
			c.Significant, c.PValue = false, nan
			c.Warning = fmt.Sprintf("too few values to compare (%d and %d; want at least %d each)", len(a), len(b), MinCompareN)
		}
		return c
	}

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
	c.PValue = bootstrapP(diffs)
	// The p-value inverts the same interpolated quantiles as the interval;
	// only rounding at an endpoint that is zero to the last bit could make
	// them disagree, and then the interval decides.
	switch {
	case c.Significant && c.PValue >= 0.05:
		c.PValue = math.Nextafter(0.05, 0)
	case !c.Significant && c.PValue < 0.05:
		c.PValue = 0.05
	}
	if tooFew {
		// A bootstrap of a handful of values has a degenerate, far too
		// narrow distribution: one value per run gives a zero-width
		// interval around any difference.
		c.Significant, c.PValue = false, nan
		c.Warning = fmt.Sprintf("too few values to compare (%d and %d; want at least %d each)", len(a), len(b), MinCompareN)
	}
	return c
}

// bootstrapP is the two-sided bootstrap p-value of "the difference is 0"
// from sorted resampled differences d: the smallest α at which the
// percentile interval [Q(α/2), Q(1−α/2)] excludes 0, where Q is the same
// interpolated quantile function (Quantile) that gives CI95. That is twice
// the share of resamples on the far side of zero, the share read off Q's
// inverse: qLE is the largest q with Q(q) ≤ 0, qGE the smallest with
// Q(q) ≥ 0. Resamples equal to 0 count on both sides.
func bootstrapP(d []float64) float64 {
	n := len(d)
	if n < 2 {
		return math.NaN()
	}
	last := float64(n - 1)
	var qLE, qGE float64
	switch i := sort.Search(n, func(i int) bool { return d[i] > 0 }) - 1; { // last index with d ≤ 0
	case i < 0:
		qLE = 0
	case i == n-1:
		qLE = 1
	default:
		qLE = (float64(i) + (0-d[i])/(d[i+1]-d[i])) / last
	}
	switch j := sort.Search(n, func(i int) bool { return d[i] >= 0 }); { // first index with d ≥ 0
	case j == n:
		qGE = 1
	case j == 0:
		qGE = 0
	default:
		qGE = (float64(j-1) + (0-d[j-1])/(d[j]-d[j-1])) / last
	}
	return math.Max(0, math.Min(1, 2*math.Min(qLE, 1-qGE)))
}

// Verdict says in one sentence what the row means, from the row's own test
// only, for latency metrics where lower is better; the run named first in
// a significant verdict is the faster one:
//
//	B is faster than A at TTFT P95 by 43 ms, 95% CI 31–55 ms (bootstrap p<0.001)
//	no significant difference between A and B at TTFT P95 (B − A = 3 ms, 95% CI -4 to 9 ms; bootstrap p=0.41)
//	B tends to be faster than A at TTFT: a B request is faster than an A request in 62% of pairs (Mann–Whitney p=0.002)
//	no significant difference between the TTFT distributions of A and B (Mann–Whitney p=0.41)
//
// metric names the latency ("TTFT"); it may be empty.
func (c Comparison) Verdict(nameA, nameB, metric string) string {
	at := strings.ToUpper(c.Stat)
	if c.Stat == "mean" {
		at = "mean"
	}
	if c.Stat == StatDistribution {
		at = "the distribution"
		if metric != "" {
			at = "the " + metric + " distribution"
		}
	} else if metric != "" {
		at = metric + " " + at
	}
	if c.Err != nil {
		return fmt.Sprintf("cannot compare %s and %s at %s: %v", nameA, nameB, at, c.Err)
	}
	if c.Warning != "" {
		return fmt.Sprintf("cannot tell %s and %s apart at %s: %s", nameA, nameB, at, c.Warning)
	}
	p := fmtP(c.PValue)
	if c.Stat == StatDistribution {
		of := "distributions"
		if metric != "" {
			of = metric + " distributions"
		}
		if !c.Significant {
			return fmt.Sprintf("no significant difference between the %s of %s and %s (Mann–Whitney %s)", of, nameA, nameB, p)
		}
		on := ""
		if metric != "" {
			on = " at " + metric
		}
		// Name the faster run first, as the statistics' verdicts do.
		if c.ProbBLess > 0.5 {
			return fmt.Sprintf("%s tends to be faster than %s%s: a %s request is faster than a %s request in %.0f%% of pairs (Mann–Whitney %s)",
				nameB, nameA, on, nameB, nameA, 100*c.ProbBLess, p)
		}
		return fmt.Sprintf("%s tends to be faster than %s%s: a %s request is faster than a %s request in %.0f%% of pairs (Mann–Whitney %s)",
			nameA, nameB, on, nameA, nameB, 100*(1-c.ProbBLess), p)
	}
	if !c.Significant {
		return fmt.Sprintf("no significant difference between %s and %s at %s (%s − %s = %s ms, 95%% CI %s to %s ms; bootstrap %s)",
			nameA, nameB, at, nameB, nameA, FormatMs(c.Diff), FormatMs(c.CI95[0]), FormatMs(c.CI95[1]), p)
	}
	// The interval, not the point estimate, says which side of zero the
	// difference is on (they agree but for degenerate quantile resamples).
	if c.CI95[1] < 0 {
		return fmt.Sprintf("%s is faster than %s at %s by %s ms, 95%% CI %s–%s ms (bootstrap %s)",
			nameB, nameA, at, FormatMs(-c.Diff), FormatMs(-c.CI95[1]), FormatMs(-c.CI95[0]), p)
	}
	return fmt.Sprintf("%s is faster than %s at %s by %s ms, 95%% CI %s–%s ms (bootstrap %s)",
		nameA, nameB, at, FormatMs(c.Diff), FormatMs(c.CI95[0]), FormatMs(c.CI95[1]), p)
}

// FormatMs prints milliseconds with precision that suits their size: 430,
// 43.1, 4.25; "-" for NaN. Every table in ttft uses it so figures read alike.
func FormatMs(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	a := math.Abs(v)
	if a < 0.005 {
		return "0.00" // not "-0.00"
	}
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
	if math.IsNaN(p) {
		return "p=-"
	}
	if p < 0.001 {
		return "p<0.001"
	}
	return "p=" + FormatP(p)
}

// FormatP prints a p-value with three decimals, "<0.001" below that and
// "-" for NaN. A p below 0.05 is rounded down, so that it never prints as
// 0.050 next to a verdict that (rightly) calls it significant.
func FormatP(p float64) string {
	switch {
	case math.IsNaN(p):
		return "-"
	case p < 0.001:
		return "<0.001"
	case p < 0.05:
		return fmt.Sprintf("%.3f", math.Floor(p*1000+1e-9)/1000)
	}
	return fmt.Sprintf("%.3f", p)
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

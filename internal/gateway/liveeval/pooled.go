package liveeval

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ttft-dev/ttft/internal/stats"
)

// The seeds of a suite replay the same request sequences for every policy,
// so two policies' runs pair up seed by seed. The functions here compare
// two policies on the requests of all their paired seeds pooled together
// (a P99 of 5 × 400 requests rather than the median of five P99s of 400,
// each the ~4th largest of its run), and bound that comparison with a
// paired bootstrap over the seeds: a resample draws seeds with replacement
// and takes the same draw for both policies, so what a seed's requests
// made hard or easy stays paired, and the interval reflects how much the
// ratio moves when the suite is run on other seeds.

// Bootstrap sets the paired bootstrap over seeds.
type Bootstrap struct {
	// Resamples is how many resamples of the seeds (default 2,000).
	Resamples int
	// Level is the confidence of the interval (default 0.90).
	Level float64
	// Seed seeds the resampling, so that a report is reproducible.
	Seed uint64
	// SeedsOnly resamples the seeds alone. By default each drawn seed's
	// requests are resampled too (paired by request: a seed replays the
	// same requests for every policy), which also counts how much a P99,
	// a few values from the top of each run, moves by chance: with the
	// 3–5 seeds a suite runs, resampling the seeds alone gave intervals
	// that too often missed the ratio other suites measured
	// (docs/routing-evaluation.md).
	SeedsOnly bool
}

func (b Bootstrap) withDefaults() Bootstrap {
	if b.Resamples <= 0 {
		b.Resamples = 2000
	}
	if b.Level <= 0 || b.Level >= 1 {
		b.Level = 0.90
	}
	return b
}

// Interval is a ratio's point estimate and its confidence interval (Lo
// and Hi NaN where there is none: fewer than two seeds).
type Interval struct {
	Point, Lo, Hi float64
}

// pool is one policy's requests over its seeds: every value sorted
// together, with the slot each came from. Slots number the requests of
// all seeds, seed after seed, request j of seed s being slot off[s]+j for
// every policy, so that one set of counts per slot weights two policies'
// pools alike.
type pool struct {
	xs   []float64
	slot []int
}

// slots is the slot layout of seeds: each seed's first slot and length
// (the longer of the policies' lists for that seed).
type slots struct {
	off, n []int
	total  int
}

func layout(lists ...[][]float64) slots {
	var l slots
	for s := range lists[0] {
		m := 0
		for _, seeds := range lists {
			m = max(m, len(seeds[s]))
		}
		l.off, l.n = append(l.off, l.total), append(l.n, m)
		l.total += m
	}
	return l
}

// newPool pools seeds (NaN values, requests one policy's run lacks, left
// out; a failed request is +Inf, the slowest there is).
func newPool(seeds [][]float64, l slots) pool {
	type v struct {
		x    float64
		slot int
	}
	var all []v
	for s, xs := range seeds {
		for j, x := range xs {
			if !math.IsNaN(x) {
				all = append(all, v{x, l.off[s] + j})
			}
		}
	}
	slices.SortFunc(all, func(a, b v) int { return cmp.Compare(a.x, b.x) }) // no NaN left
	p := pool{xs: make([]float64, len(all)), slot: make([]int, len(all))}
	for i, e := range all {
		p.xs[i], p.slot[i] = e.x, e.slot
	}
	return p
}

// quantile is the q-quantile (stats.Quantile's definition) of the
// multiset in which the value in slot i appears count[i] times, without
// building it: an order statistic of the weighted sorted values, found by
// walking from the nearer end (P99 is a few values from the top).
func (p pool) quantile(count []int, q float64) float64 {
	n := 0
	for _, s := range p.slot {
		n += count[s]
	}
	if n == 0 {
		return math.NaN()
	}
	if n == 1 || q <= 0 {
		return p.orderStat(count, n, 0)
	}
	if q >= 1 {
		return p.orderStat(count, n, n-1)
	}
	h := q * float64(n-1)
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= n {
		return p.orderStat(count, n, n-1)
	}
	return stats.Lerp(p.orderStat(count, n, i), p.orderStat(count, n, i+1), h-lo)
}

// orderStat is the k-th smallest (from 0) of the n weighted values.
func (p pool) orderStat(count []int, n, k int) float64 {
	if k < n/2 {
		seen := 0
		for i, x := range p.xs {
			seen += count[p.slot[i]]
			if seen > k {
				return x
			}
		}
	} else {
		seen := 0
		for i := len(p.xs) - 1; i >= 0; i-- {
			seen += count[p.slot[i]]
			if seen > n-1-k {
				return p.xs[i]
			}
		}
	}
	return math.NaN()
}

// PooledQuantile is the q-quantile of all the seeds' values together
// (NaNs left out; +Inf, a failed request, counts as the slowest).
func PooledQuantile(seeds [][]float64, q float64) float64 {
	if len(seeds) == 0 {
		return math.NaN()
	}
	l := layout(seeds)
	return newPool(seeds, l).quantile(ones(l.total), q)
}

func ones(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// PairedRatio compares policy a with policy b on the same seeds: a[s][j]
// and b[s][j] are the TTFTs of seed s's request j under each (NaN where
// a run lacks it, +Inf where it failed). The ratio is of their pooled
// q-quantiles; its interval is the percentile bootstrap of that ratio
// over resamples that draw the seeds with replacement and then (unless
// opt.SeedsOnly) each drawn seed's requests with replacement, the same
// draws for both policies. The interval is widened to take in the point estimate where the percentile
// interval leaves it out (it can, with few seeds and a skewed tail), so an
// interval never contradicts its own estimate; that only makes a verdict
// undecided more often. With one seed and opt.SeedsOnly there is nothing
// to resample: Lo and Hi are NaN.
func PairedRatio(a, b [][]float64, q float64, opt Bootstrap) Interval {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	out := Interval{Point: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	if n == 0 {
		return out
	}
	l := layout(a, b)
	pa, pb := newPool(a, l), newPool(b, l)
	out.Point = pa.quantile(ones(l.total), q) / pb.quantile(ones(l.total), q)
	if (n < 2 && opt.SeedsOnly) || math.IsNaN(out.Point) {
		return out
	}
	opt = opt.withDefaults()
	rng := rand.New(rand.NewPCG(opt.Seed, 0x6c6976656576616c)) // "liveeval"
	count := make([]int, l.total)
	ratios := make([]float64, 0, opt.Resamples)
	for range opt.Resamples {
		clear(count)
		for range n {
			s := rng.IntN(n)
			if opt.SeedsOnly {
				for j := range l.n[s] {
					count[l.off[s]+j]++
				}
				continue
			}
			for range l.n[s] {
				count[l.off[s]+rng.IntN(l.n[s])]++
			}
		}
		r := pa.quantile(count, q) / pb.quantile(count, q)
		if !math.IsNaN(r) {
			ratios = append(ratios, r)
		}
	}
	if len(ratios) == 0 {
		return out
	}
	slices.Sort(ratios)
	alpha := (1 - opt.Level) / 2
	out.Lo = min(stats.Quantile(ratios, alpha), out.Point)
	out.Hi = max(stats.Quantile(ratios, 1-alpha), out.Point)
	return out
}

// Decision is a target's verdict on the evidence of an interval.
type Decision string

const (
	Met       Decision = "met"
	NotMet    Decision = "not met"
	Undecided Decision = "undecided"
	// NoData: the runs the target compares are missing.
	NoData Decision = "–"
)

// Decide judges "ratio ≤ limit": met when the whole interval is at or
// below the limit, not met when it is wholly above, undecided when it
// straddles the limit. Without an interval (one seed) the point decides.
func Decide(iv Interval, limit float64) Decision {
	lo, hi := iv.Lo, iv.Hi
	if math.IsNaN(lo) || math.IsNaN(hi) {
		lo, hi = iv.Point, iv.Point
	}
	switch {
	case math.IsNaN(lo) || math.IsNaN(hi):
		return NoData
	case hi <= limit:
		return Met
	case lo > limit:
		return NotMet
	}
	return Undecided
}

// Combine is the verdict of several targets together: not met if any is
// not met, else undecided if any is, else met (targets without data are
// left out; none at all is NoData).
func Combine(ds ...Decision) Decision {
	out := NoData
	for _, d := range ds {
		switch {
		case d == NotMet:
			return NotMet
		case d == Undecided:
			out = Undecided
		case d == Met && out == NoData:
			out = Met
		}
	}
	return out
}

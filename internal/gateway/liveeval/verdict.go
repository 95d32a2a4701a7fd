package liveeval

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// Issue 17's targets for the default policy's P99.
const (
	// LimitVsBest: at most 1.10× the best single-signal policy's.
	LimitVsBest = 1.10
	// LimitVsRR: at most a third of round-robin's, where caching matters.
	LimitVsRR = 1.0 / 3
)

// PooledVerdict is the check of the targets on one fleet with the seeds'
// requests pooled, each ratio with its paired bootstrap interval.
type PooledVerdict struct {
	Fleet string
	// Seeds is how many seeds the default ran (each ratio pairs the
	// seeds both its policies ran).
	Seeds int
	// Default, BestP99 and RR are pooled P99s over all each policy's
	// seeds. Best is the single-signal policy (prefix-affinity or
	// least-outstanding) with the lower pooled P99 on the default's
	// seeds.
	Default, BestP99, RR time.Duration
	Best                 string
	VsBest, VsRR         Interval
	CacheMatters         bool
	// BestDecision and RRDecision judge each target (RRDecision NoData
	// where the ⅓ target does not apply); Decision both together.
	BestDecision, RRDecision, Decision Decision
}

// ttftsMs is the client-side TTFTs (ms) of each result's scored
// requests, one slice per result, a failed request's +Inf (scoredMs);
// nil when a result carries none.
func ttftsMs(rs []Result) [][]float64 {
	var out [][]float64
	for _, r := range rs {
		if len(r.Requests) == 0 {
			return nil
		}
		var xs []float64
		for _, q := range r.Requests {
			xs = append(xs, scoredMs(q))
		}
		out = append(out, xs)
	}
	return out
}

// scoredMs is a scored request's TTFT in milliseconds for the pooled
// figures, +Inf where it failed: unbounded, the slowest there is. Leaving
// failures out, as the per-run P99s do (their "failed" column counts
// them), would let a policy that fails requests read faster than one that
// serves them late; with failures past 1 % of a pool its P99 is unbounded
// (printed ∞).
func scoredMs(q Scored) float64 {
	if q.TTFT <= 0 {
		return math.Inf(1)
	}
	return ms(q.TTFT)
}

// unbounded is the duration an infinite pooled quantile is kept as
// (msDur), and fmtMs prints as ∞.
const unbounded = time.Duration(math.MaxInt64)

func msDur(v float64) time.Duration {
	switch {
	case math.IsNaN(v):
		return 0
	case math.IsInf(v, 1):
		return unbounded
	}
	return time.Duration(v * float64(time.Millisecond))
}

// fmtMs prints a pooled figure in milliseconds, ∞ where failures made it
// unbounded.
func fmtMs(d time.Duration) string {
	if d == unbounded {
		return "∞"
	}
	return fmt.Sprintf("%.1f", ms(d))
}

// bySeed is one (fleet, policy)'s scored requests by seed.
type bySeed map[uint64][]Scored

func (m bySeed) seeds() []uint64 {
	var out []uint64
	for s := range m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// paired lists a's and b's TTFTs (ms) on the seeds both ran, in seed
// order, request by request: the same request (by ID) at the same index
// in both, NaN where one lacks it, +Inf where it failed (scoredMs).
func paired(a, b bySeed) (as, bs [][]float64) {
	val := scoredMs
	for _, s := range a.seeds() {
		rb, ok := b[s]
		if !ok {
			continue
		}
		at := map[string]int{}
		var xa, xb []float64
		for _, q := range a[s] {
			at[q.ID] = len(xa)
			xa, xb = append(xa, val(q)), append(xb, math.NaN())
		}
		for _, q := range rb {
			if i, ok := at[q.ID]; ok && q.ID != "" {
				xb[i] = val(q)
				continue
			}
			xa, xb = append(xa, math.NaN()), append(xb, val(q))
		}
		as, bs = append(as, xa), append(bs, xb)
	}
	return as, bs
}

func (m bySeed) all() [][]float64 {
	var out [][]float64
	for _, s := range m.seeds() {
		var xs []float64
		for _, q := range m[s] {
			xs = append(xs, scoredMs(q))
		}
		out = append(out, xs)
	}
	return out
}

// CheckPooled judges policy (the default) on each fleet against the
// targets with the seeds pooled: the pooled P99 ratios and their paired
// bootstrap intervals (Bootstrap), each target met when its whole
// interval is within the limit, not met when wholly beyond it, undecided
// otherwise. Fleets without the default's runs, or whose results carry no
// requests, are skipped.
func CheckPooled(rs []Result, fleets []Fleet, policy string, opt Bootstrap) []PooledVerdict {
	type key struct{ f, p string }
	runs := map[key]bySeed{}
	for _, r := range rs {
		if len(r.Requests) == 0 {
			continue
		}
		k := key{r.Fleet, r.Policy}
		if runs[k] == nil {
			runs[k] = bySeed{}
		}
		runs[k][r.Seed] = r.Requests
	}
	pooledP99 := func(seeds [][]float64) time.Duration { return msDur(PooledQuantile(seeds, 0.99)) }
	var out []PooledVerdict
	for _, f := range fleets {
		d, ok := runs[key{f.Name, policy}]
		if !ok {
			continue
		}
		v := PooledVerdict{Fleet: f.Name, Seeds: len(d), Default: pooledP99(d.all()), CacheMatters: f.CacheMatters,
			VsBest: Interval{math.NaN(), math.NaN(), math.NaN()}, VsRR: Interval{math.NaN(), math.NaN(), math.NaN()},
			BestDecision: NoData, RRDecision: NoData}
		// The best by pooled P99 on the seeds it shares with the
		// default. Taking the lower of two noisy estimates biases "best"
		// low, so the ratio leans against the default.
		bestOn := math.Inf(1)
		for _, p := range []string{sched.PrefixAffinity, sched.LeastOutstanding} {
			o, ok := runs[key{f.Name, p}]
			if !ok {
				continue
			}
			_, bs := paired(d, o)
			if q := PooledQuantile(bs, 0.99); len(bs) > 0 && q < bestOn {
				v.Best, bestOn = p, q
			}
		}
		if v.Best != "" {
			o := runs[key{f.Name, v.Best}]
			v.BestP99 = pooledP99(o.all())
			as, bs := paired(d, o)
			v.VsBest = PairedRatio(as, bs, 0.99, opt)
			v.BestDecision = Decide(v.VsBest, LimitVsBest)
		}
		if rr, ok := runs[key{f.Name, sched.RoundRobin}]; ok {
			v.RR = pooledP99(rr.all())
			as, rrs := paired(d, rr)
			v.VsRR = PairedRatio(as, rrs, 0.99, opt)
			if f.CacheMatters {
				v.RRDecision = Decide(v.VsRR, LimitVsRR)
			}
		}
		v.Decision = Combine(v.BestDecision, v.RRDecision)
		out = append(out, v)
	}
	return out
}

// FormatPooledVerdicts writes CheckPooled's verdicts as a Markdown table:
// pooled P99s, each ratio with its interval, and the verdict, naming the
// target that is not met or undecided.
func FormatPooledVerdicts(w io.Writer, vs []PooledVerdict, policy string, opt Bootstrap) {
	opt = opt.withDefaults()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	lvl := fmt.Sprintf("%.0f%%", 100*opt.Level)
	fmt.Fprintf(tw, "| fleet\t seeds\t %s pooled P99 ms\t best single-signal (pooled)\t its pooled P99 ms\t ratio [%s CI] (≤ %.2f)\t round-robin pooled P99 ms\t ratio [%s CI] (≤ %.2f)\t verdict\t\n",
		policy, lvl, LimitVsBest, lvl, LimitVsRR)
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 9))
	dur := func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return fmtMs(d)
	}
	for _, v := range vs {
		best := v.Best
		if best == "" {
			best = "–"
		}
		rr := FormatInterval(v.VsRR)
		if !v.CacheMatters && !math.IsNaN(v.VsRR.Point) {
			rr += " (n/a)"
		}
		fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", v.Fleet, v.Seeds, dur(v.Default), best, dur(v.BestP99),
			FormatInterval(v.VsBest), dur(v.RR), rr, verdictText(v))
	}
	tw.Flush()
}

// FormatInterval writes "point [lo–hi]", or the point alone without an
// interval.
func FormatInterval(iv Interval) string {
	switch {
	case math.IsNaN(iv.Point):
		return "–"
	case math.IsNaN(iv.Lo) || math.IsNaN(iv.Hi):
		return fmtRatio(iv.Point) + " [1 seed: none]"
	}
	return fmt.Sprintf("%s [%s–%s]", fmtRatio(iv.Point), fmtRatio(iv.Lo), fmtRatio(iv.Hi))
}

// fmtRatio prints a ratio, ∞ where the numerator's P99 is unbounded
// (failures) and the denominator's is not.
func fmtRatio(r float64) string {
	if math.IsInf(r, 1) {
		return "∞"
	}
	return fmt.Sprintf("%.2f", r)
}

func verdictText(v PooledVerdict) string {
	var why []string
	for _, t := range []struct {
		d    Decision
		name string
	}{{v.BestDecision, "vs best"}, {v.RRDecision, "vs round-robin"}} {
		if t.d == NotMet || t.d == Undecided {
			why = append(why, t.name+": "+string(t.d))
		}
	}
	out := string(v.Decision)
	if v.Decision == NotMet {
		out = "**not met**"
	}
	if len(why) > 0 {
		out += " (" + strings.Join(why, ", ") + ")"
	}
	return out
}

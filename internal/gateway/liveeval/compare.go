package liveeval

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Two builds of the gateway are compared by running the same suite with
// each, alternately if the machine is shared, and pairing their runs:
// round i of the one with round i of the other, seed by seed (a seed
// replays the same requests whatever the build). CompareSuites does for
// "after ÷ before" what CheckPooled does for "default ÷ round-robin":
// pooled P99s and a paired bootstrap interval.

// SuiteComparison is one (fleet, policy) of two sets of suites.
type SuiteComparison struct {
	Fleet, Policy string
	// Pairs is how many (round, seed) runs paired up.
	Pairs int
	// Pooled P99 and mean TTFT of each side's paired runs.
	Before, After         time.Duration
	BeforeMean, AfterMean time.Duration
	// Ratio is after ÷ before of the pooled P99, with its interval.
	Ratio Interval
}

// CompareSuites pairs before[i] with after[i] (each a suite's results,
// one round) and compares every (fleet, policy) both have, in the order
// of after's results.
func CompareSuites(before, after [][]Result, opt Bootstrap) []SuiteComparison {
	type key struct{ f, p string }
	collect := func(rounds [][]Result) (map[key]bySeed, []key) {
		m := map[key]bySeed{}
		var order []key
		for i, rs := range rounds {
			for _, r := range rs {
				if len(r.Requests) == 0 {
					continue
				}
				k := key{r.Fleet, r.Policy}
				if m[k] == nil {
					m[k] = bySeed{}
					order = append(order, k)
				}
				// Seeds of different rounds are different runs.
				m[k][uint64(i)<<32|r.Seed&0xffffffff] = r.Requests
			}
		}
		return m, order
	}
	bm, _ := collect(before)
	am, order := collect(after)
	var out []SuiteComparison
	for _, k := range order {
		b, ok := bm[k]
		if !ok {
			continue
		}
		as, bs := paired(am[k], b)
		if len(as) == 0 {
			continue
		}
		out = append(out, SuiteComparison{Fleet: k.f, Policy: k.p, Pairs: len(as),
			Before: msDur(PooledQuantile(bs, 0.99)), After: msDur(PooledQuantile(as, 0.99)),
			BeforeMean: msDur(meanOf(bs)), AfterMean: msDur(meanOf(as)),
			Ratio: PairedRatio(as, bs, 0.99, opt)})
	}
	return out
}

// meanOf is the mean of the finite values (a request a run lacks, NaN,
// or that failed, +Inf, has no TTFT to average; NaN: none).
func meanOf(seeds [][]float64) float64 {
	var sum float64
	var n int
	for _, s := range seeds {
		for _, v := range s {
			if !math.IsNaN(v) && !math.IsInf(v, 0) { // lacking or failed
				sum += v
				n++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// FormatComparison writes CompareSuites's table.
func FormatComparison(w io.Writer, cs []SuiteComparison, opt Bootstrap) {
	opt = opt.withDefaults()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| fleet\t policy\t paired runs\t before pooled P99 ms\t after pooled P99 ms\t after ÷ before [%.0f%% CI]\t before mean ms\t after mean ms\t\n", 100*opt.Level)
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 8))
	for _, c := range cs {
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %s\t %s\t %s\t %.1f\t %.1f\t\n", c.Fleet, c.Policy, c.Pairs, fmtMs(c.Before), fmtMs(c.After),
			FormatInterval(c.Ratio), ms(c.BeforeMean), ms(c.AfterMean))
	}
	tw.Flush()
}

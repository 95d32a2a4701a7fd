package liveeval

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// TestIntervalCalibration checks the verdict's intervals against repeated
// identical suites, given as results directories under
// LIVEEVAL_CALIBRATE (each with the default, prefix-affinity and
// round-robin on one fleet, the same seeds). For each suite and each
// ratio it logs whether the interval from that suite's first k seeds
// holds the pooled ratio of all the other suites together (an estimate
// of the ratio the suite measures, independent of it), with both
// resampling schemes, beside the spread across suites of the point
// estimates and of the median-of-seeds ratio. It asserts nothing: it is
// the measurement docs/routing-evaluation.md quotes.
//
//	for i in 1 2 3 4 5 6 7 8; do ttft gateway live-eval --fleets two \
//	  --policies round-robin,prefix-affinity,slo-predictive --seeds 5 --out calib/s$i; done
//	LIVEEVAL_CALIBRATE=calib go test ./internal/gateway/liveeval -run TestIntervalCalibration -v
func TestIntervalCalibration(t *testing.T) {
	root := os.Getenv("LIVEEVAL_CALIBRATE")
	if root == "" {
		t.Skip("LIVEEVAL_CALIBRATE names no directory of suites")
	}
	dirs, err := filepath.Glob(filepath.Join(root, "*", SuiteFile))
	if err != nil {
		t.Fatal(err)
	}
	pols := []string{sched.SLOPredictive, sched.PrefixAffinity, sched.RoundRobin}
	var suites []map[string]bySeed
	seeds := 0
	for _, p := range dirs {
		_, rs, _, err := ReadDir(filepath.Dir(p))
		if err != nil {
			t.Fatal(err)
		}
		s := map[string]bySeed{}
		for _, r := range rs {
			if s[r.Policy] == nil {
				s[r.Policy] = bySeed{}
			}
			s[r.Policy][r.Seed] = r.Requests
		}
		n := len(s[pols[0]])
		for _, pol := range pols {
			n = min(n, len(s[pol]))
		}
		if seeds == 0 || n < seeds {
			seeds = n
		}
		suites = append(suites, s)
	}
	if len(suites) < 3 || seeds < 2 {
		t.Fatalf("%d suites with at least %d seeds: too few to compare", len(suites), seeds)
	}
	first := func(m bySeed, k int) bySeed {
		out := bySeed{}
		for _, s := range m.seeds()[:k] {
			out[s] = m[s]
		}
		return out
	}
	spread := func(xs []float64) string {
		ys := slices.Clone(xs)
		slices.Sort(ys)
		return fmt.Sprintf("median %.2f, range %.2f–%.2f", ys[len(ys)/2], ys[0], ys[len(ys)-1])
	}
	for _, other := range pols[1:] {
		for _, k := range []int{3, seeds} {
			if k > seeds {
				continue
			}
			var medians, points []float64
			covered := map[bool]int{}
			widths := map[bool][]float64{}
			for i, s := range suites {
				var ta, tb [][]float64
				for j, o := range suites {
					if j != i {
						as, bs := paired(o[pols[0]], o[other])
						ta, tb = append(ta, as...), append(tb, bs...)
					}
				}
				truth := PooledQuantile(ta, 0.99) / PooledQuantile(tb, 0.99)
				as, bs := paired(first(s[pols[0]], k), first(s[other], k))
				for _, seedsOnly := range []bool{true, false} {
					iv := PairedRatio(as, bs, 0.99, Bootstrap{SeedsOnly: seedsOnly})
					if iv.Lo <= truth && truth <= iv.Hi {
						covered[seedsOnly]++
					}
					widths[seedsOnly] = append(widths[seedsOnly], iv.Hi-iv.Lo)
					if seedsOnly {
						points = append(points, iv.Point)
					}
				}
				medP99 := func(m bySeed) float64 {
					var xs []float64
					for _, one := range m.all() {
						xs = append(xs, PooledQuantile([][]float64{one}, 0.99))
					}
					slices.Sort(xs)
					if len(xs)%2 == 0 {
						return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
					}
					return xs[len(xs)/2]
				}
				medians = append(medians, medP99(first(s[pols[0]], k))/medP99(first(s[other], k)))
			}
			t.Logf("%s ÷ %s, first %d seeds of %d suites: median-of-seeds ratio %s; pooled ratio %s; 90%% interval holds the other suites' pooled ratio: seeds only %d/%d (width %s), seeds and requests %d/%d (width %s)",
				pols[0], other, k, len(suites), spread(medians), spread(points),
				covered[true], len(suites), spread(widths[true]), covered[false], len(suites), spread(widths[false]))
		}
	}
}

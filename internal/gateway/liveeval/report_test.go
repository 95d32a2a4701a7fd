package liveeval

import (
	"math"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// TestSummarizeAndCheck: medians across seeds, P99's range, the ratio to
// round-robin, and the verdict against both targets.
func TestSummarizeAndCheck(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	res := func(f, p string, p99s ...float64) []Result {
		var out []Result
		for i, v := range p99s {
			out = append(out, Result{Fleet: f, Policy: p, Seed: uint64(i + 1), P99: ms(v), Mean: ms(v / 4), HitRate: math.NaN()})
		}
		return out
	}
	tests := []struct {
		name         string
		def, rr      []float64
		cacheMatters bool
		wantOK       bool
		wantVsBest   float64
	}{
		{"within 10% and a third of round-robin", []float64{31, 32, 90}, []float64{90, 100, 200}, true, true, 32.0 / 30},
		{"over 10% of the best", []float64{34, 34, 34}, []float64{90, 100, 200}, true, false, 34.0 / 30},
		{"over a third of round-robin where caching matters", []float64{32, 32, 32}, []float64{80, 90, 95}, true, false, 32.0 / 30},
		{"a third of round-robin not required", []float64{32, 32, 32}, []float64{80, 90, 95}, false, true, 32.0 / 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rs []Result
			rs = append(rs, res("f", sched.RoundRobin, tt.rr...)...)
			rs = append(rs, res("f", sched.PrefixAffinity, 30, 25, 60)...)
			rs = append(rs, res("f", sched.LeastOutstanding, 50, 50, 50)...)
			rs = append(rs, res("f", sched.SLOPredictive, tt.def...)...)
			sums := Summarize(rs)
			if len(sums) != 4 || sums[1].P99 != ms(30) || sums[1].P99Min != ms(25) || sums[1].P99Max != ms(60) || sums[0].P99VsRR != 1 {
				t.Fatalf("summaries %+v", sums)
			}
			vs := Check(sums, []Fleet{{Name: "f", CacheMatters: tt.cacheMatters}}, sched.SLOPredictive)
			if len(vs) != 1 {
				t.Fatalf("verdicts %+v", vs)
			}
			v := vs[0]
			if v.Best != sched.PrefixAffinity || math.Abs(v.VsBest-tt.wantVsBest) > 1e-9 || v.OK != tt.wantOK {
				t.Errorf("verdict %+v, want best prefix-affinity ×%.3f, ok %v", v, tt.wantVsBest, tt.wantOK)
			}
		})
	}
}

// A fleet run with the default alone (a side-by-side comparison of two
// builds) has no verdict: there is nothing to judge it against.
func TestCheckDefaultAlone(t *testing.T) {
	sums := Summarize([]Result{{Fleet: "f", Policy: sched.SLOPredictive, Seed: 1, P99: time.Second, HitRate: math.NaN()}})
	if vs := Check(sums, []Fleet{{Name: "f", CacheMatters: true}}, sched.SLOPredictive); len(vs) != 0 {
		t.Errorf("verdicts %+v for the default alone, want none", vs)
	}
}

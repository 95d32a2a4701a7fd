package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestResamplerMatchesExplicitBootstrap checks that the binary-split
// resampler draws a resample's quantile from the same distribution as
// resampling with replacement and sorting: the two empirical CDFs over
// 10000 resamples each agree within the two-sample KS bound at 0.1%.
func TestResamplerMatchesExplicitBootstrap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	samples := [][]float64{
		{1, 2, 3, 4, 5, 6, 7},
		{1, 1, 2, 2, 2, 5, 9, 9, 30, 31, 31},
		func() []float64 { // 200 values with ties
			xs := make([]float64, 200)
			for i := range xs {
				xs[i] = float64(rng.IntN(60))
			}
			return xs
		}(),
	}
	const draws = 10000
	for si, xs := range samples {
		slices.Sort(xs)
		n := len(xs)
		for _, stat := range []string{"p50", "p90", "p95", "p99", "mean"} {
			r := newResampler(xs, stat)
			src := rand.NewPCG(uint64(si), 9)
			fast := make([]float64, draws)
			slow := make([]float64, draws)
			res := make([]float64, n)
			for d := range draws {
				fast[d] = r.resample(rand.New(src), src)
				for i := range res {
					res[i] = xs[rng.IntN(n)]
				}
				slices.Sort(res)
				if stat == "mean" {
					s := 0.0
					for _, x := range res {
						s += x
					}
					slow[d] = s / float64(n)
				} else {
					slow[d] = Quantile(res, r.q)
				}
			}
			if d := ksDistance(fast, slow); d > 0.028 {
				t.Errorf("sample %d %s: KS distance between fast and explicit bootstrap %.4f > 0.028", si, stat, d)
			}
		}
	}
}

// ksDistance is the two-sample Kolmogorov–Smirnov statistic.
func ksDistance(a, b []float64) float64 {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	i, j, d := 0, 0, 0.0
	for i < len(a) && j < len(b) {
		x := math.Min(a[i], b[j])
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = math.Max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

func TestCompareLargeSampleMeanUsesNormalLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	a := shifted(rng, 50000, 0)
	b := shifted(rng, 50000, -3)
	c := CompareSamples(a, b, "mean", 1)
	// Standard error of the difference: 100·sqrt(2/50000) ≈ 0.632 ms.
	half := (c.CI95[1] - c.CI95[0]) / 2
	if math.Abs(half-1.96*0.632) > 0.1 {
		t.Errorf("half-width %.3f, want about %.3f", half, 1.96*0.632)
	}
	if !c.Significant || c.Diff > 0 {
		t.Errorf("3 ms mean shift in 50000 values not found: %+v", c)
	}
}

// shifted draws n values from 50 + Exp(mean 100) + shift: a skewed latency
// distribution for which every quantile of b − a is exactly the shift.
func shifted(rng *rand.Rand, n int, shift float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = 50 + 100*rng.ExpFloat64() + shift
	}
	return xs
}

// TestCompareCICoverage checks that the 95% interval of a known difference
// covers it at roughly the stated rate. Percentile bootstrap intervals of
// high quantiles under-cover in small samples, hence larger n for p95.
func TestCompareCICoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("coverage simulation")
	}
	cases := []struct {
		stat   string
		n      int
		trials int
	}{
		{"mean", 100, 200},
		{"p50", 100, 200},
		{"p95", 300, 120},
	}
	const shift = -20
	for _, tc := range cases {
		t.Run(tc.stat, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, uint64(len(tc.stat))))
			covered := 0
			for trial := range tc.trials {
				a := shifted(rng, tc.n, 0)
				b := shifted(rng, tc.n, shift)
				c := compareSamples(a, b, tc.stat, int64(trial), 500)
				if c.Err != nil {
					t.Fatal(c.Err)
				}
				if c.CI95[0] <= shift && shift <= c.CI95[1] {
					covered++
				}
			}
			rate := float64(covered) / float64(tc.trials)
			t.Logf("%s n=%d: coverage %.3f over %d trials", tc.stat, tc.n, rate, tc.trials)
			if rate < 0.87 || rate > 0.995 {
				t.Errorf("coverage of the 95%% CI = %.3f, want about 0.95", rate)
			}
		})
	}
}

func TestMannWhitneyNullUniformAndShiftPower(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const trials = 1000
	var ps []float64
	for range trials {
		a := shifted(rng, 40, 0)
		b := shifted(rng, 50, 0)
		ps = append(ps, MannWhitney(a, b).PValue)
	}
	slices.Sort(ps)
	// Kolmogorov–Smirnov distance to Uniform(0,1); the 1% critical value
	// for n=1000 is 0.0515. The continuity correction makes the test
	// slightly conservative, which shows near p=1, not in the tail.
	d := 0.0
	for i, p := range ps {
		d = math.Max(d, math.Max(math.Abs(p-float64(i)/trials), math.Abs(p-float64(i+1)/trials)))
	}
	below05 := 0
	for _, p := range ps {
		if p < 0.05 {
			below05++
		}
	}
	t.Logf("null: KS distance %.4f, P(p<0.05)=%.3f", d, float64(below05)/trials)
	if d > 0.0515 {
		t.Errorf("p-values under the null are not uniform: KS distance %.4f", d)
	}
	if r := float64(below05) / trials; r < 0.03 || r > 0.07 {
		t.Errorf("type-I error at 0.05 = %.3f", r)
	}
	// A shift of half the scale in 200 values each is found every time.
	for range 20 {
		a := shifted(rng, 200, 0)
		b := shifted(rng, 200, 50)
		if p := MannWhitney(a, b).PValue; p > 1e-3 {
			t.Fatalf("shifted samples: p=%v, want < 0.001", p)
		}
	}
}

func TestMannWhitneyKnownValues(t *testing.T) {
	cases := []struct {
		name  string
		a, b  []float64
		wantU float64
		wantP float64
	}{
		// Complete separation, n=5 each: U=0 (no b below an a),
		// z = (0 − 12.5 + 0.5)/sqrt(25·11/12), p = 2Φ(−2.5067).
		{"separated", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 0, 0.012186},
		{"reversed", []float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 25, 0.012186},
		{"all tied", []float64{3, 3, 3}, []float64{3, 3}, 3, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := MannWhitney(tc.a, tc.b)
			if m.U != tc.wantU {
				t.Errorf("U = %v, want %v", m.U, tc.wantU)
			}
			if math.Abs(m.PValue-tc.wantP) > 5e-5 {
				t.Errorf("p = %v, want %v", m.PValue, tc.wantP)
			}
		})
	}
}

func TestMannWhitneyUCountsPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		a := make([]float64, 1+rng.IntN(15))
		b := make([]float64, 1+rng.IntN(15))
		for i := range a {
			a[i] = float64(rng.IntN(6))
		}
		for i := range b {
			b[i] = float64(rng.IntN(6))
		}
		want := 0.0
		for _, x := range a {
			for _, y := range b {
				switch {
				case y < x:
					want++
				case y == x:
					want += 0.5
				}
			}
		}
		if got := MannWhitney(a, b).U; math.Abs(got-want) > 1e-9 {
			t.Fatalf("U(%v, %v) = %v, want %v", a, b, got, want)
		}
	}
}

func TestCompareSamplesVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	a := shifted(rng, 500, 0)
	faster := shifted(rng, 500, -43)
	same := shifted(rng, 500, 0)

	c := CompareSamples(a, faster, "p50", 1)
	if !c.Significant || c.Diff >= 0 {
		t.Fatalf("a 43 ms shift at p50 not found: %+v", c)
	}
	v := c.Verdict("vllm", "vllm-fp8", "TTFT")
	if !strings.HasPrefix(v, "vllm-fp8 is faster than vllm at TTFT P50 by ") || !strings.Contains(v, "95% CI") {
		t.Errorf("verdict %q", v)
	}
	// The reverse comparison names the other run as faster.
	if v := CompareSamples(faster, a, "p50", 1).Verdict("x", "y", ""); !strings.HasPrefix(v, "x is faster than y at P50 by") {
		t.Errorf("reverse verdict %q", v)
	}
	// Deterministic for a seed.
	if c2 := CompareSamples(a, faster, "p50", 1); c2.CI95 != c.CI95 {
		t.Errorf("same seed, different CI: %v vs %v", c.CI95, c2.CI95)
	}
	n := CompareSamples(a, same, "mean", 1)
	if n.Significant {
		t.Logf("note: null comparison significant by chance: %+v", n)
	}
	if v := n.Verdict("A", "B", "TTFT"); n.Significant == strings.HasPrefix(v, "no significant difference") {
		t.Errorf("verdict %q disagrees with Significant=%v", v, n.Significant)
	}
	if n.CI95[0] > n.Diff || n.Diff > n.CI95[1] {
		t.Errorf("point estimate %v outside its CI %v", n.Diff, n.CI95)
	}
}

func TestCompareSamplesTooFew(t *testing.T) {
	c := CompareSamples([]float64{100}, []float64{50}, "p50", 1)
	if c.Significant || c.Warning == "" || c.Diff != -50 {
		t.Errorf("one value each: %+v", c)
	}
	if v := c.Verdict("A", "B", "TTFT"); !strings.HasPrefix(v, "cannot tell A and B apart at TTFT P50: too few values") {
		t.Errorf("verdict %q", v)
	}
}

func TestCompareSamplesBadInput(t *testing.T) {
	cases := []struct {
		name string
		a, b []float64
		stat string
		want string
	}{
		{"unknown stat", []float64{1}, []float64{2}, "p42", `unknown statistic "p42"`},
		{"empty A", nil, []float64{2}, "mean", "sample A is empty"},
		{"NaN in B", []float64{1}, []float64{2, math.NaN()}, "p95", "sample B value 1 is NaN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := CompareSamples(tc.a, tc.b, tc.stat, 1)
			if c.Err == nil || !strings.Contains(c.Err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", c.Err, tc.want)
			}
			if !math.IsNaN(c.Diff) {
				t.Errorf("Diff = %v on error, want NaN", c.Diff)
			}
		})
	}
}

func BenchmarkCompareSamplesP95(b *testing.B) {
	for _, n := range []int{1000, 10000, 1000000} {
		rng := rand.New(rand.NewPCG(1, 1))
		x, y := shifted(rng, n, 0), shifted(rng, n, -10)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				CompareSamples(x, y, "p95", 1)
			}
		})
	}
}

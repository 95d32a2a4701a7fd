package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestStatisticRowsUseTheBootstrap: a mean or quantile row's p-value is its
// own bootstrap's, not the Mann–Whitney p of the distributions; the U test
// is a separate "distribution" row.
func TestStatisticRowsUseTheBootstrap(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	// Same median, different tails: the rank test sees little, P99 moves.
	a := make([]float64, 600)
	b := make([]float64, 600)
	for i := range a {
		a[i] = 100 + 10*rng.NormFloat64()
		b[i] = 100 + 10*rng.NormFloat64()
		if i%20 == 0 {
			b[i] += 150
		}
	}
	dist := CompareSamples(a, b, "distribution", 1)
	if dist.Err != nil || dist.Method != MethodMannWhitney {
		t.Fatalf("distribution row: method %q err %v", dist.Method, dist.Err)
	}
	if want := MannWhitney(a, b).PValue; dist.PValue != want {
		t.Fatalf("distribution p %v, want the U test's %v", dist.PValue, want)
	}
	for _, st := range []string{"mean", "p95", "p99"} {
		c := CompareSamples(a, b, st, 1)
		if c.Method != MethodBootstrap {
			t.Errorf("%s: method %q, want %q", st, c.Method, MethodBootstrap)
		}
		if c.PValue == dist.PValue {
			t.Errorf("%s reports the Mann–Whitney p %v as its own", st, c.PValue)
		}
		if strings.Contains(c.Verdict("A", "B", "TTFT"), "Mann") {
			t.Errorf("%s verdict cites the rank test: %s", st, c.Verdict("A", "B", "TTFT"))
		}
	}
	p99 := CompareSamples(a, b, "p99", 1)
	if !p99.Significant || !strings.HasPrefix(p99.Verdict("A", "B", "TTFT"), "A is faster than B at TTFT P99") {
		t.Errorf("a 150 ms tail in 5%% of B not found at P99: %s", p99.Verdict("A", "B", "TTFT"))
	}
}

// TestBootstrapPValue checks the bootstrap p: in [0, 1], below 0.05
// exactly when the interval excludes 0, near 1 for identical samples, tiny
// for a large shift, and about uniform under the null (P(p<0.05) ≈ 5%).
func TestBootstrapPValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	a := shifted(rng, 300, 0)
	if c := CompareSamples(a, a, "p95", 1); c.PValue < 0.5 || c.Significant {
		t.Errorf("identical samples: p=%v significant=%v", c.PValue, c.Significant)
	}
	if c := CompareSamples(a, shifted(rng, 300, -80), "p50", 1); c.PValue > 0.001 || !c.Significant {
		t.Errorf("80 ms shift: p=%v significant=%v", c.PValue, c.Significant)
	}
	if testing.Short() {
		return
	}
	const trials = 400
	below := 0
	for trial := range trials {
		x, y := shifted(rng, 120, 0), shifted(rng, 120, 0)
		c := compareSamples(x, y, "mean", int64(trial), 500)
		if c.PValue < 0 || c.PValue > 1 {
			t.Fatalf("p = %v", c.PValue)
		}
		if c.PValue < 0.05 {
			below++
		}
	}
	r := float64(below) / trials
	t.Logf("null: P(bootstrap p<0.05) = %.3f", r)
	if r < 0.02 || r > 0.10 {
		t.Errorf("type-I error of the bootstrap test at 0.05 = %.3f, want about 0.05", r)
	}
}

// TestDistributionVerdict words the rank test as what it tests.
func TestDistributionVerdict(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	a := shifted(rng, 300, 0)
	fast := shifted(rng, 300, -40)
	v := CompareSamples(a, fast, "distribution", 1).Verdict("A", "B", "TTFT")
	if !strings.HasPrefix(v, "B tends to be faster than A at TTFT") || !strings.Contains(v, "Mann–Whitney p") || !strings.Contains(v, "% of pairs") {
		t.Errorf("shifted distribution verdict %q", v)
	}
	v = CompareSamples(a, a, "distribution", 1).Verdict("A", "B", "TTFT")
	if !strings.HasPrefix(v, "no significant difference between the TTFT distributions of A and B") {
		t.Errorf("same distribution verdict %q", v)
	}
}

// TestComparisonJSONHasNoNaN: a comparison that could not be made (an
// empty sample) or a row without some statistic still marshals: NaN is
// null in JSON.
func TestComparisonJSONHasNoNaN(t *testing.T) {
	for _, c := range []Comparison{
		CompareSamples(nil, []float64{1, 2}, "p95", 1),
		CompareSamples([]float64{1, 2, 3}, []float64{2, 3, 4}, "mean", 1),
		CompareSamples([]float64{1, 2, 3}, []float64{2, 3, 4}, "distribution", 1),
	} {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %s: %v", c.Stat, err)
		}
		var back map[string]any
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if c.Err != nil && back["diff"] != nil {
			t.Errorf("diff of a failed comparison is %v, want null", back["diff"])
		}
	}
}

// TestComparisonJSONRoundTrip: what MarshalJSON writes reads back, null as
// NaN, the error as Err.
func TestComparisonJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 9))
	for _, c := range []Comparison{
		CompareSamples(shifted(rng, 50, 0), shifted(rng, 50, -20), "p95", 3),
		CompareSamples(shifted(rng, 50, 0), shifted(rng, 50, -20), "distribution", 3),
		CompareSamples(nil, []float64{1}, "mean", 3),
	} {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back Comparison
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		same := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
		if !same(back.Diff, c.Diff) || !same(back.PValue, c.PValue) || !same(back.U, c.U) || !same(back.CI95[0], c.CI95[0]) ||
			back.Method != c.Method || back.Significant != c.Significant || (c.Err == nil) != (back.Err == nil) {
			t.Errorf("round trip of %s:\n%s\n%+v\n%+v", c.Stat, raw, c, back)
		}
	}
}

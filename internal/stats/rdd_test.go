package stats

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func sessionsRDD(t testing.TB, n int, effect float64, seed int64, opt RDDOptions) RDDResult {
	t.Helper()
	tab := SynthSessions(n, effect, 300, seed)
	x, _ := tab.Col("ttft_ms")
	y, _ := tab.Col("retained")
	var covs []Column
	for _, name := range []string{"mobile", "prompt_tokens", "tenure_days"} {
		c, _ := tab.Col(name)
		covs = append(covs, Column{name, c})
	}
	r, err := RDD(x, y, covs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRDDRecoversKnownEffect(t *testing.T) {
	const effect = -0.028
	r := sessionsRDD(t, 200_000, effect, 1, RDDOptions{Cutoff: 300})
	t.Logf("h=%.1f n=%d/%d conventional %+.4f %v robust %+.4f %v naive %+.4f density p=%.2f", r.Bandwidth, r.NBelow, r.NAbove,
		r.Conventional.Value, r.Conventional.CI95, r.Robust.Value, r.Robust.CI95, r.Naive.Value, r.Density.PValue)
	if r.Robust.CI95[0] > effect || effect > r.Robust.CI95[1] {
		t.Errorf("robust CI %v misses the true effect %v", r.Robust.CI95, effect)
	}
	if r.Robust.CI95[1] >= 0 {
		t.Errorf("robust CI %v does not exclude zero with 200k sessions", r.Robust.CI95)
	}
	if r.Density.PValue < 0.01 {
		t.Errorf("density test rejects continuity: %+v", r.Density)
	}
	for _, b := range r.Balance {
		if math.Abs(b.SMD) >= 0.1 {
			t.Errorf("covariate %s: SMD %.3f", b.Name, b.SMD)
		}
	}
	// The naive regression is confounded: it misses the truth by more
	// than its own interval admits.
	if r.Naive.CI95[0] <= effect && effect <= r.Naive.CI95[1] {
		t.Errorf("naive estimate %v (CI %v) unexpectedly covers the truth", r.Naive.Value, r.Naive.CI95)
	}
	for _, p := range r.Placebos {
		if p.Estimate.PValue < 0.001 {
			t.Errorf("placebo at %.0f: %+v", p.Cutoff, p.Estimate)
		}
	}
	if len(r.Placebos) != 4 {
		t.Errorf("%d placebos, want 4", len(r.Placebos))
	}
}

// TestRDDCoverage repeats the analysis on independent synthetic samples:
// the robust 95% interval should cover the truth in most of them.
func TestRDDCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("coverage simulation")
	}
	const effect, reps = -0.05, 20
	covered := 0
	for seed := range int64(reps) {
		r := sessionsRDD(t, 30_000, effect, 100+seed, RDDOptions{Cutoff: 300, NoPlacebos: true})
		if r.Robust.CI95[0] <= effect && effect <= r.Robust.CI95[1] {
			covered++
		}
	}
	rate := float64(covered) / reps
	t.Logf("robust CI coverage %.2f over %d samples", rate, reps)
	if rate < 0.8 {
		t.Errorf("robust 95%% CI covered the true effect in %.2f of samples", rate)
	}
}

func TestRDDDonutAndDensityJump(t *testing.T) {
	r := sessionsRDD(t, 100_000, -0.03, 3, RDDOptions{Cutoff: 300, Donut: 20, NoPlacebos: true})
	if r.Donut != 20 || r.Robust.CI95[0] > -0.03 || -0.03 > r.Robust.CI95[1] {
		t.Errorf("donut fit: %+v", r.Robust)
	}
	// Manipulation: move a third of the sessions just above the cutoff to
	// just below it. The density test must notice.
	tab := SynthSessions(100_000, 0, 300, 4)
	x, _ := tab.Col("ttft_ms")
	y, _ := tab.Col("retained")
	k := 0
	for i, v := range x {
		if v >= 300 && v < 330 {
			if k%3 == 0 {
				x[i] = 300 - (v - 300) - 0.1
			}
			k++
		}
	}
	m, err := RDD(x, y, nil, RDDOptions{Cutoff: 300, NoPlacebos: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Density.PValue > 0.01 || m.Density.Theta >= 0 {
		t.Errorf("sorted sessions not detected: %+v", m.Density)
	}
}

func TestRDDBadInput(t *testing.T) {
	cases := []struct {
		name string
		x, y []float64
		covs []Column
		want string
	}{
		{"lengths", []float64{1, 2}, []float64{1}, nil, "2 running-variable values but 1 outcomes"},
		{"one side", []float64{1, 2, 3}, []float64{0, 1, 0}, nil, "need at least 20 sessions on each side"},
		{"covariate", []float64{1}, []float64{1}, []Column{{"mobile", nil}}, `covariate "mobile" has 0 values`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RDD(tc.x, tc.y, tc.covs, RDDOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func BenchmarkRDD200k(b *testing.B) {
	tab := SynthSessions(200_000, -0.028, 300, 1)
	x, _ := tab.Col("ttft_ms")
	y, _ := tab.Col("retained")
	for b.Loop() {
		if _, err := RDD(x, y, nil, RDDOptions{NoPlacebos: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRDDFuzzyDesign: crossing 300 ms raises the chance of treatment from
// 0.15 to 0.85; treatment lowers retention by 0.06. The Wald estimate
// recovers 0.06, the first stage 0.7, and the sharp (reduced-form) jump is
// 0.7 × −0.06.
func TestRDDFuzzyDesign(t *testing.T) {
	const tau, n = -0.06, 150_000
	rng := rand.New(rand.NewPCG(21, 22))
	x := make([]float64, n)
	d := make([]float64, n)
	y := make([]float64, n)
	for i := range n {
		x[i] = math.Exp(math.Log(270) + 0.3*rng.NormFloat64())
		pd := 0.15
		if x[i] >= 300 {
			pd = 0.85
		}
		if rng.Float64() < pd {
			d[i] = 1
		}
		if rng.Float64() < 0.45-0.00003*(x[i]-300)+tau*d[i] {
			y[i] = 1
		}
	}
	r, err := RDD(x, y, nil, RDDOptions{Cutoff: 300, Treatment: d, NoPlacebos: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fuzzy: first stage %+.3f %v, conventional %+.4f %v, robust %+.4f %v", r.FirstStage.Value, r.FirstStage.CI95,
		r.Conventional.Value, r.Conventional.CI95, r.Robust.Value, r.Robust.CI95)
	if r.Design != "fuzzy" || r.FirstStage == nil || math.Abs(r.FirstStage.Value-0.7) > 4*r.FirstStage.SE {
		t.Fatalf("first stage %+v", r.FirstStage)
	}
	if r.Robust.CI95[0] > tau || tau > r.Robust.CI95[1] || r.Conventional.CI95[0] > tau || tau > r.Conventional.CI95[1] {
		t.Errorf("fuzzy CIs %v / %v miss %v", r.Conventional.CI95, r.Robust.CI95, tau)
	}
	sharp, err := RDD(x, y, nil, RDDOptions{Cutoff: 300, NoPlacebos: true})
	if err != nil {
		t.Fatal(err)
	}
	if sharp.Conventional.CI95[0] > 0.7*tau || 0.7*tau > sharp.Conventional.CI95[1] {
		t.Errorf("reduced form %v misses %v", sharp.Conventional.CI95, 0.7*tau)
	}
	// No jump in treatment: a clear error, not a division by zero.
	flat := make([]float64, n)
	if _, err := RDD(x, y, nil, RDDOptions{Cutoff: 300, Treatment: flat, NoPlacebos: true}); err == nil || !strings.Contains(err.Error(), "treatment") {
		t.Errorf("constant treatment: err = %v", err)
	}
}

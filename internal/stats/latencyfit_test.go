package stats

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// truth is a plausible millisecond-scale instance of the article's model
// (its printed coefficients give seconds, not the milliseconds of its own
// grid; see docs/analyses.md).
var truth = []float64{0.05, 0.82, 0.67, 0.31, 8.9, 20000}

func synthGrid(rng *rand.Rand, p []float64, noiseSD float64) []LatencyPoint {
	var pts []LatencyPoint
	for _, b := range []float64{1, 2, 4, 8, 16, 32, 64} {
		for _, c := range []float64{256, 512, 1024, 2048, 4096, 8192} {
			pts = append(pts, LatencyPoint{Batch: b, Context: c, LatencyMs: LatencyModel(p, b, c) + noiseSD*rng.NormFloat64()})
		}
	}
	return pts
}

func TestFitLatencyRecoversParameters(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 1))
	const reps = 40
	covered := make([]int, len(truth))
	for rep := range reps {
		fit, err := FitLatency(synthGrid(rng, truth, 0.3))
		if err != nil {
			t.Fatal(err)
		}
		if !fit.Nonlinear.Converged {
			t.Fatalf("rep %d: did not converge: %+v", rep, fit.Nonlinear.Warnings)
		}
		if fit.Nonlinear.R2 < 0.999 {
			t.Errorf("rep %d: R² = %v", rep, fit.Nonlinear.R2)
		}
		for j, p := range fit.Nonlinear.Params {
			if p.CI95[0] <= truth[j] && truth[j] <= p.CI95[1] {
				covered[j]++
			}
		}
	}
	for j, c := range covered {
		rate := float64(c) / reps
		t.Logf("%s: CI coverage %.2f", LatencyModelNames[j], rate)
		// Asymptotic (Jacobian) intervals of a nonlinear model hold when the
		// noise is small beside the cliff (here 0.3 ms against δ = 8.9 ms;
		// with larger noise δ and κ under-cover, see docs/analyses.md).
		// A broken fit or standard error covers far less than 0.85.
		if rate < 0.85 {
			t.Errorf("%s: 95%% CI covered the true value in %.2f of %d fits", LatencyModelNames[j], rate, reps)
		}
	}
}

func TestFitLatencyBeatsLinearOnCurvedData(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	fit, err := FitLatency(synthGrid(rng, truth, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	if fit.Nonlinear.SSE >= fit.Linear.SSE {
		t.Errorf("nonlinear SSE %v not below linear %v", fit.Nonlinear.SSE, fit.Linear.SSE)
	}
	pr := fit.Predict(32, 2048)
	want := LatencyModel(truth, 32, 2048)
	if pr.CI95[0] > want || want > pr.CI95[1] {
		t.Errorf("prediction %v CI %v misses the true %v", pr.Nonlinear, pr.CI95, want)
	}
	if len(fit.Nonlinear.Residuals) != len(fit.Points) {
		t.Errorf("%d residuals for %d points", len(fit.Nonlinear.Residuals), len(fit.Points))
	}
}

func TestOLSExact(t *testing.T) {
	// y = 1 + 2·b + 3·ctx + 0.5·b·ctx exactly, plus one noisy point so
	// that the residual variance is not zero.
	var X [][]float64
	var y []float64
	for _, b := range []float64{1, 2, 3, 4} {
		for _, c := range []float64{10, 20, 30} {
			X = append(X, []float64{1, b, c, b * c})
			y = append(y, 1+2*b+3*c+0.5*b*c)
		}
	}
	y[0] += 1e-3
	r, err := OLS(LinearModelNames, X, y)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []float64{1, 2, 3, 0.5} {
		if got := r.Params[j].Value; math.Abs(got-want) > 1e-2 {
			t.Errorf("%s = %v, want %v", LinearModelNames[j], got, want)
		}
	}
	if r.R2 < 0.999999 {
		t.Errorf("R² = %v", r.R2)
	}
}

func TestFitLatencyBadInput(t *testing.T) {
	cases := []struct {
		name string
		pts  []LatencyPoint
		want string
	}{
		{"none", nil, "no points"},
		{"zero batch", []LatencyPoint{{Batch: 0, Context: 1, LatencyMs: 1, Label: "sweep.csv:3"}}, "sweep.csv:3: batch must be positive"},
		{"NaN latency", []LatencyPoint{{Batch: 1, Context: 1, LatencyMs: math.NaN()}}, "point 1: latency must be positive"},
		{"too few", []LatencyPoint{{1, 1, 1, ""}, {2, 2, 2, ""}, {3, 3, 3, ""}, {4, 4, 4, ""}, {5, 5, 5, ""}, {6, 7, 8, ""}}, "need at least 7 points"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FitLatency(tc.pts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLevenbergMarquardtNumericJacobian(t *testing.T) {
	// Exponential decay y = 5·exp(−0.3·x) + 1 without an analytic gradient.
	var X [][]float64
	var Y []float64
	rng := rand.New(rand.NewPCG(1, 3))
	for x := 0.0; x < 20; x += 0.5 {
		X = append(X, []float64{x})
		Y = append(Y, 5*math.Exp(-0.3*x)+1+0.01*rng.NormFloat64())
	}
	pr := NLSProblem{Names: []string{"A", "k", "c"}, X: X, Y: Y,
		F: func(p, x []float64) float64 { return p[0]*math.Exp(-p[1]*x[0]) + p[2] }}
	r, err := LevenbergMarquardt(pr, []float64{1, 1, 0}, LMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []float64{5, 0.3, 1} {
		p := r.Params[j]
		if p.CI95[0] > want || want > p.CI95[1] || p.SE > 0.05 {
			t.Errorf("%s = %v ± %v (CI %v), want %v", p.Name, p.Value, p.SE, p.CI95, want)
		}
	}
}

func BenchmarkFitLatency42Points(b *testing.B) {
	pts := synthGrid(rand.New(rand.NewPCG(1, 1)), truth, 1)
	for b.Loop() {
		if _, err := FitLatency(pts); err != nil {
			b.Fatal(err)
		}
	}
}

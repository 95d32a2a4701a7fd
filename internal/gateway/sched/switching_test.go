package sched

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// queueTTFT is a backend with a nonlinear latency model (a single server
// whose waits grow with the square of its queue past four requests),
// which a linear model cannot fit and trees can.
func queueTTFT(rng *rand.Rand) (Features, float64) {
	in := float64(rng.IntN(16))
	unc := float64(100 + rng.IntN(1000))
	f := Features{PromptTokens: unc + 200, UncachedTokens: unc, InFlight: in, QueuedTokens: in * 300}
	wait := 0.002 * math.Pow(max(in-4, 0), 2)
	return f, (0.01 + unc*2e-5 + wait) * (0.95 + 0.1*rng.Float64())
}

// TestGBTFits: the trees, fitted on one sample, predict a fresh sample of
// the same backend within a MAPE bound, and better than the mean does.
func TestGBTFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var xs [][]float64
	var ys []float64
	for range 512 {
		f, y := queueTTFT(rng)
		xs = append(xs, []float64{f.UncachedTokens, f.QueuedTokens, f.InFlight, 0, 0, f.PromptTokens, 0, 0})
		ys = append(ys, math.Log(y))
	}
	m := fitGBT(xs, ys, defaultGBTParams(nGBTFeat))
	if m == nil {
		t.Fatal("no model from 512 rows")
	}
	var apeM, apeC float64
	const n = 500
	for range n {
		f, y := queueTTFT(rng)
		p := math.Exp(m.predict([]float64{f.UncachedTokens, f.QueuedTokens, f.InFlight, 0, 0, f.PromptTokens, 0, 0}))
		apeM += math.Abs(p-y) / y
		apeC += math.Abs(math.Exp(m.base)-y) / y
	}
	apeM, apeC = apeM/n, apeC/n
	t.Logf("held-out MAPE: trees %.3f, constant %.3f", apeM, apeC)
	if apeM > 0.15 || apeM > apeC/3 {
		t.Errorf("trees MAPE %.3f (constant %.3f): want ≤ 0.15 and ≤ a third of the constant's", apeM, apeC)
	}
}

func TestEntropyCovariance(t *testing.T) {
	cases := []struct {
		name   string
		xs     []float64
		lo, hi float64
	}{
		{"alike", []float64{0.1, 0.1, 0.1, 0.1}, 0, 0},
		{"two values", []float64{0.01, 0.01, 1, 1}, 0.2, 0.3},
		{"spread", func() []float64 {
			var xs []float64
			for i := range 160 {
				xs = append(xs, math.Exp(float64(i)/20))
			}
			return xs
		}(), 0.95, 1},
	}
	for _, c := range cases {
		if h := entropy(c.xs, 16); h < c.lo || h > c.hi {
			t.Errorf("%s: entropy %.3f, want in [%.2f, %.2f]", c.name, h, c.lo, c.hi)
		}
	}
	if c := covariance([]float64{1, 2, 3}, []float64{2, 4, 6}); math.Abs(c-2) > 1e-9 {
		t.Errorf("covariance %.3f, want 2", c)
	}
}

// TestSwitchingFollowsTraffic: regular slow arrivals leave the linear
// model in charge; bursty arrivals (CoV of inter-arrival times well over
// 0.8) on a backend the linear model fits badly put the trees in charge.
func TestSwitchingFollowsTraffic(t *testing.T) {
	cases := []struct {
		name  string
		gap   func(*rand.Rand) time.Duration
		want  string
		covLo float64
	}{
		{"regular", func(*rand.Rand) time.Duration { return 100 * time.Millisecond }, PredictorLinear, 0},
		{"bursty", func(r *rand.Rand) time.Duration {
			// Gamma-like: mostly back to back, now and then a long pause.
			if r.Float64() < 0.1 {
				return time.Duration(r.ExpFloat64() * float64(time.Second))
			}
			return time.Millisecond
		}, PredictorGBT, switchCoV},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			s := newPredictorSet(100*time.Millisecond, PredictorSwitching)
			s.sw.syncTrain = true
			at := time.Unix(0, 0)
			for range 600 {
				at = at.Add(c.gap(rng))
				f, y := queueTTFT(rng)
				if c.name == "regular" {
					// A backend the linear model fits: no queueing.
					f.InFlight, f.QueuedTokens = 0, 0
					y = 0.01 + f.UncachedTokens*2e-5
				}
				s.predict(f)
				s.observeAt(at, f, y)
			}
			st := s.stats()
			t.Logf("active %s, CoV %.2f, QPS %.0f, MAPE %v", st.Active, st.CoV, st.QPS, st.MAPE)
			if st.Active != c.want {
				t.Errorf("active %s, want %s", st.Active, c.want)
			}
			if st.CoV < c.covLo {
				t.Errorf("CoV %.2f, want over %.2f", st.CoV, c.covLo)
			}
			for _, k := range []string{PredictorLinear, PredictorQueue, PredictorGBT, JointActive, JointPlainLinear} {
				if _, ok := st.JointMAPE[k]; !ok || st.JointN == 0 {
					t.Errorf("no side-by-side MAPE of %s: %+v", k, st)
				}
			}
		})
	}
}

// BenchmarkSwitchingPredict is the decision-path cost of the switching
// predictor with a fitted tree model in charge (training is off this
// path).
func BenchmarkSwitchingPredict(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := newPredictorSet(100*time.Millisecond, PredictorSwitching)
	s.sw.syncTrain = true
	at := time.Unix(0, 0)
	for range 600 {
		at = at.Add(time.Duration(rng.ExpFloat64()*float64(time.Millisecond)) * 20)
		f, y := queueTTFT(rng)
		s.observeAt(at, f, y)
	}
	s.sw.active = swGBT
	f, _ := queueTTFT(rng)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.predict(f)
	}
}

// BenchmarkGBTFit is one background refit on a full window.
func BenchmarkGBTFit(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	var xs [][]float64
	var ys []float64
	for range sampleWindow {
		f, y := queueTTFT(rng)
		xs = append(xs, []float64{f.UncachedTokens, f.QueuedTokens, f.InFlight, 0, 0, f.PromptTokens, 0.5, 0.001})
		ys = append(ys, math.Log(y))
	}
	b.ResetTimer()
	for range b.N {
		fitGBT(xs, ys, defaultGBTParams(nGBTFeat))
	}
}

// TestSwitchingTrainsInBackground: the trees are fitted off the caller's
// goroutine while predictions and observations go on (run with -race).
func TestSwitchingTrainsInBackground(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	s := newPredictorSet(100*time.Millisecond, PredictorSwitching)
	at := time.Unix(0, 0)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; s.sw.gbt.Load() == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no tree model after %d observations", i)
		}
		at = at.Add(time.Millisecond)
		f, y := queueTTFT(rng)
		s.predict(f)
		s.observeAt(at, f, y)
		if i >= 4*minTrain {
			time.Sleep(time.Millisecond) // let the fit finish
		}
	}
	f, _ := queueTTFT(rng)
	if m, ok := s.sw.predictOne(swGBT, f); !ok || !(m > 0) {
		t.Errorf("trees predict %v, ready %v", m, ok)
	}
}

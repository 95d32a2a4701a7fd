package stats

import (
	"math"
	"math/rand/v2"
)

// SynthSessionColumns are the columns SynthSessions writes.
var SynthSessionColumns = []string{"ttft_ms", "retained", "mobile", "prompt_tokens", "tenure_days"}

// SynthSessions generates n user sessions with a known effect of crossing
// the TTFT cutoff on next-day retention, and a confounder that fools a
// naive regression — so that `ttft rdd` can be checked against the truth.
//
// A latent engagement u ~ N(0,1), which the data do not contain, makes
// users both send longer prompts (so slower first tokens) and come back
// more. TTFT is log-normal around 270 ms; retention probability is
//
//	0.45 + 0.02·u − 0.03·mobile − 0.00003·(ttft − cutoff) + effect·1{ttft ≥ cutoff}
//
// so the outcome trends smoothly with TTFT and jumps by exactly `effect`
// at the cutoff. The naive comparison of sessions above and below the
// cutoff mixes the jump with the trend and with engagement, and misses it.
// There is no sorting around the cutoff, so the density is continuous and
// the covariates are balanced there.
func SynthSessions(n int, effect, cutoff float64, seed int64) *Table {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7e55_1075))
	t := &Table{Name: "synthetic", Columns: SynthSessionColumns, Data: make([][]float64, len(SynthSessionColumns))}
	for j := range t.Data {
		t.Data[j] = make([]float64, n)
	}
	for i := range n {
		u := rng.NormFloat64()
		mobile := 0.0
		if rng.Float64() < 0.4 {
			mobile = 1
		}
		prompt := math.Round(math.Exp(6 + 0.3*u + 0.6*rng.NormFloat64()))
		tenure := math.Floor(math.Exp(5 + 0.3*u + 0.8*rng.NormFloat64()))
		ttft := math.Exp(math.Log(270) + 0.2*u + 0.1*mobile + 0.1*math.Log(prompt/400) + 0.3*rng.NormFloat64())
		ttft = math.Round(ttft*10) / 10
		p := 0.45 + 0.02*u - 0.03*mobile - 0.00003*(ttft-cutoff)
		if ttft >= cutoff {
			p += effect
		}
		p = math.Min(0.99, math.Max(0.01, p))
		retained := 0.0
		if rng.Float64() < p {
			retained = 1
		}
		for j, v := range []float64{ttft, retained, mobile, prompt, tenure} {
			t.Data[j][i] = v
		}
	}
	return t
}

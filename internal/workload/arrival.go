package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals generates inter-arrival gaps for an open-loop run.
type Arrivals struct {
	kind  string
	mean  float64 // seconds
	shape float64
	rng   *rand.Rand
}

// NewArrivals returns gaps at ratePerS requests per second. kind is
// "constant", "poisson" (exponential gaps) or "gamma"; burstiness is the
// gamma shape k (1 = Poisson, < 1 burstier, > 1 more regular), as in vLLM's
// benchmark. Poisson ignores burstiness.
func NewArrivals(kind string, ratePerS, burstiness float64, seed int64) (*Arrivals, error) {
	if !(ratePerS > 0) || math.IsInf(ratePerS, 0) {
		return nil, fmt.Errorf("arrival rate must be a positive number of requests per second, got %v", ratePerS)
	}
	a := &Arrivals{kind: kind, mean: 1 / ratePerS, shape: burstiness,
		rng: rand.New(rand.NewPCG(uint64(seed), 0x61727276))} // "arrv"
	switch kind {
	case "constant", "poisson":
	case "gamma":
		if !(burstiness > 0) {
			return nil, fmt.Errorf("--burstiness must be > 0 for gamma arrivals, got %v", burstiness)
		}
	default:
		return nil, fmt.Errorf("unknown arrival process %q (want constant, poisson or gamma)", kind)
	}
	return a, nil
}

// Next returns the gap before the next arrival.
func (a *Arrivals) Next() time.Duration {
	var s float64
	switch a.kind {
	case "constant":
		s = a.mean
	case "poisson":
		s = a.rng.ExpFloat64() * a.mean
	default:
		s = gamma(a.rng, a.shape) * a.mean / a.shape
	}
	return time.Duration(s * float64(time.Second))
}

// gamma draws from Gamma(k, 1) by Marsaglia and Tsang, boosting k < 1.
func gamma(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		return gamma(rng, k+1) * math.Pow(rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

package sim

import (
	"context"
	"io"
	"math"
	"math/rand/v2"

	"github.com/ttft-dev/ttft/internal/workload"
)

// EOSLengthSource yields requests whose lengths vary the way real chat
// traffic does, by length only (unique prompts, no prefix sharing):
//
//   - Geometric: prompt and output lengths are each drawn from a geometric
//     distribution with the given means (ShareGPT-like traffic, whose lengths
//     are heavy-tailed around a mean of a few hundred tokens);
//   - otherwise the prompt is fixed and, when EOSCap > 0, the output ends at
//     EOS: every generated token after the first is the last one with the
//     same probability (a constant hazard, which is what a model that emits
//     EOS at no preferred length does), capped at EOSCap (max_tokens), with
//     the hazard chosen so that the mean output is MeanOutput.
//
// The simulated engine generates exactly the drawn output length (it sets
// MaxTokens = MinTokens), so requests finish at different steps instead of
// in lockstep. Deterministic for a Seed.
type EOSLengthSource struct {
	MeanPrompt, MeanOutput int
	Geometric              bool
	// Uniform draws prompt and output lengths uniformly in [1, 2·mean−1]
	// (the random datasets of vLLM's and SGLang's benchmarks with a range
	// ratio of 0).
	Uniform bool
	EOSCap  int
	// MaxPrompt caps drawn prompts (0: 4 × MeanPrompt), so that a rare long
	// draw does not exceed the deployment's model length.
	MaxPrompt int
	Requests  int
	Seed      uint64
	// Tokens gives each prompt token IDs, distinct between requests and
	// the same for the same request of any source with the same Seed: a
	// benchmark re-sending its seeded dataset, whose prompts a prefix
	// cache finds again. Off: prompts carry lengths only (never shared).
	Tokens bool

	rng    *rand.Rand
	hazard float64
	i      int
}

// Next implements workload.Source.
func (s *EOSLengthSource) Next(ctx context.Context) (*workload.Request, error) {
	if s.Requests > 0 && s.i >= s.Requests {
		return nil, io.EOF
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(s.Seed, 0x656f73))
		if !s.Geometric && s.EOSCap > 0 {
			s.hazard = eosHazard(float64(s.MeanOutput), s.EOSCap)
		}
	}
	p, o := s.MeanPrompt, s.MeanOutput
	switch {
	case s.Uniform:
		p = 1 + s.rng.IntN(max(1, 2*s.MeanPrompt-1))
		o = 1 + s.rng.IntN(max(1, 2*s.MeanOutput-1))
	case s.Geometric:
		maxP := s.MaxPrompt
		if maxP <= 0 {
			maxP = 4 * s.MeanPrompt
		}
		p = min(maxP, max(4, geometric(s.rng, float64(s.MeanPrompt))))
		o = max(1, geometric(s.rng, float64(s.MeanOutput)))
	case s.EOSCap > 0:
		o = 1
		for o < s.EOSCap && s.rng.Float64() >= s.hazard {
			o++
		}
	}
	r := &workload.Request{Index: s.i, PromptTokens: p, MaxTokens: o, MinTokens: o}
	if s.Tokens {
		// The first token tells requests apart; block hashes chain, so
		// every block of the prompt differs from other requests'.
		r.Tokens = make([]int, p)
		r.Tokens[0] = 1 + s.i
	}
	s.i++
	return r, nil
}

// geometric draws a length ≥ 1 with the given mean.
func geometric(rng *rand.Rand, mean float64) int {
	if mean <= 1 {
		return 1
	}
	q := 1 / mean // P(stop) per token
	u := rng.Float64()
	return 1 + int(math.Log1p(-u)/math.Log1p(-q))
}

// eosHazard is the per-token EOS probability h for which outputs of
// 1 + Geometric(h) tokens capped at cap have the given mean:
// E[min(cap, L)] = (1 − (1−h)^cap) / h. Bisection: the mean falls as h rises.
func eosHazard(mean float64, cap int) float64 {
	if mean >= float64(cap) {
		return 0
	}
	f := func(h float64) float64 { return (1 - math.Pow(1-h, float64(cap))) / h }
	lo, hi := 1e-9, 1.0
	for range 100 {
		mid := (lo + hi) / 2
		if f(mid) > mean {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

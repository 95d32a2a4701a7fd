package stats

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sentenceP reads the p-value a verdict sentence quotes ("p=0.012",
// "p<0.001"); ok is false when it quotes none.
var sentencePRE = regexp.MustCompile(`p(=|<)([0-9.]+)`)

func sentenceP(v string) (p float64, less, ok bool) {
	m := sentencePRE.FindStringSubmatch(v)
	if m == nil {
		return 0, false, false
	}
	p, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return 0, false, false
	}
	return p, m[1] == "<", true
}

// randomPair draws two samples from one of several latency-like shapes,
// with a shift and a scale change that sit around the edge of what a test
// can detect, and sometimes heavy ties (integer milliseconds).
func randomPair(rng *rand.Rand) (a, b []float64) {
	na, nb := 10+rng.IntN(190), 10+rng.IntN(190)
	shift := (rng.Float64() - 0.5) * 40
	scale := 0.7 + 0.6*rng.Float64()
	ties := rng.IntN(3) == 0
	draw := func(n int, shift, scale float64) []float64 {
		xs := make([]float64, n)
		kind := rng.IntN(3)
		for i := range xs {
			var v float64
			switch kind {
			case 0:
				v = 50 + 100*rng.ExpFloat64()
			case 1:
				v = 100 + 20*rng.NormFloat64()
			default:
				v = 60 * math.Exp(0.5*rng.NormFloat64())
			}
			v = v*scale + shift
			if ties {
				v = math.Round(v / 5)
			}
			xs[i] = v
		}
		return xs
	}
	return draw(na, 0, 1), draw(nb, shift, scale)
}

// TestVerdictFollowsItsOwnRow is the property the compare issue asks for:
// for random samples, a verdict sentence never says "no significant
// difference" next to p<0.05, never says one run is faster with a CI
// that contains 0 (or a p ≥ 0.05), and quotes the p of its own row, not
// another test's.
func TestVerdictFollowsItsOwnRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	trials := 300
	if testing.Short() {
		trials = 60
	}
	for trial := range trials {
		a, b := randomPair(rng)
		for _, st := range []string{"mean", "p50", "p95", "p99", "distribution"} {
			c := compareSamples(a, b, st, int64(trial), 400)
			if c.Err != nil {
				t.Fatalf("trial %d %s: %v", trial, st, c.Err)
			}
			v := c.Verdict("A", "B", "TTFT")
			p, less, quoted := sentenceP(v)
			if quoted && sentencePRE.FindString(v) != strings.TrimRight(fmtP(c.PValue), ".") {
				t.Fatalf("trial %d %s: the sentence quotes another p than its row's (%s): %s", trial, st, fmtP(c.PValue), v)
			}
			switch {
			case strings.HasPrefix(v, "no significant difference"):
				if quoted && (less || p < 0.05) {
					t.Fatalf("trial %d %s: %q with p<0.05", trial, st, v)
				}
				if c.Significant {
					t.Fatalf("trial %d %s: %q but Significant", trial, st, v)
				}
				if st != "distribution" && (c.CI95[0] > 0 || c.CI95[1] < 0) {
					t.Fatalf("trial %d %s: %q but the CI %v excludes 0", trial, st, v, c.CI95)
				}
			case strings.Contains(v, "is faster than"), strings.Contains(v, "is slower than"),
				strings.Contains(v, "tends to be faster"), strings.Contains(v, "tends to be slower"):
				if !quoted || (!less && p >= 0.05) {
					t.Fatalf("trial %d %s: %q without p<0.05", trial, st, v)
				}
				if !c.Significant {
					t.Fatalf("trial %d %s: %q but not Significant", trial, st, v)
				}
				if st != "distribution" {
					if c.CI95[0] <= 0 && c.CI95[1] >= 0 {
						t.Fatalf("trial %d %s: %q with a CI %v that contains 0", trial, st, v, c.CI95)
					}
					bFaster := strings.HasPrefix(v, "B is faster")
					if bFaster != (c.CI95[1] < 0) {
						t.Fatalf("trial %d %s: %q but the CI is %v", trial, st, v, c.CI95)
					}
				}
			case strings.HasPrefix(v, "cannot tell"):
				if c.Significant {
					t.Fatalf("trial %d %s: %q but Significant", trial, st, v)
				}
			default:
				t.Fatalf("trial %d %s: unexpected verdict %q", trial, st, v)
			}
			// The row is significant exactly when its own p is below 0.05.
			if c.Warning == "" && c.Significant != (c.PValue < 0.05) {
				t.Fatalf("trial %d %s: Significant=%v but p=%v", trial, st, c.Significant, c.PValue)
			}
		}
	}
}

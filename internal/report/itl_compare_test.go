package report

import (
	"math/rand/v2"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
)

// correlatedITLRun has n requests of 100 gaps each; every gap of a request
// equals that request's own level (drawn around itl ms), as when a request's
// gaps share its batch: the gaps of one request are one observation, not 100.
func correlatedITLRun(name string, n int, seed uint64, itl float64) Run {
	rng := rand.New(rand.NewPCG(seed, 3))
	recs := make([]record.Record, n)
	for i := range recs {
		level := itl * (0.7 + 0.6*rng.Float64())
		gaps := make([]float64, 100)
		for j := range gaps {
			gaps[j] = level
		}
		recs[i] = record.Record{Index: i, ITLMs: gaps, Status: 200}
	}
	return Run{Name: name, Records: recs}
}

// TestITLComparedPerRequest: the ITL difference is tested on one value per
// request. Pooled, two runs of 30 requests from the same distribution
// would look like 3,000 independent gaps and a chance difference of their
// request levels would be called significant.
func TestITLComparedPerRequest(t *testing.T) {
	itlDiff := func(c Comparison) Diff {
		for _, d := range c.Diffs {
			if d.Metric == "ITL" {
				return d
			}
		}
		t.Fatal("no ITL difference in the comparison")
		return Diff{}
	}
	same := itlDiff(Compare([]Run{correlatedITLRun("a", 30, 1, 10), correlatedITLRun("b", 30, 2, 10)}, CompareOptions{}))
	if same.Comparison.NA != 30 || same.Comparison.NB != 30 {
		t.Fatalf("ITL compared on %d and %d values, want one per request (30)", same.Comparison.NA, same.Comparison.NB)
	}
	if same.Comparison.Significant {
		t.Errorf("runs from the same distribution called different: %s", same.Verdict)
	}
	shifted := itlDiff(Compare([]Run{correlatedITLRun("a", 30, 1, 10), correlatedITLRun("slow", 30, 2, 14)}, CompareOptions{}))
	if !shifted.Comparison.Significant {
		t.Errorf("a 40%% slower ITL not detected: %s", shifted.Verdict)
	}
}

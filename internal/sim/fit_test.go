package sim

import (
	"math"
	"os"
	"testing"
)

// TestFitProfile searches the trtllm profile's physics factors against the
// validation set. It is a tool, not a check: run it with
// TTFT_SIM_FIT=1 go test ./internal/sim -run TestFitProfile -v
// and copy the result into catalog/engines.yaml.
func TestFitProfile(t *testing.T) {
	if os.Getenv("TTFT_SIM_FIT") != "1" {
		t.Skip("calibration tool; set TTFT_SIM_FIT=1 to run")
	}
	cat := DefaultCatalog()
	p, _ := cat.Engine("trtllm")
	// TTFT_SIM_FIT_HOLDOUT=tp fits on the single-GPU rows only and reports
	// the error on the tensor-parallel rows: an out-of-sample check.
	train, test := ValidationSet, ValidationSet
	if os.Getenv("TTFT_SIM_FIT_HOLDOUT") == "tp" {
		train, test = nil, nil
		for _, m := range ValidationSet {
			if m.TP == 1 {
				train = append(train, m)
			} else {
				test = append(test, m)
			}
		}
	}
	score := func() float64 {
		rows, err := Validate(cat, train)
		if err != nil {
			t.Fatal(err)
		}
		// Mean squared log error: scale-free, robust to the small rows.
		var s float64
		for _, r := range rows {
			e := math.Log(r.PredMs / r.TTFTMs)
			s += e * e
		}
		return s / float64(len(rows))
	}
	p.FP8ComputeEffMax, p.MemEff = 0.45, 0.8
	params := []*float64{&p.ComputeEffMax, &p.FP8ComputeEffMax, &p.ComputeHalfTokens, &p.LayerOverheadUs, &p.AllReduceLatencyUs, &p.StepOverheadMs}
	lo := []float64{0.3, 0.2, 0, 0, 0, 0}
	hi := []float64{0.95, 0.95, 2000, 400, 60, 5}
	best := score()
	for round := 0; round < 25; round++ {
		for i, q := range params {
			for _, f := range []float64{0.7, 0.9, 0.97, 1.03, 1.1, 1.4} {
				old := *q
				v := old * f
				if old == 0 {
					v = (hi[i] - lo[i]) * (f - 0.6) / 4
				}
				v = math.Max(lo[i], math.Min(hi[i], v))
				*q = v
				if s := score(); s < best {
					best = s
				} else {
					*q = old
				}
			}
		}
	}
	rows, _ := Validate(cat, test)
	t.Logf("fit: %+v msle=%.4f median|err| on %d evaluation rows=%.1f%%", *p, best, len(rows), MedianAbsErr(rows))
	for _, r := range rows {
		t.Logf("%s %s tp%d %s %d: %.0f vs %.1f (%+.1f%%)", r.Model, r.GPU, r.TP, r.Quant, r.Prompt, r.TTFTMs, r.PredMs, r.ErrPct)
	}
}

package sim

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
)

// TestValidationLoaded prints predicted vs measured median TTFT for the
// public loaded sweeps, split into calibration and held-out rows, and bounds
// both medians of |error|. Regenerate the table in
// docs/simulator-validation.md with:
//
//	go test ./internal/sim -run TestValidationLoaded -v
func TestValidationLoaded(t *testing.T) {
	rows, err := ValidateLoaded(context.Background(), nil, LoadedSet)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("| source | split | profile | model | GPU | prompt/output | C | measured TTFT P50 ms | predicted ms | error | sim ITL P50 ms | sim req/s |")
	t.Log("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Log(fmt.Sprintf("| %s | %s | %s | %s | %s | %d/%d | %d | %.1f | %.1f | %+.1f%% | %.1f | %.2f |", r.Source, r.Split, r.Engine, r.Model, r.GPU, r.Prompt, r.Output, r.Concurrency, r.TTFTP50Ms, r.PredMs, r.ErrPct, r.PredITLMs, r.PredRPS))
	}
	cal, nc := LoadedMedianAbsErr(rows, "calibration")
	held, nh := LoadedMedianAbsErr(rows, "held-out")
	all, na := LoadedMedianAbsErr(rows, "")
	t.Logf("median |error|: calibration %.1f%% over %d rows, held-out %.1f%% over %d rows, all %.1f%% over %d rows", cal, nc, held, nh, all, na)
	// Bounds a little above what the model reaches today (4.1 % and 19.0 %,
	// docs/simulator-validation.md), so a regression fails here. Since the
	// public-corpus work (issue #16) the default vllm profile has no
	// front-end contention and V1 prefill steps replay CUDA graphs, which
	// moved the mushfiq rows (held-out 15.0 % → 19.0 %); the leave-one-
	// source-out test (TestLeaveOneSourceOut) is the accuracy that counts.
	if cal > 10 {
		t.Errorf("calibration median absolute TTFT error %.1f%% exceeds 10%%", cal)
	}
	if held > 21 {
		t.Errorf("held-out median absolute TTFT error %.1f%% exceeds 21%%", held)
	}
}

// TestAPIContentionRaisesLoadedTTFT checks the front-end contention model in
// isolation: with api_inflight_ms = 0 the loaded rows' TTFT falls back to
// the engine's alone, and every row's prediction rises with the factor.
func TestAPIContentionRaisesLoadedTTFT(t *testing.T) {
	set := []LoadedMeasurement{LoadedSet[0], LoadedSet[5]} // C = 1 and 32
	pred := func(inflight float64) []LoadedRow {
		cat := DefaultCatalog()
		p, err := cat.Engine("vllm-4vcpu")
		if err != nil {
			t.Fatal(err)
		}
		p.APIInflightMs = inflight
		rows, err := ValidateLoaded(context.Background(), cat, set)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	off, on := pred(0), pred(3.8)
	// At C = 1 there is nobody to contend with: identical.
	if math.Abs(off[0].PredMs-on[0].PredMs) > 0.01 {
		t.Errorf("C=1: TTFT %.2f ms without contention, %.2f ms with: want equal", off[0].PredMs, on[0].PredMs)
	}
	// At C = 32 the 31 others add up to 31 × 3.8 ms before admission.
	if d := on[1].PredMs - off[1].PredMs; d < 0.5*31*3.8 || d > 1.5*31*3.8 {
		t.Errorf("C=32: contention added %.1f ms to the median TTFT, want ≈ %.1f ms", d, 31*3.8)
	}
}

// TestFitLoadedProfile grid-searches the vllm-4vcpu profile's front-end
// factors (api_overhead_ms, api_inflight_ms) on the calibration rows of
// LoadedSet, minimising the mean squared log error. A tool, not a check:
//
//	TTFT_SIM_FIT=1 go test ./internal/sim -run TestFitLoadedProfile -v
func TestFitLoadedProfile(t *testing.T) {
	if os.Getenv("TTFT_SIM_FIT") != "1" {
		t.Skip("calibration tool; set TTFT_SIM_FIT=1 to run")
	}
	var cal []LoadedMeasurement
	for _, m := range LoadedSet {
		if m.Split == "calibration" && m.Engine == "vllm-4vcpu" {
			cal = append(cal, m)
		}
	}
	best, bb, ba := math.Inf(1), 0.0, 0.0
	for b := 4.0; b <= 26; b++ {
		for i := 0; i <= 50; i++ {
			a := float64(i) / 10
			cat := DefaultCatalog()
			p, _ := cat.Engine("vllm-4vcpu")
			p.APIOverheadMs, p.APIInflightMs = b, a
			rows, err := ValidateLoaded(context.Background(), cat, cal)
			if err != nil {
				t.Fatal(err)
			}
			var l float64
			for _, r := range rows {
				e := math.Log(r.PredMs / r.TTFTP50Ms)
				l += e * e
			}
			if l < best {
				best, bb, ba = l, b, a
			}
		}
	}
	t.Logf("api_overhead_ms: %.0f, api_inflight_ms: %.1f (rms log error %.3f over %d rows)", bb, ba, math.Sqrt(best/float64(len(cal))), len(cal))
}

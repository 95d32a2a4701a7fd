package sim

import (
	"fmt"
	"testing"
)

// TestValidation prints the predicted-vs-measured table and bounds the
// median absolute error. Regenerate docs/simulator-validation.md's table
// with: go test ./internal/sim -run TestValidation -v
func TestValidation(t *testing.T) {
	rows, err := Validate(nil, ValidationSet)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("| source | model | GPU | TP | dtype | prompt | measured ms | predicted ms | error |")
	t.Log("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		dt := "fp16"
		if r.Quant != "" {
			dt = r.Quant
		}
		t.Log(fmt.Sprintf("| %s | %s | %s | %d | %s | %d | %.0f | %.1f | %+.1f%% |", r.Source, r.Model, r.GPU, r.TP, dt, r.Prompt, r.TTFTMs, r.PredMs, r.ErrPct))
	}
	med := MedianAbsErr(rows)
	t.Logf("median |error| = %.1f%% over %d rows", med, len(rows))
	if med > 15 {
		t.Errorf("median absolute TTFT error %.1f%% exceeds 15%%", med)
	}
}

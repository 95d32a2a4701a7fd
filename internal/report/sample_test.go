package report

import (
	"math"
	"testing"
)

// TestSampleHasNoAliasing: pooled gaps with a per-request pattern (31 gaps,
// the first one slow) keep their mean when subsampled; an even stride of
// 15.5 would pick the slow first gap every other request.
func TestSampleHasNoAliasing(t *testing.T) {
	var xs []float64
	for r := 0; r < 20000; r++ {
		xs = append(xs, 100)
		for g := 1; g < 31; g++ {
			xs = append(xs, 10)
		}
	}
	want := (100.0 + 30*10) / 31
	s := sample(xs, 40000, 1)
	if len(s) != 40000 {
		t.Fatalf("sample size %d", len(s))
	}
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	if got := sum / float64(len(s)); math.Abs(got-want) > 0.3 {
		t.Fatalf("subsample mean %.2f, population mean %.2f", got, want)
	}
	if got := sample(xs[:10], 20, 1); len(got) != 10 {
		t.Fatal("short input must be kept whole")
	}
}

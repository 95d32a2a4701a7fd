package stats

import (
	"math"
	"strings"
	"testing"
)

// llama3_8b and llama3_70b are the catalog's architectures.
var (
	llama3_8b  = HWModel{ParamsB: 8.03, Layers: 32, Hidden: 4096, KVHeads: 8, HeadDim: 128}
	llama3_70b = HWModel{ParamsB: 70.55, Layers: 80, Hidden: 8192, KVHeads: 8, HeadDim: 128}
)

// TestHardwareEfficiencyArticle reproduces §2.2: an A100 achieving 1120 of
// 2039 GB/s (55%) and a V100 410 of 900 GB/s (45%). The ITL each implies
// for Llama-3-8B in bf16 at batch 1 with a 512-token context is computed
// from the bytes read per step, then fed back.
func TestHardwareEfficiencyArticle(t *testing.T) {
	cases := []struct {
		name     string
		peak     float64
		achieved float64
	}{
		{"A100-80GB", 2039, 1120},
		{"V100", 900, 410},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bytes := 8.03e9*2 + 512*2*32*8*128*2
			itl := bytes / (tc.achieved * 1e9) * 1000
			e, err := HardwareEfficiency(llama3_8b, HWDevice{BandwidthGBs: tc.peak, TFLOPS: 312}, HWMeasure{ITLMs: itl, Context: 512})
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(e.AchievedGBs-tc.achieved) > 1e-6 || math.Abs(e.BandwidthUtil-tc.achieved/tc.peak) > 1e-9 {
				t.Errorf("achieved %.1f GB/s (%.1f%%), want %.0f (%.0f%%)", e.AchievedGBs, 100*e.BandwidthUtil, tc.achieved, 100*tc.achieved/tc.peak)
			}
			if !math.IsNaN(e.ComputeUtil) {
				t.Errorf("compute utilisation %v without a TTFT", e.ComputeUtil)
			}
		})
	}
}

func TestHardwareEfficiencyPrefillAndTP(t *testing.T) {
	// Llama-3-70B on 4×A100 (312 TFLOPS each), 128-token prompt: 2·70.55e9·128
	// + 2·80·128²·8192 = 1.8062e13 + 2.147e10 FLOPs. At 412.3 ms (the
	// article's mean TTFT) that is 43.8 TFLOPS, 3.5% of 1248.
	e, err := HardwareEfficiency(llama3_70b, HWDevice{BandwidthGBs: 2039, TFLOPS: 312, GPUs: 4}, HWMeasure{TTFTMs: 412.3, PromptTokens: 128})
	if err != nil {
		t.Fatal(err)
	}
	want := (2*70.55e9*128 + 2*80*128*128*8192.0) / 0.4123 / 1e12
	if math.Abs(e.AchievedTFLOPS-want) > 1e-9 || math.Abs(e.ComputeUtil-want/1248) > 1e-12 {
		t.Errorf("achieved %.2f TFLOPS (%.2f%%), want %.2f", e.AchievedTFLOPS, 100*e.ComputeUtil, want)
	}
	if e.PeakGBs != 4*2039 {
		t.Errorf("peak bandwidth %v for 4 GPUs", e.PeakGBs)
	}
}

func TestHardwareEfficiencyBadInput(t *testing.T) {
	cases := []struct {
		name string
		m    HWModel
		d    HWDevice
		x    HWMeasure
		want string
	}{
		{"no model", HWModel{}, HWDevice{BandwidthGBs: 1}, HWMeasure{ITLMs: 1}, "parameter count"},
		{"no gpu", llama3_8b, HWDevice{}, HWMeasure{ITLMs: 1}, "peak bandwidth or TFLOPS"},
		{"no measure", llama3_8b, HWDevice{BandwidthGBs: 2039}, HWMeasure{}, "give a decode ITL"},
		{"impossible", llama3_8b, HWDevice{BandwidthGBs: 2039}, HWMeasure{ITLMs: 1}, "check the model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := HardwareEfficiency(tc.m, tc.d, tc.x)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

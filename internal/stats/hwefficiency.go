package stats

import (
	"errors"
	"fmt"
	"math"
)

// HWModel is what the efficiency estimate needs of a model's architecture
// (the simulator's catalog has these for known models).
type HWModel struct {
	// ParamsB is the parameter count read per decode step, in billions
	// (active parameters for a mixture of experts).
	ParamsB float64
	Layers  int
	Hidden  int // hidden size = query heads × head dim
	KVHeads int
	HeadDim int
	// WeightBytes per parameter (2 for bf16/fp16, 1 for fp8/int8) and
	// KVBytes per cached element; 0 means 2.
	WeightBytes float64
	KVBytes     float64
}

// HWDevice is the hardware serving one replica.
type HWDevice struct {
	// BandwidthGBs is one GPU's peak memory bandwidth (GB/s, 1e9 bytes) and
	// TFLOPS its dense peak for the dtype in use.
	BandwidthGBs float64
	TFLOPS       float64
	// GPUs per replica (tensor parallel); 0 means 1.
	GPUs int
}

// HWMeasure is what was measured.
type HWMeasure struct {
	// ITLMs is the decode step time (median inter-token latency).
	ITLMs float64
	// Batch is the number of sequences decoding together (the mean
	// concurrency at the server; 1 for a lone request); 0 means 1.
	Batch float64
	// Context is the mean number of tokens in each sequence's KV cache
	// during decode (prompt + half the output).
	Context float64
	// TTFTMs and PromptTokens describe prefill; TTFTMs should be from an
	// idle server (no queueing) for the compute figure to mean much.
	TTFTMs       float64
	PromptTokens float64
}

// HWEfficiency is the article's §2.2 table for one configuration.
type HWEfficiency struct {
	// Decode: bytes read per step (weights once plus every sequence's KV
	// cache), achieved bandwidth and its share of the peak.
	BytesPerStep  float64 `json:"bytes_per_step"`
	AchievedGBs   float64 `json:"achieved_gbs"`
	PeakGBs       float64 `json:"peak_gbs"`
	BandwidthUtil float64 `json:"bandwidth_util"`
	// Prefill: FLOPs of the prompt (2·params·n for the matrix products plus
	// 2·layers·n²·hidden for causal attention), achieved rate and share.
	// TTFT includes network, queueing and scheduling time, so this is a
	// lower bound on the compute utilisation of prefill itself.
	PrefillFLOPs   float64 `json:"prefill_flops"`
	AchievedTFLOPS float64 `json:"achieved_tflops"`
	PeakTFLOPS     float64 `json:"peak_tflops"`
	ComputeUtil    float64 `json:"compute_util"`
}

// HardwareEfficiency estimates achieved memory-bandwidth utilisation from
// decode ITL and compute utilisation from prefill TTFT. Either half is NaN
// when its measurement is missing.
func HardwareEfficiency(m HWModel, d HWDevice, x HWMeasure) (HWEfficiency, error) {
	if !(m.ParamsB > 0) {
		return HWEfficiency{}, errors.New("hardware efficiency: the model's parameter count must be positive")
	}
	if !(d.BandwidthGBs > 0) && !(d.TFLOPS > 0) {
		return HWEfficiency{}, errors.New("hardware efficiency: the GPU needs a peak bandwidth or TFLOPS")
	}
	wb, kb := m.WeightBytes, m.KVBytes
	if wb == 0 {
		wb = 2
	}
	if kb == 0 {
		kb = 2
	}
	gpus := d.GPUs
	if gpus <= 0 {
		gpus = 1
	}
	batch := x.Batch
	if batch <= 0 {
		batch = 1
	}
	nan := math.NaN()
	e := HWEfficiency{AchievedGBs: nan, BandwidthUtil: nan, AchievedTFLOPS: nan, ComputeUtil: nan, PrefillFLOPs: nan, BytesPerStep: nan}
	e.PeakGBs = d.BandwidthGBs * float64(gpus)
	e.PeakTFLOPS = d.TFLOPS * float64(gpus)
	if x.ITLMs > 0 {
		kvPerToken := 2 * float64(m.Layers) * float64(m.KVHeads) * float64(m.HeadDim) * kb
		e.BytesPerStep = m.ParamsB*1e9*wb + batch*x.Context*kvPerToken
		e.AchievedGBs = e.BytesPerStep / (x.ITLMs / 1000) / 1e9
		if e.PeakGBs > 0 {
			e.BandwidthUtil = e.AchievedGBs / e.PeakGBs
		}
	}
	if x.TTFTMs > 0 && x.PromptTokens > 0 {
		n := x.PromptTokens
		e.PrefillFLOPs = 2*m.ParamsB*1e9*n + 2*float64(m.Layers)*n*n*float64(m.Hidden)
		e.AchievedTFLOPS = e.PrefillFLOPs / (x.TTFTMs / 1000) / 1e12
		if e.PeakTFLOPS > 0 {
			e.ComputeUtil = e.AchievedTFLOPS / e.PeakTFLOPS
		}
	}
	if math.IsNaN(e.AchievedGBs) && math.IsNaN(e.AchievedTFLOPS) {
		return e, errors.New("hardware efficiency: give a decode ITL or a prefill TTFT with its prompt length")
	}
	// A little over 100% is measurement noise; much more means the inputs
	// describe a different setup (more GPUs, a smaller dtype, speculative
	// decoding emitting several tokens per step).
	if e.BandwidthUtil > 1.05 {
		return e, fmt.Errorf("hardware efficiency: the decode ITL implies %.0f%% of peak bandwidth — check the model, GPU count and dtype", 100*e.BandwidthUtil)
	}
	if e.ComputeUtil > 1.05 {
		return e, fmt.Errorf("hardware efficiency: the prefill TTFT implies %.0f%% of peak compute — check the model, GPU count, dtype and prompt length", 100*e.ComputeUtil)
	}
	return e, nil
}

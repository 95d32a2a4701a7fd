package analysis

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/stats"
)

// EfficiencyRequest asks how much of a GPU's peak memory bandwidth decode
// achieves and how much of its peak compute prefill achieves.
type EfficiencyRequest struct {
	// Model and GPU name a model architecture and a GPU in the simulator's
	// catalog; GPUs is the tensor-parallel degree (0 counts as 1).
	Model, GPU string
	GPUs       int
	// Dtype is the weights' ("bf16", "fp16", "fp8", "int8", "int4",
	// "fp32"); KVDtype the KV cache's (empty: Dtype, or bf16 for int8 and
	// int4 weights).
	Dtype, KVDtype string
	// Measure holds the measured numbers; zero fields are read from Run.
	Measure stats.HWMeasure
	// Run, when set, is a run directory or a stored run: its median ITL and
	// TTFT, mean prompt length, mean context during decode and
	// "concurrency" label (as the batch) fill what Measure leaves zero.
	Run string
}

// EfficiencyResult is the answer and what it was computed from.
type EfficiencyResult struct {
	// Model and GPU are the catalog's names.
	Model, GPU string
	GPUs       int
	// Dtype and KVDtype as used (KVDtype resolved).
	Dtype, KVDtype string
	// Measure is the request's, completed from the run.
	Measure    stats.HWMeasure
	Efficiency stats.HWEfficiency
}

// Efficiency looks the model and GPU up in the simulator's catalog, reads
// the run (if any) through in, and calls stats.HardwareEfficiency. Errors
// in Dtype and KVDtype are *OptionError naming "dtype" and "kv-dtype".
func Efficiency(ctx context.Context, in Inputs, req EfficiencyRequest) (*EfficiencyResult, error) {
	res := &EfficiencyResult{GPUs: max(req.GPUs, 1), Dtype: req.Dtype, Measure: req.Measure}
	m, d, err := hardware(req, res)
	if err != nil {
		return nil, err
	}
	if req.Run != "" {
		r, err := ResolveRun(ctx, in.Store, req.Run)
		if err != nil {
			return nil, err
		}
		res.Measure = measureFromRun(r, res.Measure)
	}
	if res.Efficiency, err = stats.HardwareEfficiency(m, d, res.Measure); err != nil {
		return nil, err
	}
	return res, nil
}

// hardware is the model and device of a request, from the catalog; it
// fills res's names and resolved KV dtype.
func hardware(req EfficiencyRequest, res *EfficiencyResult) (stats.HWModel, stats.HWDevice, error) {
	cat := sim.DefaultCatalog()
	m, err := cat.Model(req.Model)
	if err != nil {
		return stats.HWModel{}, stats.HWDevice{}, err
	}
	g, err := cat.GPU(req.GPU)
	if err != nil {
		return stats.HWModel{}, stats.HWDevice{}, err
	}
	wb, err := DtypeBytes(req.Dtype)
	if err != nil {
		return stats.HWModel{}, stats.HWDevice{}, optionErr("dtype", err)
	}
	kvd := req.KVDtype
	if kvd == "" {
		kvd = req.Dtype
		if strings.EqualFold(kvd, "int8") || strings.EqualFold(kvd, "int4") {
			kvd = "bf16"
		}
	}
	kb, err := DtypeBytes(kvd)
	if err != nil {
		return stats.HWModel{}, stats.HWDevice{}, optionErr("kv-dtype", err)
	}
	tflops := g.TFLOPS[strings.ToLower(req.Dtype)]
	if tflops == 0 {
		tflops = g.TFLOPS["bf16"]
	}
	if tflops == 0 {
		tflops = g.TFLOPS["fp16"]
	}
	params := m.ParamsB
	if m.ActiveParamsB > 0 {
		params = m.ActiveParamsB
	}
	res.Model, res.GPU, res.KVDtype = m.Name, g.Name, kvd
	return stats.HWModel{ParamsB: params, Layers: m.Layers, Hidden: m.Heads * m.HeadDim, KVHeads: m.KVHeads, HeadDim: m.HeadDim, WeightBytes: wb, KVBytes: kb},
		stats.HWDevice{BandwidthGBs: g.BandwidthGBs, TFLOPS: tflops, GPUs: req.GPUs}, nil
}

// measureFromRun fills the zero fields of x from a run: median ITL and
// TTFT, mean prompt tokens, mean context during decode (the prompt plus
// half the output), and the concurrency label (or flag) as the batch.
func measureFromRun(r *Run, x stats.HWMeasure) stats.HWMeasure {
	s := r.Summary
	if x.ITLMs == 0 {
		x.ITLMs = s.ITL.P50
	}
	if x.TTFTMs == 0 {
		x.TTFTMs = s.TTFT.P50
	}
	if done := float64(s.Requests.Completed); done > 0 {
		prompt, out := float64(s.Tokens.Input()), float64(s.Tokens.Output())
		if x.PromptTokens == 0 {
			x.PromptTokens = prompt / done
		}
		if x.Context == 0 {
			x.Context = (prompt + out/2) / done
		}
	}
	if x.Batch == 0 {
		if _, v, ok := r.Label([]string{"concurrency"}); ok {
			if b, err := strconv.ParseFloat(v, 64); err == nil {
				x.Batch = b
			}
		}
	}
	return x
}

// DtypeBytes is the size of one element of a dtype in bytes.
func DtypeBytes(d string) (float64, error) {
	switch strings.ToLower(d) {
	case "bf16", "fp16", "float16", "bfloat16":
		return 2, nil
	case "fp8", "int8":
		return 1, nil
	case "fp32", "float32":
		return 4, nil
	case "int4", "fp4":
		return 0.5, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (want bf16, fp16, fp8, int8, int4 or fp32)", d)
}

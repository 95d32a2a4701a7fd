package sim

import (
	"fmt"
	"strings"
)

// weightFormat is how a checkpoint stores its weights: bytes per weight of
// the quantized linear layers (group scales and zero points included),
// whether the embedding table and LM head keep 16-bit, and whether the math
// stays 16-bit (weight-only formats unpack weights before multiplying).
type weightFormat struct {
	name       string
	bytesPerW  float64 // quantized tensors, metadata included
	keepHead   bool    // embeddings and LM head stay 16-bit
	weightOnly bool    // 16-bit math on unpacked weights
}

// defaultQuantGroup is AWQ's and GPTQ's default group size.
const defaultQuantGroup = 128

// parseWeightFormat maps a --quantization value to its storage cost.
//
//   - int8 / w8a16: 8-bit weights, one 16-bit scale per group, symmetric;
//     every tensor quantized (llama.cpp Q8_0 is group 32).
//   - int4: 4-bit weights, one 16-bit scale per group, symmetric; every
//     tensor quantized (llama.cpp Q4_0 is group 32).
//   - awq / gptq: 4-bit weights, a 16-bit scale and a packed 4-bit zero
//     point per group (asymmetric); as AutoAWQ and GPTQ checkpoints ship,
//     the embedding table and LM head stay 16-bit.
//   - fp8: W8A8 where the GPU has FP8 tensor cores (per-tensor scales,
//     negligible), weight-only otherwise.
func parseWeightFormat(q string, group int) (weightFormat, error) {
	if group < 0 {
		return weightFormat{}, fmt.Errorf("quant group size %d must be positive (0: %d)", group, defaultQuantGroup)
	}
	if group == 0 {
		group = defaultQuantGroup
	}
	g := float64(group)
	name := strings.ToLower(q)
	switch name {
	case "", "none", "auto", "bf16", "fp16":
		return weightFormat{name: "bf16", bytesPerW: 2}, nil
	case "fp8":
		return weightFormat{name: name, bytesPerW: 1}, nil
	case "int8", "w8a16":
		return weightFormat{name: "int8", bytesPerW: 1 + 2/g, weightOnly: true}, nil
	case "int4", "w4a16":
		return weightFormat{name: "int4", bytesPerW: 0.5 + 2/g, weightOnly: true}, nil
	case "awq", "gptq":
		return weightFormat{name: name, bytesPerW: 0.5 + 2.5/g, keepHead: true, weightOnly: true}, nil
	}
	return weightFormat{}, fmt.Errorf("unknown quantization %q (known: fp8, int8, int4, awq, gptq; empty for bf16/fp16)", q)
}

// modelBytes is the whole model's weight bytes in this format.
func (f weightFormat) modelBytes(m *Model) float64 {
	params := m.ParamsB * 1e9
	if !f.keepHead {
		return params * f.bytesPerW
	}
	head := float64(m.Vocab) * float64(m.Hidden) // embedding table
	if !m.TiedEmbeddings {
		head *= 2 // plus the LM head
	}
	head = min(head, params)
	return (params-head)*f.bytesPerW + head*2
}

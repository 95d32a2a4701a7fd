package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// LoadedMeasurement is one published TTFT figure measured under load: a
// closed loop at fixed concurrency (or an open loop at Rate req/s) of
// fixed-length requests, as `vllm bench serve --max-concurrency C
// --random-input-len P --random-output-len O --ignore-eos` runs it.
type LoadedMeasurement struct {
	Source      string // where the figure comes from
	Split       string // "calibration" (used to set profile factors) or "held-out"
	Engine      string
	Model       string
	GPU         string
	TP          int
	MemUtil     float64 // --gpu-memory-utilization (0: default)
	MaxModelLen int     // --max-model-len (0: default)
	Prompt      int
	Output      int
	Concurrency int     // closed loop; 0 means open loop at Rate
	Rate        float64 // open loop, req/s (Poisson)
	Requests    int     // 0: 20 × concurrency (at least 40)
	TTFTP50Ms   float64 // measured median TTFT
}

// LoadedSet holds public loaded sweeps (docs/simulator-validation.md). The
// rows marked calibration set the vllm-4vcpu profile's api_overhead_ms and
// api_inflight_ms (a grid search on squared log error); the held-out rows
// were not used to choose them.
var LoadedSet = []LoadedMeasurement{
	// ai.wmx.dev/benchmarks: vLLM v0.23.0 (V1), Qwen2.5-0.5B-Instruct BF16
	// on 1× L4 (GKE g2-standard-4, 4 vCPUs), --gpu-memory-utilization 0.6
	// --max-model-len 8192, 256-token inputs, 128-token outputs, closed loop.
	{Source: "wmx L4 vLLM 0.23", Split: "calibration", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 1, TTFTP50Ms: 27.0},
	{Source: "wmx L4 vLLM 0.23", Split: "held-out", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 2, TTFTP50Ms: 37.8},
	{Source: "wmx L4 vLLM 0.23", Split: "held-out", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 4, TTFTP50Ms: 50.1},
	{Source: "wmx L4 vLLM 0.23", Split: "calibration", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 8, TTFTP50Ms: 60.9},
	{Source: "wmx L4 vLLM 0.23", Split: "held-out", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 16, TTFTP50Ms: 103.8},
	{Source: "wmx L4 vLLM 0.23", Split: "calibration", Engine: "vllm-4vcpu", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1, MemUtil: 0.6, MaxModelLen: 8192, Prompt: 256, Output: 128, Concurrency: 32, TTFTP50Ms: 135.3},
	// mushfiqrahman.dev/?p=1668: vLLM (OpenAI server, --tokenizer-mode
	// mistral; version not stated), Mistral-7B-Instruct-v0.3 BF16 on one
	// RTX 4090, 256-token inputs, 128-token max outputs (≈ 100 generated on
	// average: output tok/s ÷ req/s), 300 prompts, closed loop at fixed
	// concurrency. Host not stated: simulated with the default vllm profile.
	{Source: "mushfiq 4090 vLLM", Split: "held-out", Engine: "vllm", Model: "mistral-7b", GPU: "rtx-4090", TP: 1, Prompt: 256, Output: 100, Concurrency: 4, Requests: 300, TTFTP50Ms: 53},
	{Source: "mushfiq 4090 vLLM", Split: "held-out", Engine: "vllm", Model: "mistral-7b", GPU: "rtx-4090", TP: 1, Prompt: 256, Output: 100, Concurrency: 8, Requests: 300, TTFTP50Ms: 55},
	{Source: "mushfiq 4090 vLLM", Split: "held-out", Engine: "vllm", Model: "mistral-7b", GPU: "rtx-4090", TP: 1, Prompt: 256, Output: 100, Concurrency: 16, Requests: 300, TTFTP50Ms: 97},
	{Source: "mushfiq 4090 vLLM", Split: "held-out", Engine: "vllm", Model: "mistral-7b", GPU: "rtx-4090", TP: 1, Prompt: 256, Output: 100, Concurrency: 32, Requests: 300, TTFTP50Ms: 277},
	{Source: "mushfiq 4090 vLLM", Split: "held-out", Engine: "vllm", Model: "mistral-7b", GPU: "rtx-4090", TP: 1, Prompt: 256, Output: 100, Concurrency: 48, Requests: 300, TTFTP50Ms: 840},
}

// LoadedRow is one loaded measurement with the simulator's prediction.
type LoadedRow struct {
	LoadedMeasurement
	PredMs    float64 // simulated median TTFT
	PredITLMs float64 // simulated median inter-token latency
	PredRPS   float64 // simulated request throughput
	ErrPct    float64
}

// ValidateLoaded runs each loaded measurement through the offline runner
// (the same engine and front-end model as `ttft sim run`).
func ValidateLoaded(ctx context.Context, cat *Catalog, set []LoadedMeasurement) ([]LoadedRow, error) {
	if cat == nil {
		cat = DefaultCatalog()
	}
	rows := make([]LoadedRow, 0, len(set))
	for _, m := range set {
		d, err := Resolve(cat, Config{Model: m.Model, GPU: m.GPU, TensorParallelSize: m.TP, Engine: m.Engine, GPUMemoryUtilization: m.MemUtil, MaxModelLen: m.MaxModelLen})
		if err != nil {
			return nil, fmt.Errorf("loaded validation row %s %s c%d: %w", m.Model, m.GPU, m.Concurrency, err)
		}
		n := m.Requests
		if n <= 0 {
			n = max(40, 20*m.Concurrency)
		}
		opt := RunOptions{Concurrency: m.Concurrency, Rate: m.Rate, Seed: 1}
		if m.Concurrency > 0 {
			// A deterministic engine keeps equal-length requests that start
			// together in lockstep for ever (every prefill shares a step with
			// all the others); real clients drift apart within a few rounds
			// (network, front-end and step-time noise), so the measured
			// medians are of a staggered steady state. Start the workers
			// evenly over one request's lifetime and leave the first round
			// out of the statistics.
			life := d.PrefillTime(m.Prompt, 0).Total + float64(m.Output)*d.DecodeTime(m.Concurrency, m.Prompt+m.Output/2).Total
			opt.RampUp = time.Duration(life * 1e9)
			opt.Warmup = m.Concurrency
		}
		src := &LengthSource{PromptTokens: m.Prompt, MaxTokens: m.Output, MinTokens: m.Output, Requests: n + opt.Warmup}
		var ttft, itl []float64
		st, err := Run(ctx, d, src, opt, func(r *record.Record) error {
			if r.OK() && !r.Warmup {
				ttft = append(ttft, r.TTFTMs)
				itl = append(itl, r.ITLMs...)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("loaded validation row %s %s c%d: %w", m.Model, m.GPU, m.Concurrency, err)
		}
		if len(ttft) == 0 {
			return nil, fmt.Errorf("loaded validation row %s %s c%d: no request succeeded", m.Model, m.GPU, m.Concurrency)
		}
		pred := medianOf(ttft)
		row := LoadedRow{LoadedMeasurement: m, PredMs: pred, PredITLMs: medianOf(itl), ErrPct: (pred - m.TTFTP50Ms) / m.TTFTP50Ms * 100}
		if st.Virtual > 0 {
			row.PredRPS = float64(len(ttft)) / st.Virtual.Seconds()
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// LoadedMedianAbsErr is the median |error| over the rows of one split ("" =
// all rows).
func LoadedMedianAbsErr(rows []LoadedRow, split string) (float64, int) {
	var v []ValidationRow
	for _, r := range rows {
		if split == "" || r.Split == split {
			v = append(v, ValidationRow{ErrPct: r.ErrPct})
		}
	}
	return MedianAbsErr(v), len(v)
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

package sim

import (
	"fmt"
	"math"
	"sort"
)

// Measurement is one published TTFT figure the simulator is checked against.
type Measurement struct {
	Source string // where the figure comes from
	Engine string // engine profile to simulate it with
	Model  string
	GPU    string
	TP     int
	Quant  string // "" or "fp8"
	Prompt int
	Batch  int // concurrent identical requests arriving together
	TTFTMs float64
}

// ValidationSet is the public calibration data
// (shared/reference/public-ttft-data.md): TensorRT-LLM v0.5 batch-1
// first-token latency, NVIDIA/TensorRT-LLM docs/source/performance.md.
var ValidationSet = []Measurement{
	{"TRT-LLM v0.5", "trtllm", "gpt-j-6b", "h100-sxm", 1, "fp8", 128, 1, 7},
	{"TRT-LLM v0.5", "trtllm", "gpt-j-6b", "h100-sxm", 1, "fp8", 2048, 1, 29},
	{"TRT-LLM v0.5", "trtllm", "gpt-j-6b", "a100-80gb", 1, "", 128, 1, 12},
	{"TRT-LLM v0.5", "trtllm", "gpt-j-6b", "a100-80gb", 1, "", 2048, 1, 129},
	{"TRT-LLM v0.5", "trtllm", "llama-2-7b", "h100-sxm", 1, "fp8", 128, 1, 7},
	{"TRT-LLM v0.5", "trtllm", "llama-2-7b", "h100-sxm", 1, "fp8", 2048, 1, 36},
	{"TRT-LLM v0.5", "trtllm", "llama-2-7b", "a100-80gb", 1, "", 128, 1, 16},
	{"TRT-LLM v0.5", "trtllm", "llama-2-7b", "a100-80gb", 1, "", 2048, 1, 133},
	{"TRT-LLM v0.5", "trtllm", "llama-2-70b", "h100-sxm", 4, "fp8", 128, 1, 26},
	{"TRT-LLM v0.5", "trtllm", "llama-2-70b", "h100-sxm", 4, "fp8", 2048, 1, 109},
	{"TRT-LLM v0.5", "trtllm", "llama-2-70b", "a100-80gb", 4, "", 128, 1, 47},
	{"TRT-LLM v0.5", "trtllm", "llama-2-70b", "a100-80gb", 4, "", 2048, 1, 377},
	{"TRT-LLM v0.5", "trtllm", "falcon-180b", "h100-sxm", 8, "fp8", 128, 1, 27},
	{"TRT-LLM v0.5", "trtllm", "falcon-180b", "h100-sxm", 8, "fp8", 2048, 1, 205},
	{"TRT-LLM v0.5", "trtllm", "falcon-180b", "a100-80gb", 8, "", 128, 1, 61},
	{"TRT-LLM v0.5", "trtllm", "falcon-180b", "a100-80gb", 8, "", 2048, 1, 509},
}

// ValidationRow is one measurement with the simulator's prediction.
type ValidationRow struct {
	Measurement
	PredMs float64
	ErrPct float64 // (pred − measured) / measured × 100
}

// Validate predicts every measurement. Batch-1 rows are one prefill step
// plus the engine's API overhead; rows with Batch > 1 run the full engine.
func Validate(cat *Catalog, set []Measurement) ([]ValidationRow, error) {
	if cat == nil {
		cat = DefaultCatalog()
	}
	rows := make([]ValidationRow, 0, len(set))
	for _, m := range set {
		d, err := Resolve(cat, Config{Model: m.Model, GPU: m.GPU, TensorParallelSize: m.TP, Quantization: m.Quant, Engine: m.Engine, MaxModelLen: max(4096, m.Prompt+16), AllowLongMaxModelLen: true})
		if err != nil {
			return nil, fmt.Errorf("validation row %s %s tp%d: %w", m.Model, m.GPU, m.TP, err)
		}
		pred, err := predictTTFT(d, m.Prompt, max(1, m.Batch))
		if err != nil {
			return nil, err
		}
		rows = append(rows, ValidationRow{Measurement: m, PredMs: pred, ErrPct: (pred - m.TTFTMs) / m.TTFTMs * 100})
	}
	return rows, nil
}

// predictTTFT runs batch identical requests arriving together (output 1
// token) through the engine and returns their mean TTFT in ms.
func predictTTFT(d *Deployment, prompt, batch int) (float64, error) {
	e := NewEngine(d)
	api := d.APIDelay(0)
	seqs := make([]*Seq, batch)
	for i := range seqs {
		s, err := e.NewSeq(prompt, 1, nil)
		if err != nil {
			return 0, err
		}
		seqs[i] = s
		e.Add(s, api)
	}
	now := api
	for e.HasWork() {
		now = e.Step(now).End
	}
	var sum float64
	for _, s := range seqs {
		sum += float64(s.FirstTokenAt) / 1e6
	}
	return sum / float64(batch), nil
}

// MedianAbsErr is the median of |ErrPct| over rows.
func MedianAbsErr(rows []ValidationRow) float64 {
	if len(rows) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = math.Abs(r.ErrPct)
	}
	sort.Float64s(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

package sim

import (
	"context"
	"fmt"
	"math"
	"sort"
)

// PhysicsScales multiply the physics factors of every GPU engine profile:
// one number per physical effect, shared by all engines, so a fit moves
// the hardware model, not any one row. 1 leaves a factor as it is.
type PhysicsScales struct {
	Compute float64 // compute_eff_max (16-bit GEMM efficiency)
	FP8     float64 // fp8_compute_eff_max on NVIDIA GPUs (cuBLASLt/CUTLASS FP8 GEMMs)
	// FP8AMD is fp8_compute_eff_max on AMD GPUs: FP8 GEMM efficiency is a
	// property of the vendor's kernel library (hipBLASLt on ROCm) as much as
	// of the engine, so one vendor's FP8 kernels say nothing of the other's.
	FP8AMD float64
	Mem    float64 // mem_eff on NVIDIA GPUs (HBM bandwidth reached streaming weights and KV)
	// MemAMD is mem_eff on AMD GPUs. The fraction of the datasheet
	// bandwidth a streaming kernel reaches is a property of the memory
	// system — HBM controllers, the on-die fabric and caches between them
	// and the cores (MI300X: eight compute dies reaching HBM through
	// Infinity Fabric and a 256 MB Infinity Cache; NVIDIA: one L2) — so,
	// as for FP8 GEMMs, one vendor's says nothing of the other's.
	MemAMD    float64
	Layer     float64 // layer_overhead_us and decode_layer_overhead_us
	Step      float64 // step_overhead_ms
	AllReduce float64 // allreduce_latency_us
}

// UnitScales leaves every factor unchanged.
func UnitScales() PhysicsScales { return PhysicsScales{1, 1, 1, 1, 1, 1, 1, 1} }

func (s *PhysicsScales) fields() []*float64 {
	return []*float64{&s.Compute, &s.FP8, &s.FP8AMD, &s.Mem, &s.MemAMD, &s.Layer, &s.Step, &s.AllReduce}
}

// apply scales one profile's physics factors for a GPU of the given
// vendor; efficiencies stay below 0.95 (no kernel reaches its datasheet
// peak).
func (s PhysicsScales) apply(p EngineProfile, vendor string) EngineProfile {
	clamp := func(v float64) float64 { return math.Min(0.95, v) }
	p.ComputeEffMax = clamp(p.ComputeEffMax * s.Compute)
	if p.FP8ComputeEffMax > 0 {
		f := s.FP8
		if vendor == "amd" {
			f = s.FP8AMD
		}
		p.FP8ComputeEffMax = clamp(p.FP8ComputeEffMax * f)
	}
	if vendor == "amd" {
		p.MemEff = clamp(p.MemEff * s.MemAMD)
	} else {
		p.MemEff = clamp(p.MemEff * s.Mem)
	}
	p.LayerOverheadUs *= s.Layer
	p.DecodeLayerOverheadUs *= s.Layer
	p.StepOverheadMs *= s.Step
	p.AllReduceLatencyUs *= s.AllReduce
	return p
}

// CorpusResult is one row with its prediction and errors (percent; NaN where
// the row publishes no such figure).
type CorpusResult struct {
	CorpusRow
	Pred                          CorpusPred
	TTFTErr, ITLErr, E2EErr, TErr float64
	// Fold is the source left out when this prediction was made ("" for an
	// in-sample run).
	Fold string
	// Scales are the factors fitted without this row's source.
	Scales PhysicsScales
}

func pctErr(pred, meas float64) float64 {
	if pred <= 0 || meas <= 0 {
		return math.NaN()
	}
	return (pred - meas) / meas * 100
}

// evalRows predicts rows on cat scaled by s.
func evalRows(ctx context.Context, cat *Catalog, rows []CorpusRow, s PhysicsScales) ([]CorpusResult, error) {
	out := make([]CorpusResult, 0, len(rows))
	for i := range rows {
		r := &rows[i]
		d, err := resolveRow(cat, r)
		if err != nil {
			return nil, err
		}
		// The scales touch step times only, not memory sizing: swap the
		// profile after resolving.
		d.Profile = s.apply(d.Profile, d.GPU.Vendor)
		p, err := predictRow(ctx, d, r)
		if err != nil {
			return nil, err
		}
		out = append(out, CorpusResult{CorpusRow: *r, Pred: p, Scales: s,
			TTFTErr: pctErr(p.TTFTMs, r.TTFTMs), ITLErr: pctErr(p.ITLMs, r.ITLMs),
			E2EErr: pctErr(p.E2EMs, r.E2EMs), TErr: pctErr(p.Tput, r.Tput)})
	}
	return out, nil
}

// fitRow is a training row resolved once; the fit swaps its profile.
type fitRow struct {
	row  *CorpusRow
	d    *Deployment
	base EngineProfile
	w    float64 // 1 / rows of its source: every source weighs the same
}

// cheap says whether a row is timed without a simulation run (one prefill,
// or a static batch's closed-form sum of steps), so a fit may evaluate it
// hundreds of times.
func cheap(r *CorpusRow) bool { return r.Load == LoadBatch1 || r.Load == LoadStatic }

// FitPhysics searches the physics scales that minimise the mean squared log
// error of the cheap rows (batch-1 and static batches) of rows, each
// source weighted equally, by a coarse coordinate search in log space.
// Served loads (closed loop, open loop, bursts) do not enter the fit: they
// take a simulation each and depend on the same step times.
func FitPhysics(cat *Catalog, rows []CorpusRow) (PhysicsScales, float64, error) {
	perSource := map[string]int{}
	for i := range rows {
		if cheap(&rows[i]) {
			perSource[rows[i].Source]++
		}
	}
	var fr []fitRow
	for i := range rows {
		r := &rows[i]
		if !cheap(r) {
			continue
		}
		d, err := resolveRow(cat, r)
		if err != nil {
			return UnitScales(), 0, err
		}
		fr = append(fr, fitRow{row: r, d: d, base: d.Profile, w: 1 / float64(perSource[r.Source])})
	}
	s := UnitScales()
	if len(fr) == 0 {
		return s, 0, nil
	}
	loss := func(s PhysicsScales) float64 {
		var sum, wsum float64
		for _, f := range fr {
			dd := *f.d
			dd.Profile = s.apply(f.base, f.d.GPU.Vendor)
			p := predictStatic0(&dd, f.row)
			for _, pm := range [][2]float64{{p.TTFTMs, f.row.TTFTMs}, {p.E2EMs, f.row.E2EMs}, {p.Tput, f.row.Tput}, {p.ITLMs, f.row.ITLMs}} {
				if e, ok := logErr(pm[0], pm[1]); ok {
					sum += f.w * e * e
					wsum += f.w
				}
			}
		}
		var pen float64
		for _, q := range s.fields() {
			l := math.Log(*q)
			pen += l * l
		}
		if wsum == 0 {
			return fitPenalty * pen
		}
		return sum/wsum + fitPenalty*pen
	}
	best := loss(s)
	// Coarse to fine: each factor moves by ×2^±step while it helps.
	for _, step := range []float64{0.5, 0.25, 0.1, 0.04} {
		for round := 0; round < 3; round++ {
			improved := false
			for i := range s.fields() {
				for _, dir := range []float64{1, -1} {
					for {
						t := s
						q := t.fields()[i]
						*q *= math.Exp2(dir * step)
						if *q < 0.2 || *q > 5 {
							break
						}
						l := loss(t)
						if l >= best-1e-12 {
							break
						}
						s, best, improved = t, l, true
					}
				}
			}
			if !improved {
				break
			}
		}
	}
	return s, best, nil
}

// predictStatic0 predicts a cheap row without the runner.
func predictStatic0(d *Deployment, r *CorpusRow) CorpusPred {
	if r.Load == LoadBatch1 {
		return CorpusPred{TTFTMs: float64(d.APIDelay(0))/1e6 + d.PrefillTime(r.Prompt, 0).Total*1e3}
	}
	return predictStatic(d, r)
}

// Priors of the leave-one-source-out fit. The shipped profiles' physics
// were fitted to the TensorRT-LLM v0.5 batch-1 table, which is part of the
// corpus, so the folds start instead from values taken from public figures
// outside it (shared/reference/public-ttft-data.md and the notes),
// and a fold moves away from them only as far as its training sources
// demand:
//
//	compute_eff_max 0.63      midpoint of the 0.57–0.69 of peak reported for A100 prefill at 2k tokens
//	fp8_compute_eff_max 0.5   early FP8 GEMMs reached about half of the FP8 peak
//	compute_half_tokens 64    a 64-row tensor-core tile: smaller batches leave it part-empty
//	                          (at the H100 SXM's machine balance; other GPUs scale it by theirs)
//	mem_eff 0.8               decode reaches 0.56–0.66 of HBM bandwidth end to end, overheads added apart
//	layer_overhead_us 100     launches and small ops: the ≈ 10 ms fixed cost of a short 70B prefill over 80 layers
//	allreduce_latency_us 30   NCCL small-message all-reduce latency within a node
const (
	priorComputeEff  = 0.63
	priorFP8Eff      = 0.5
	priorHalfTokens  = 64
	priorMemEff      = 0.8
	priorLayerUs     = 100
	priorAllReduceUs = 30
	// fitPenalty is the cost of moving a factor by a factor e (per
	// squared natural log), in units of the squared log error of an
	// average source: doubling a factor costs as much as a 12 % rms
	// error, so two sources cannot drag the shared physics far alone.
	fitPenalty = 0.03
)

// LOSOPriors is cat with every GPU engine profile's physics factors set to
// the public-figure priors above (front-end, scheduler and memory-reserve
// factors, and CPU/edge profiles, are kept).
func LOSOPriors(cat *Catalog) *Catalog {
	out := *cat
	out.Engines = make([]EngineProfile, len(cat.Engines))
	for i, p := range cat.Engines {
		if p.ComputeHalfTokens > 1 { // GPU profiles (CPU ones fill at one token)
			p.ComputeEffMax = priorComputeEff
			p.FP8ComputeEffMax = priorFP8Eff
			p.ComputeHalfTokens = priorHalfTokens
			p.MemEff = priorMemEff
			p.LayerOverheadUs = priorLayerUs
			p.AllReduceLatencyUs = priorAllReduceUs
		}
		out.Engines[i] = p
	}
	return &out
}

// LOSOResult is a leave-one-source-out evaluation.
type LOSOResult struct {
	Rows []CorpusResult
	// Folds are the scales fitted without each source.
	Folds map[string]PhysicsScales
}

// LeaveOneSourceOut fits the physics on all sources but one and predicts
// the one left out, for every source: no row is predicted by factors its
// own source helped fit. cat supplies the engine profiles, whose physics
// factors are replaced by LOSOPriors before fitting.
func LeaveOneSourceOut(ctx context.Context, cat *Catalog, rows []CorpusRow) (*LOSOResult, error) {
	cat = LOSOPriors(cat)
	var sources []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Source] {
			seen[r.Source] = true
			sources = append(sources, r.Source)
		}
	}
	res := &LOSOResult{Folds: map[string]PhysicsScales{}}
	for _, src := range sources {
		var train, test []CorpusRow
		for _, r := range rows {
			if r.Source == src {
				test = append(test, r)
			} else {
				train = append(train, r)
			}
		}
		s, _, err := FitPhysics(cat, train)
		if err != nil {
			return nil, fmt.Errorf("fold %s: %w", src, err)
		}
		res.Folds[src] = s
		out, err := evalRows(ctx, cat, test, s)
		if err != nil {
			return nil, fmt.Errorf("fold %s: %w", src, err)
		}
		for i := range out {
			out[i].Fold = src
		}
		res.Rows = append(res.Rows, out...)
	}
	return res, nil
}

// EvalCorpus predicts every row with cat scaled by s (an in-sample check
// when s was fitted on the same rows).
func EvalCorpus(ctx context.Context, cat *Catalog, rows []CorpusRow, s PhysicsScales) ([]CorpusResult, error) {
	return evalRows(ctx, cat, rows, s)
}

// CorpusSummary is the median |error| per figure and load category.
type CorpusSummary struct {
	Name   string // e.g. "TTFT closed"
	N      int
	Median float64 // median |error| %
}

// Summarize groups the errors: TTFT by category (batch1, static, closed,
// rate) and overall; throughput (throughput and static end-to-end time,
// its inverse) by category and overall; ITL overall.
func Summarize(rs []CorpusResult) []CorpusSummary {
	group := map[string][]float64{}
	add := func(k string, v float64) {
		if !math.IsNaN(v) {
			group[k] = append(group[k], math.Abs(v))
		}
	}
	for _, r := range rs {
		c := r.Category()
		add("TTFT "+c, r.TTFTErr)
		add("TTFT all", r.TTFTErr)
		add("throughput "+c, r.TErr)
		add("throughput "+c, r.E2EErr)
		add("throughput all", r.TErr)
		add("throughput all", r.E2EErr)
		if r.Saturation {
			add("throughput saturation", r.TErr)
		}
		add("ITL all", r.ITLErr)
	}
	order := []string{"TTFT batch1", "TTFT static", "TTFT closed", "TTFT rate", "TTFT all",
		"throughput static", "throughput closed", "throughput rate", "throughput all", "throughput saturation", "ITL all"}
	var out []CorpusSummary
	for _, k := range order {
		v := group[k]
		if len(v) == 0 {
			continue
		}
		sort.Float64s(v)
		out = append(out, CorpusSummary{Name: k, N: len(v), Median: medianOf(v)})
	}
	return out
}

// SummaryMedian finds one summary line by name (NaN when absent).
func SummaryMedian(sum []CorpusSummary, name string) float64 {
	for _, s := range sum {
		if s.Name == name {
			return s.Median
		}
	}
	return math.NaN()
}

// SourceSummary is one source's median |error| on TTFT and on throughput
// (NaN where it publishes none).
type SourceSummary struct {
	Source           string
	Rows             int
	TTFT, Throughput float64
	// Saturation is the median |error| of the saturation throughput rows
	// (CorpusRow.Saturation), NaN where the source publishes none.
	Saturation float64
}

// SummarizeBySource groups the errors by source, in first-seen order.
func SummarizeBySource(rs []CorpusResult) []SourceSummary {
	var order []string
	tt, tp, sat, n := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string]int{}
	for _, r := range rs {
		if n[r.Source] == 0 {
			order = append(order, r.Source)
		}
		n[r.Source]++
		if !math.IsNaN(r.TTFTErr) {
			tt[r.Source] = append(tt[r.Source], math.Abs(r.TTFTErr))
		}
		for _, e := range []float64{r.TErr, r.E2EErr} {
			if !math.IsNaN(e) {
				tp[r.Source] = append(tp[r.Source], math.Abs(e))
			}
		}
		if r.Saturation && !math.IsNaN(r.TErr) {
			sat[r.Source] = append(sat[r.Source], math.Abs(r.TErr))
		}
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		return medianOf(v)
	}
	out := make([]SourceSummary, 0, len(order))
	for _, s := range order {
		out = append(out, SourceSummary{Source: s, Rows: n[s], TTFT: med(tt[s]), Throughput: med(tp[s]), Saturation: med(sat[s])})
	}
	return out
}

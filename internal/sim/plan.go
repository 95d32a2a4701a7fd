package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// PlanRequest asks for the cheapest deployment meeting SLOs at a load.
type PlanRequest struct {
	Model        string
	Rate         float64 // requests/s offered to the whole fleet (Poisson)
	PromptTokens int
	MaxTokens    int
	// SLOs on P95 in ms; zero means no limit.
	TTFTP95Ms, ITLP95Ms float64
	GPUs                []string // nil: every GPU in the catalog
	TPs                 []int    // nil: 1, 2, 4, 8
	// FP8 options to try: nil tries 16-bit and FP8 (weights and KV).
	FP8           []bool
	MaxReplicas   int // default 64
	Requests      int // simulated per candidate (default 2000)
	PrefixCaching bool
	Engine        string
	Prices        map[string]float64 // USD per GPU-hour overrides
	Catalog       *Catalog
	Seed          uint64
	// AtReplicas are replica counts to report for every candidate besides
	// the fewest that meet the SLOs (PlanRow.At).
	AtReplicas []int
}

// PlanPoint is one candidate at a replica count the user asked about.
type PlanPoint struct {
	Replicas    int     `json:"replicas"`
	TTFTP50Ms   float64 `json:"ttft_p50_ms"`
	TTFTP95Ms   float64 `json:"ttft_p95_ms"`
	ITLP95Ms    float64 `json:"itl_p95_ms"`
	CostPerHour float64 `json:"cost_per_hour"`
	Meets       bool    `json:"meets"`
	Overloaded  bool    `json:"overloaded,omitempty"`
}

// PlanRow is one candidate: the fewest replicas that meet the SLOs (or the
// most tried, when none does).
type PlanRow struct {
	GPU         string  `json:"gpu"`
	TP          int     `json:"tp"`
	FP8         bool    `json:"fp8"`
	Replicas    int     `json:"replicas"`
	TTFTP50Ms   float64 `json:"ttft_p50_ms"`
	TTFTP95Ms   float64 `json:"ttft_p95_ms"`
	ITLP95Ms    float64 `json:"itl_p95_ms"`
	CostPerHour float64 `json:"cost_per_hour"`
	Meets       bool    `json:"meets"`
	// Overloaded: the load exceeds what these replicas serve; the
	// latencies grow with the simulated run's length.
	Overloaded bool   `json:"overloaded,omitempty"`
	Note       string `json:"note,omitempty"`
	// At is the candidate at each of PlanRequest.AtReplicas.
	At []PlanPoint `json:"at,omitempty"`
}

// Plan simulates each candidate configuration on the virtual clock, one
// replica receiving 1/replicas of the load (even balancing), and returns
// the rows sorted: meeting the SLOs first, then by cost.
func Plan(ctx context.Context, req PlanRequest) ([]PlanRow, error) {
	cat := req.Catalog
	if cat == nil {
		cat = DefaultCatalog()
	}
	if _, err := cat.Model(req.Model); err != nil {
		return nil, err
	}
	if req.Rate <= 0 {
		return nil, fmt.Errorf("plan needs a positive request rate, got %g", req.Rate)
	}
	if req.PromptTokens <= 0 || req.MaxTokens <= 0 {
		return nil, fmt.Errorf("plan needs positive prompt and output lengths")
	}
	if req.MaxReplicas <= 0 {
		req.MaxReplicas = 64
	}
	if req.Requests <= 0 {
		req.Requests = 2000
	}
	gpus := req.GPUs
	if len(gpus) == 0 {
		for _, name := range cat.GPUNames() {
			if g, err := cat.GPU(name); err == nil && g.Class == "" {
				gpus = append(gpus, name) // CPU/edge devices only when named
			}
		}
	}
	tps := req.TPs
	if len(tps) == 0 {
		tps = []int{1, 2, 4, 8}
	}
	fp8s := req.FP8
	if len(fp8s) == 0 {
		fp8s = []bool{false, true}
	}
	var rows []PlanRow
	for _, gname := range gpus {
		g, err := cat.GPU(gname)
		if err != nil {
			return nil, err
		}
		price := g.PricePerHour
		if p, ok := req.Prices[g.Name]; ok {
			price = p
		}
		for _, tp := range tps {
			for _, fp8 := range fp8s {
				cfg := Config{Model: req.Model, GPU: g.Name, TensorParallelSize: tp, EnablePrefixCaching: req.PrefixCaching, Engine: req.Engine,
					MaxModelLen: req.PromptTokens + req.MaxTokens + 16, AllowLongMaxModelLen: true}
				if fp8 {
					cfg.Quantization, cfg.KVCacheDtype = "fp8", "fp8"
				}
				row := PlanRow{GPU: g.Name, TP: tp, FP8: fp8}
				d, err := Resolve(cat, cfg)
				if err != nil {
					continue // does not fit or TP invalid: not a candidate
				}
				seen := map[int]PlanRow{}
				eval := func(r int) (PlanRow, error) {
					if got, ok := seen[r]; ok {
						return got, nil
					}
					out := row
					out.Replicas = r
					out.CostPerHour = float64(r*tp) * price
					p50, p95, itl, over, err := simulateLoad(ctx, d, req.Rate/float64(r), req.PromptTokens, req.MaxTokens, req.Requests, req.Seed)
					if err != nil {
						return out, err
					}
					out.TTFTP50Ms, out.TTFTP95Ms, out.ITLP95Ms, out.Overloaded = p50, p95, itl, over
					out.Meets = (req.TTFTP95Ms <= 0 || p95 <= req.TTFTP95Ms) && (req.ITLP95Ms <= 0 || itl <= req.ITLP95Ms)
					seen[r] = out
					return out, nil
				}
				// Exponential then binary search for the fewest replicas.
				lo, hi := 0, 1
				var best PlanRow
				found := false
				for hi <= req.MaxReplicas {
					r, err := eval(hi)
					if err != nil {
						return nil, err
					}
					if r.Meets {
						best, found = r, true
						break
					}
					best = r
					lo, hi = hi, hi*2
				}
				if !found && lo < req.MaxReplicas {
					r, err := eval(req.MaxReplicas)
					if err != nil {
						return nil, err
					}
					best, hi = r, req.MaxReplicas
					found = r.Meets
				}
				if found {
					for lo+1 < hi {
						mid := (lo + hi) / 2
						r, err := eval(mid)
						if err != nil {
							return nil, err
						}
						if r.Meets {
							best, hi = r, mid
						} else {
							lo = mid
						}
					}
				} else {
					best.Note = fmt.Sprintf("misses the SLO even with %d replicas", best.Replicas)
					if best.Overloaded {
						best.Note += " (overloaded)"
					}
				}
				for _, n := range req.AtReplicas {
					r, err := eval(n)
					if err != nil {
						return nil, err
					}
					best.At = append(best.At, PlanPoint{Replicas: n, TTFTP50Ms: r.TTFTP50Ms, TTFTP95Ms: r.TTFTP95Ms, ITLP95Ms: r.ITLP95Ms, CostPerHour: r.CostPerHour, Meets: r.Meets, Overloaded: r.Overloaded})
				}
				rows = append(rows, best)
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no configuration of %s fits on %v with TP in %v", req.Model, gpus, tps)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Meets != rows[j].Meets {
			return rows[i].Meets
		}
		if rows[i].CostPerHour != rows[j].CostPerHour {
			return rows[i].CostPerHour < rows[j].CostPerHour
		}
		return rows[i].TTFTP95Ms < rows[j].TTFTP95Ms
	})
	return rows, nil
}

// simulateLoad runs n Poisson requests at rate through one replica and
// returns TTFT P50/P95 and ITL P95 in ms.
//
// overloaded says the replica served below 80% of the offered rate: its
// queue grew through the run, and the percentiles measure the run's length.
func simulateLoad(ctx context.Context, d *Deployment, rate float64, prompt, out, n int, seed uint64) (p50, p95, itl95 float64, overloaded bool, err error) {
	src := &fixedSource{n: n, prompt: prompt, out: out}
	var ttfts, itls []float64
	var first, last time.Time
	_, err = Run(ctx, d, src, RunOptions{Rate: rate, Seed: seed}, func(r *record.Record) error {
		if r.OK() {
			ttfts = append(ttfts, r.TTFTMs)
			itls = append(itls, r.ITLMs...)
		}
		if first.IsZero() || r.Intended.Before(first) {
			first = r.Intended
		}
		if r.End.After(last) {
			last = r.End
		}
		return nil
	})
	if err != nil {
		return 0, 0, 0, false, err
	}
	if len(ttfts) == 0 {
		return math.Inf(1), math.Inf(1), math.Inf(1), true, nil
	}
	if span := last.Sub(first).Seconds(); n >= 10 && span > 0 && float64(n)/span < 0.8*rate {
		overloaded = true
	}
	slices.Sort(ttfts)
	slices.Sort(itls)
	itl95 = 0 // one-token outputs have no gaps
	if len(itls) > 0 {
		itl95 = stats.Quantile(itls, 0.95)
	}
	return stats.Quantile(ttfts, 0.5), stats.Quantile(ttfts, 0.95), itl95, overloaded, nil
}

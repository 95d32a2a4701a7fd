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
	req, err := req.withDefaults(cat)
	if err != nil {
		return nil, err
	}
	var rows []PlanRow
	for _, gname := range req.GPUs {
		g, err := cat.GPU(gname)
		if err != nil {
			return nil, err
		}
		price := g.PricePerHour
		if p, ok := req.Prices[g.Name]; ok {
			price = p
		}
		for _, tp := range req.TPs {
			for _, fp8 := range req.FP8 {
				cfg := Config{Model: req.Model, GPU: g.Name, TensorParallelSize: tp, EnablePrefixCaching: req.PrefixCaching, Engine: req.Engine,
					MaxModelLen: req.PromptTokens + req.MaxTokens + 16, AllowLongMaxModelLen: true}
				if fp8 {
					cfg.Quantization, cfg.KVCacheDtype = "fp8", "fp8"
				}
				d, err := Resolve(cat, cfg)
				if err != nil {
					continue // does not fit or TP invalid: not a candidate
				}
				c := &planCandidate{ctx: ctx, req: &req, d: d, price: price, row: PlanRow{GPU: g.Name, TP: tp, FP8: fp8}, seen: map[int]PlanRow{}}
				best, err := c.plan()
				if err != nil {
					return nil, err
				}
				rows = append(rows, best)
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no configuration of %s fits on %v with TP in %v", req.Model, req.GPUs, req.TPs)
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

// withDefaults checks the request and fills in what it leaves open: the
// catalog's GPUs (CPU and edge devices only when named), TP 1, 2, 4, 8,
// 16-bit and FP8, 64 replicas at most, 2000 requests per simulation.
func (req PlanRequest) withDefaults(cat *Catalog) (PlanRequest, error) {
	if _, err := cat.Model(req.Model); err != nil {
		return req, err
	}
	if req.Rate <= 0 {
		return req, fmt.Errorf("plan needs a positive request rate, got %g", req.Rate)
	}
	if req.PromptTokens <= 0 || req.MaxTokens <= 0 {
		return req, fmt.Errorf("plan needs positive prompt and output lengths")
	}
	if req.MaxReplicas <= 0 {
		req.MaxReplicas = 64
	}
	if req.Requests <= 0 {
		req.Requests = 2000
	}
	if len(req.GPUs) == 0 {
		var gpus []string
		for _, name := range cat.GPUNames() {
			if g, err := cat.GPU(name); err == nil && g.Class == "" {
				gpus = append(gpus, name) // CPU/edge devices only when named
			}
		}
		req.GPUs = gpus
	}
	if len(req.TPs) == 0 {
		req.TPs = []int{1, 2, 4, 8}
	}
	if len(req.FP8) == 0 {
		req.FP8 = []bool{false, true}
	}
	return req, nil
}

// planCandidate is one deployment of a plan, simulated at replica counts
// as the search asks for them (each count once).
type planCandidate struct {
	ctx   context.Context
	req   *PlanRequest
	d     *Deployment
	price float64 // per GPU-hour
	row   PlanRow // GPU, TP and FP8 filled in
	seen  map[int]PlanRow
}

// eval simulates r replicas, each receiving 1/r of the load.
func (c *planCandidate) eval(r int) (PlanRow, error) {
	if got, ok := c.seen[r]; ok {
		return got, nil
	}
	req := c.req
	out := c.row
	out.Replicas = r
	out.CostPerHour = float64(r*c.row.TP) * c.price
	p50, p95, itl, over, err := simulateLoad(c.ctx, c.d, req.Rate/float64(r), req.PromptTokens, req.MaxTokens, req.Requests, req.Seed)
	if err != nil {
		return out, err
	}
	out.TTFTP50Ms, out.TTFTP95Ms, out.ITLP95Ms, out.Overloaded = p50, p95, itl, over
	out.Meets = (req.TTFTP95Ms <= 0 || p95 <= req.TTFTP95Ms) && (req.ITLP95Ms <= 0 || itl <= req.ITLP95Ms)
	c.seen[r] = out
	return out, nil
}

// plan finds the fewest replicas meeting the SLOs (else notes the miss at
// the most tried) and adds the replica counts asked for.
func (c *planCandidate) plan() (PlanRow, error) {
	best, err := c.fewest()
	if err != nil {
		return best, err
	}
	for _, n := range c.req.AtReplicas {
		r, err := c.eval(n)
		if err != nil {
			return best, err
		}
		best.At = append(best.At, PlanPoint{Replicas: n, TTFTP50Ms: r.TTFTP50Ms, TTFTP95Ms: r.TTFTP95Ms, ITLP95Ms: r.ITLP95Ms, CostPerHour: r.CostPerHour, Meets: r.Meets, Overloaded: r.Overloaded})
	}
	return best, nil
}

// fewest is an exponential then binary search for the fewest replicas
// that meet the SLOs, up to MaxReplicas.
func (c *planCandidate) fewest() (PlanRow, error) {
	maxR := c.req.MaxReplicas
	lo, hi := 0, 1
	var best PlanRow
	found := false
	for hi <= maxR {
		r, err := c.eval(hi)
		if err != nil {
			return best, err
		}
		if r.Meets {
			best, found = r, true
			break
		}
		best = r
		lo, hi = hi, hi*2
	}
	if !found && lo < maxR {
		r, err := c.eval(maxR)
		if err != nil {
			return best, err
		}
		best, hi = r, maxR
		found = r.Meets
	}
	if !found {
		best.Note = fmt.Sprintf("misses the SLO even with %d replicas", best.Replicas)
		if best.Overloaded {
			best.Note += " (overloaded)"
		}
		return best, nil
	}
	for lo+1 < hi {
		mid := (lo + hi) / 2
		r, err := c.eval(mid)
		if err != nil {
			return best, err
		}
		if r.Meets {
			best, hi = r, mid
		} else {
			lo = mid
		}
	}
	return best, nil
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

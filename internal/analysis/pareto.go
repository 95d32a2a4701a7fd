package analysis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/report"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/stats/pricing"
)

// Pricer prices runs: self-hosted ones (a "gpu" label) by the GPU-hour,
// hosted APIs by their model's price per million tokens.
type Pricer struct {
	Prices  *pricing.List
	Catalog *sim.Catalog
}

// NewPricer is the default price list (the embedded API prices and the
// simulator catalog's GPU-hours), overridden by the YAML or CSV price list
// at path if path is not empty.
func NewPricer(path string) (*Pricer, error) {
	cat := sim.DefaultCatalog()
	l := pricing.Default()
	for _, g := range cat.GPUs {
		if g.PricePerHour > 0 {
			l.GPUs[pricing.Norm(g.Name)] = g.PricePerHour
		}
	}
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading prices: %w", err)
		}
		defer f.Close()
		user, err := pricing.Parse(f, path)
		if err != nil {
			return nil, err
		}
		l.Merge(user)
	}
	return &Pricer{Prices: l, Catalog: cat}, nil
}

// Point prices one run, at the latency q reads from its summary. Its
// Labels["priced_as"] says how.
//
// A run labelled gpu (a catalog name or alias), gpus and replicas costs
// gpus × replicas × the GPU-hour price, spread over its measured
// throughput. A run without a gpu label is a hosted API priced by its
// model; its token counts are the summary's best totals (Tokens.Input and
// Tokens.Output).
func (pr *Pricer) Point(r *Run, q Statistic) (stats.ParetoPoint, error) {
	lat, n, err := q.Of(&r.Summary)
	if err != nil {
		return stats.ParetoPoint{}, err
	}
	if n == 0 {
		return stats.ParetoPoint{}, fmt.Errorf("run %s: no %s measurements in summary.json", r.Dir, q.Metric)
	}
	s := r.Summary
	p := stats.ParetoPoint{Name: r.Name, Latency: lat, Throughput: s.Throughput.RequestsPerS, TokensPerS: s.Throughput.OutputTokensPerS, Labels: map[string]string{}}
	if gpu := r.Labels["gpu"]; gpu != "" {
		return p, pr.priceGPU(&p, r, gpu)
	}
	model := r.Model()
	ap, ok := pr.Prices.API(model)
	if !ok {
		return p, fmt.Errorf("run %s: no gpu label and no API price for model %q (label the run with gpu=..., or add apis: {%s: {input: X, output: Y}} to --prices)", r.Dir, model, pricing.Norm(model))
	}
	p.CostPerHour, p.Cost, p.CostPerRequest = stats.APICost(ap.Input, ap.Output, s.Requests.Completed, float64(s.Tokens.Input()), float64(s.Tokens.Output()), s.Throughput.RequestsPerS)
	p.Labels["priced_as"] = fmt.Sprintf("%s at $%g/$%g per M tokens", model, ap.Input, ap.Output)
	return p, nil
}

// priceGPU prices a self-hosted run by the GPU-hour.
func (pr *Pricer) priceGPU(p *stats.ParetoPoint, r *Run, gpu string) error {
	name := gpu
	price, ok := pr.Prices.GPU(gpu)
	if g, err := pr.Catalog.GPU(gpu); err == nil {
		name = g.Name
		if v, ok2 := pr.Prices.GPU(g.Name); ok2 && !ok {
			price, ok = v, true
		}
	}
	if !ok {
		return fmt.Errorf("run %s: no price for GPU %q (add it to --prices: gpus: {%s: USD_PER_HOUR})", r.Dir, gpu, pricing.Norm(gpu))
	}
	n := 1
	for _, k := range []string{"gpus", "replicas"} {
		if v := r.Labels[k]; v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				return fmt.Errorf("run %s: label %s=%q is not a positive integer", r.Dir, k, v)
			}
			n *= x
		}
	}
	t := r.Summary.Throughput
	p.CostPerHour, p.Cost, p.CostPerRequest = stats.GPUCost(price, n, t.RequestsPerS, t.OutputTokensPerS)
	p.Labels["priced_as"] = fmt.Sprintf("%d× %s at $%.2f/h", n, name, price)
	return nil
}

// ParetoRequest asks for the cost/latency front of some runs.
type ParetoRequest struct {
	// Runs are run directories or stored runs (read through Inputs.Store);
	// a directory of run directories must already be expanded into them.
	Runs []string
	// Latency is the y axis (e.g. TTFT P95).
	Latency Statistic
	// Prices is a price list file overriding the defaults ("": none).
	Prices string
	// SLOMs, when positive, asks for the cheapest configuration within it.
	SLOMs float64
}

// ParetoResult is every run priced and marked, the front, and the pick;
// it is also the JSON of `ttft pareto --json`.
type ParetoResult struct {
	Metric string `json:"metric"`
	Stat   string `json:"stat"`
	// Points are in the order of the request's runs, Optimal set on the
	// front's; Front is sorted by cost.
	Points []stats.ParetoPoint `json:"points"`
	Front  []stats.ParetoPoint `json:"front"`
	SLOMs  float64             `json:"slo_ms,omitempty"`
	// Pick is the cheapest configuration within SLOMs (nil: none is).
	Pick *stats.ParetoPoint `json:"pick,omitempty"`
}

// Pareto prices every run (Pricer.Point), marks the Pareto-optimal ones and
// picks the cheapest within the SLO.
func Pareto(ctx context.Context, in Inputs, req ParetoRequest) (*ParetoResult, error) {
	if err := req.Latency.Check(); err != nil {
		return nil, err
	}
	pr, err := NewPricer(req.Prices)
	if err != nil {
		return nil, err
	}
	var pts []stats.ParetoPoint
	for _, a := range req.Runs {
		r, err := ResolveRun(ctx, in.Store, a)
		if err != nil {
			return nil, err
		}
		p, err := pr.Point(r, req.Latency)
		if err != nil {
			return nil, err
		}
		pts = append(pts, p)
	}
	res := &ParetoResult{Metric: req.Latency.Metric, Stat: req.Latency.Stat, Points: stats.MarkPareto(pts), Front: stats.ParetoFront(pts), SLOMs: req.SLOMs}
	if req.SLOMs > 0 {
		if p, ok := stats.CheapestWithin(pts, req.SLOMs); ok {
			res.Pick = &p
		}
	}
	return res, nil
}

// AxisLabel is the latency axis in words, such as "TTFT P95".
func (r *ParetoResult) AxisLabel() string {
	return strings.ToUpper(r.Metric) + " " + strings.ToUpper(r.Stat)
}

// SVG is the cost/latency plot as a standalone SVG document — the report's
// Pareto chart (report.ParetoChart) with this result's latency axis and
// SLO: every configuration a labelled dot, the front a staircase, the SLO a
// dashed line. Plain SVG with no scripts or external references.
func (r *ParetoResult) SVG() string {
	ch := report.ParetoChart(r.Points, report.ParetoOptions{YLabel: r.AxisLabel() + " (ms)", SLOMs: r.SLOMs})
	if ch == nil {
		ch = &report.Chart{ID: "pareto", Title: "Cost vs latency (Pareto front)", Kind: "pareto", XLabel: "cost (USD per million output tokens)", YLabel: r.AxisLabel() + " (ms)"}
	}
	return report.SVG(ch) + "\n"
}

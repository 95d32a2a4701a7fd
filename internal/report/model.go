package report

import (
	"math"
	"slices"
	"strconv"

	"github.com/ttft-dev/ttft/internal/record"
)

// Run is one run as the report sees it: where it comes from (stored run or
// directory) does not matter here.
type Run struct {
	// Name labels the run in tables and legends (ID, directory, or a label).
	Name    string
	Summary record.Summary
	// Records may be empty (raw rows pruned): charts that need them skip
	// the run, tables use the summary.
	Records []record.Record
	Labels  map[string]string
}

// Chart is the data behind one plot: what golden files pin down and what
// the SVG and PNG back ends draw.
type Chart struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	Kind   string   `json:"kind"` // line | scatter | bars | heatmap | pareto
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	Series []Series `json:"series,omitempty"`
	Heat   *Heatmap `json:"heatmap,omitempty"`
	Note   string   `json:"note,omitempty"`
	// YMax fixes the top of the y axis (1 for a CDF: a fraction cannot
	// exceed it); 0 means from the data.
	YMax float64 `json:"y_max,omitempty"`
	// XInteger puts x ticks on integers only, each within the data (turns).
	XInteger bool `json:"x_integer,omitempty"`
	// Limit, when positive, is a y value drawn as a dashed horizontal line
	// across the plot and labelled LimitLabel (a latency SLO).
	Limit      float64 `json:"limit,omitempty"`
	LimitLabel string  `json:"limit_label,omitempty"`
	// Coverage says which requests the chart leaves out and why (failed
	// requests, requests without the value), per run; empty when it shows
	// every measured request. The caption shows it, and the drawing
	// CoverageShort (the same totalled over runs) under its title, so that
	// failures are never hidden by a healthy curve.
	Coverage      string `json:"coverage,omitempty"`
	CoverageShort string `json:"coverage_short,omitempty"`
}

// Series is one named line or point cloud; Points are [x, y].
type Series struct {
	Name   string       `json:"name"`
	Points [][2]float64 `json:"points"`
	// Markers draws a dot at every point (sweeps, per-turn, Pareto).
	Markers bool `json:"markers,omitempty"`
	// Labels name individual points (Pareto configurations).
	Labels []string `json:"labels,omitempty"`
	// Line draws a line through the points even in a scatter chart (the
	// rolling P95 over a run's point cloud).
	Line bool `json:"line,omitempty"`
	// Color is 1 + the palette index to use; 0 means by position. Lets a
	// run's rolling line share its points' colour.
	Color int `json:"color,omitempty"`
}

// Heatmap is a grid of values (nil = no run at that cell).
type Heatmap struct {
	X    []string     `json:"x"`
	Y    []string     `json:"y"`
	Z    [][]*float64 `json:"z"` // Z[y][x]
	Unit string       `json:"unit"`
}

// ttftOf returns the measured (non-warm-up, successful) TTFTs in ms, from
// the intended send time (record.Record.JudgedTTFTMs): an open-loop run's
// client lateness counts, as in its verdicts.
func ttftOf(recs []record.Record) []float64 {
	var out []float64
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() || r.JudgedTTFTMs() <= 0 {
			continue
		}
		out = append(out, r.JudgedTTFTMs())
	}
	return out
}

// e2eOf returns the end-to-end latencies (ms) of measured, successful
// requests, as the summary counts them.
func e2eOf(recs []record.Record) []float64 {
	return okValues(recs, func(r *record.Record) float64 { return r.E2EMs })
}

// tpotOf returns the time per output token (ms) of measured, successful
// requests with at least two output tokens.
func tpotOf(recs []record.Record) []float64 {
	return okValues(recs, func(r *record.Record) float64 { return r.TPOTMs })
}

func okValues(recs []record.Record, v func(*record.Record) float64) []float64 {
	var out []float64
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() {
			continue
		}
		if x := v(r); x > 0 && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

// itlOf pools the inter-token gaps of measured, successful requests.
func itlOf(recs []record.Record) []float64 {
	var out []float64
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() {
			continue
		}
		for _, g := range r.ITLMs {
			if g >= 0 && !math.IsNaN(g) && !math.IsInf(g, 0) {
				out = append(out, g)
			}
		}
	}
	return out
}

func sortedCopy(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// round keeps golden files stable and small: 4 significant digits is far
// below what a chart can show.
func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return r
}

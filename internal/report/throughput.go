package report

import (
	"sort"
	"strconv"
	"strings"
)

// A sweep's report leads with throughput against latency, as GuideLLM's
// and vLLM's sweep plots do: what each load delivered (output tokens/s),
// what it cost in latency, and the trade-off between a GPU's throughput
// and one user's speed.

// sweepGroup names the curve a run belongs to: its model and target, and
// its workload when the runs send different ones (a curve joins only runs
// that differ in load alone).
func sweepGroup(runs []Run) func(Run) string {
	mixed := false
	for _, r := range runs[1:] {
		mixed = mixed || workloadKey(r.Labels) != workloadKey(runs[0].Labels)
	}
	return func(r Run) string {
		g := strings.TrimSpace(strings.Join(nonEmpty(r.Summary.Model, r.Summary.Target), " @ "))
		if g == "" {
			g = "runs"
		}
		if mixed {
			g += " · " + workloadKey(r.Labels)
		}
		return g
	}
}

type groupedPoints struct {
	order  []string
	points map[string][][]float64 // per group: rows of (x, y1, y2, ...)
}

func (g *groupedPoints) add(key string, row ...float64) {
	if g.points == nil {
		g.points = map[string][][]float64{}
	}
	if _, ok := g.points[key]; !ok {
		g.order = append(g.order, key)
	}
	g.points[key] = append(g.points[key], row)
}

// series turns each group's rows, sorted by x, into one series per y
// column named by names; groups of one point are left out (no curve).
func (g *groupedPoints) series(names ...string) []Series {
	var out []Series
	for _, k := range g.order {
		rows := g.points[k]
		if len(rows) < 2 {
			continue
		}
		sort.SliceStable(rows, func(i, j int) bool { return rows[i][0] < rows[j][0] })
		for c, name := range names {
			s := Series{Name: name, Markers: true}
			if len(g.order) > 1 {
				s.Name = k + " " + name
			}
			for _, r := range rows {
				s.Points = append(s.Points, [2]float64{round(r[0]), round(r[c+1])})
			}
			out = append(out, s)
		}
	}
	return out
}

// latencyThroughputChart is TTFT P50/P95 and ITL P50 against the output
// tokens per second each run achieved.
func latencyThroughputChart(runs []Run) *Chart {
	if len(runs) < 2 {
		return nil
	}
	group := sweepGroup(runs)
	var g groupedPoints
	for _, r := range runs {
		ttft, itl := r.Summary.JudgedTTFT(), r.Summary.ITL
		if ttft.Count == 0 || itl.Count == 0 || r.Summary.Throughput.OutputTokensPerS <= 0 {
			continue
		}
		g.add(group(r), r.Summary.Throughput.OutputTokensPerS, ttft.P50, ttft.P95, itl.P50)
	}
	c := &Chart{ID: "latency_throughput", Title: "Latency vs achieved throughput", Kind: "line",
		XLabel: "achieved output tokens/s", YLabel: "latency (ms)", Series: g.series("TTFT P50", "TTFT P95", "ITL P50")}
	if len(c.Series) == 0 {
		return nil
	}
	if len(g.order) == 1 {
		c.Note = g.order[0]
	}
	c.Coverage, c.CoverageShort = summaryCoverage(runs)
	return c
}

// gpuUserChart is output tokens/s per GPU against output tokens/s per user
// (1000 / the median inter-token gap): more users per GPU buys throughput
// with each user's speed. The GPU count is the run's "gpus" label (else 1).
func gpuUserChart(runs []Run) *Chart {
	if len(runs) < 2 {
		return nil
	}
	group := sweepGroup(runs)
	var g groupedPoints
	perGPU := false
	for _, r := range runs {
		itl := r.Summary.ITL
		out := r.Summary.Throughput.OutputTokensPerS
		if itl.Count == 0 || itl.P50 <= 0 || out <= 0 {
			continue
		}
		gpus := 1.0
		if n, err := strconv.ParseFloat(r.Labels["gpus"], 64); err == nil && n > 0 {
			gpus, perGPU = n, true
		}
		g.add(group(r), 1000/itl.P50, out/gpus)
	}
	ylabel := "output tokens/s (whole target)"
	if perGPU {
		ylabel = "output tokens/s per GPU"
	}
	c := &Chart{ID: "throughput_per_user", Title: "Throughput vs speed per user", Kind: "line",
		XLabel: "output tokens/s per user (1000 / ITL P50)", YLabel: ylabel, Series: g.series("throughput")}
	if len(c.Series) == 0 {
		return nil
	}
	if len(g.order) == 1 {
		c.Note = g.order[0]
	}
	c.Coverage, c.CoverageShort = summaryCoverage(runs)
	return c
}

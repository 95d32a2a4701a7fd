package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// ChartOptions tunes chart building. Zero values give the defaults.
type ChartOptions struct {
	// CDFPoints is how many quantiles a CDF keeps (default 200).
	CDFPoints int
	// Bins is the histogram's bin count (default 40).
	Bins int
	// MaxScatter bounds the points per run in "TTFT over time" (default 1500).
	MaxScatter int
	// Pareto, when set, adds the cost/latency front.
	Pareto []stats.ParetoPoint
}

func (o *ChartOptions) defaults() {
	if o.CDFPoints <= 0 {
		o.CDFPoints = 200
	}
	if o.Bins <= 0 {
		o.Bins = 40
	}
	if o.MaxScatter <= 0 {
		o.MaxScatter = 1500
	}
}

// Charts computes the data of every chart that the runs support, in a
// fixed order. Charts with nothing to show are left out.
func Charts(runs []Run, opt ChartOptions) []Chart {
	opt.defaults()
	var out []Chart
	add := func(c *Chart) {
		if c != nil {
			out = append(out, *c)
		}
	}
	// A sweep leads with what each load delivered and what it cost.
	add(latencyThroughputChart(runs))
	add(gpuUserChart(runs))
	add(cdfChart("ttft_cdf", "TTFT CDF", "TTFT (ms)", "TTFT", runs, ttftOf, opt.CDFPoints))
	add(histChart(runs, opt.Bins))
	add(overTimeChart(runs, opt.MaxScatter))
	add(itlChart(runs, opt.CDFPoints))
	add(cdfChart("tpot_cdf", "Time per output token CDF", "TPOT (ms)", "TPOT (fewer than two output tokens)", runs, tpotOf, opt.CDFPoints))
	add(cdfChart("e2e_cdf", "End-to-end latency CDF", "end-to-end latency (ms)", "end-to-end latency", runs, e2eOf, opt.CDFPoints))
	add(turnChart(runs))
	add(inFlightChart(runs))
	add(tokensChart(runs))
	add(sweepChart(runs))
	add(heatmapChart(runs))
	add(paretoChart(opt.Pareto))
	return out
}

// cdfChart is the distribution of one per-request latency, one curve per
// run; noValue names what a completed request left out lacks.
func cdfChart(id, title, xlabel, noValue string, runs []Run, values func([]record.Record) []float64, points int) *Chart {
	c := &Chart{ID: id, Title: title, Kind: "line", XLabel: xlabel, YLabel: "fraction of requests", YMax: 1}
	included := make([]int, len(runs))
	for i, r := range runs {
		s := sortedCopy(values(r.Records))
		included[i] = len(s)
		if len(s) == 0 {
			continue
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: cdfPoints(s, points)})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, false, noValue)
	return c
}

// itlChart is the distribution of inter-token gaps, pooled over requests:
// its fractions are of gaps, not of requests.
func itlChart(runs []Run, points int) *Chart {
	c := &Chart{ID: "itl_cdf", Title: "Inter-token latency CDF", Kind: "line", XLabel: "ITL (ms)", YLabel: "fraction of gaps", YMax: 1}
	included := make([]int, len(runs))
	for i, r := range runs {
		s := sortedCopy(itlOf(r.Records))
		included[i] = len(itlPerRequest(r.Records))
		if len(s) == 0 {
			continue
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: cdfPoints(s, points)})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, true, "gap (one output token)")
	return c
}

// cdfPoints is the empirical CDF of sorted s: every value, or points+1
// evenly spaced quantiles of a larger sample.
func cdfPoints(s []float64, points int) [][2]float64 {
	var pts [][2]float64
	if len(s) <= points {
		for i, v := range s {
			pts = append(pts, [2]float64{round(v), round(float64(i+1) / float64(len(s)))})
		}
		return pts
	}
	for i := 0; i <= points; i++ {
		q := float64(i) / float64(points)
		pts = append(pts, [2]float64{round(stats.Quantile(s, q)), round(q)})
	}
	return pts
}

func histChart(runs []Run, bins int) *Chart {
	all := [][]float64{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		s := sortedCopy(ttftOf(r.Records))
		all = append(all, s)
		if len(s) == 0 {
			continue
		}
		lo = math.Min(lo, s[0])
		// The top 0.5% would stretch the axis over empty bins.
		hi = math.Max(hi, stats.Quantile(s, 0.995))
	}
	if math.IsInf(lo, 1) {
		return nil
	}
	if hi <= lo {
		hi = lo + 1
	}
	w := (hi - lo) / float64(bins)
	c := &Chart{ID: "ttft_hist", Title: "TTFT histogram", Kind: "bars", XLabel: "TTFT (ms)", YLabel: "fraction of requests",
		Note: "values above the 99.5th percentile are counted in the last bin"}
	for i, r := range runs {
		s := all[i]
		if len(s) == 0 {
			continue
		}
		counts := make([]int, bins)
		for _, v := range s {
			b := int((v - lo) / w)
			counts[max(0, min(b, bins-1))]++
		}
		var pts [][2]float64
		for b, n := range counts {
			pts = append(pts, [2]float64{round(lo + (float64(b)+0.5)*w), round(float64(n) / float64(len(s)))})
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: pts})
	}
	included := make([]int, len(runs))
	for i := range runs {
		included[i] = len(all[i])
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, false, "TTFT")
	return c
}

func overTimeChart(runs []Run, maxPoints int) *Chart {
	c := &Chart{ID: "ttft_time", Title: "TTFT over time", Kind: "scatter", XLabel: "time since the run's first request (s)", YLabel: "TTFT (ms)"}
	var lines []Series
	included := make([]int, len(runs))
	for ri, r := range runs {
		type pt struct{ t, v float64 }
		var pts []pt
		t0 := runStart(r.Records)
		for i := range r.Records {
			rec := &r.Records[i]
			if rec.Warmup || !rec.OK() || rec.JudgedTTFTMs() <= 0 || rec.Sent.IsZero() {
				continue
			}
			pts = append(pts, pt{float64(rec.Sent.UnixNano())/1e9 - t0, rec.JudgedTTFTMs()})
		}
		included[ri] = len(pts)
		if len(pts) == 0 {
			continue
		}
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].t < pts[j].t })
		// Even stride keeps the time coverage; deterministic for goldens.
		stride := (len(pts) + maxPoints - 1) / maxPoints
		var out [][2]float64
		for i := 0; i < len(pts); i += stride {
			out = append(out, [2]float64{round(pts[i].t), round(pts[i].v)})
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: out, Color: ri + 1})
		// P95 over consecutive windows of requests (about 25 windows, at
		// least 20 requests each): drift and warm-up show where the cloud
		// is too dense to read.
		win := max(20, len(pts)/25)
		if len(pts) < 2*win {
			continue
		}
		var roll [][2]float64
		for lo := 0; lo+win <= len(pts); lo += win {
			vals := make([]float64, win)
			tsum := 0.0
			for j := range win {
				vals[j] = pts[lo+j].v
				tsum += pts[lo+j].t
			}
			slices.Sort(vals)
			roll = append(roll, [2]float64{round(tsum / float64(win)), round(stats.Quantile(vals, 0.95))})
		}
		lines = append(lines, Series{Name: r.Name + " P95 (rolling)", Points: roll, Line: true, Color: ri + 1})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Series = append(c.Series, lines...)
	if anyStrided(runs, maxPoints) {
		c.Note = fmt.Sprintf("at most %d points per run are drawn (evenly spaced in send order)", maxPoints)
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, false, "TTFT")
	return c
}

// runStart is the first send time of a run's records (warm-up included,
// so that every over-time chart of a run shares its origin), in seconds.
func runStart(recs []record.Record) float64 {
	t0 := math.Inf(1)
	for i := range recs {
		if !recs[i].Sent.IsZero() {
			t0 = math.Min(t0, float64(recs[i].Sent.UnixNano())/1e9)
		}
	}
	return t0
}

// loadWindows is how many windows the load charts average over.
const loadWindows = 120

// timeGrid is the window grid of a run's load charts: from its first send
// to its last end, in loadWindows equal windows (seconds since t0).
func timeGrid(recs []record.Record) (t0, width float64, ok bool) {
	t0 = runStart(recs)
	end := math.Inf(-1)
	for i := range recs {
		if !recs[i].Warmup && !recs[i].End.IsZero() {
			end = math.Max(end, float64(recs[i].End.UnixNano())/1e9)
		}
	}
	if math.IsInf(t0, 1) || math.IsInf(end, -1) || end <= t0 {
		return 0, 0, false
	}
	return t0, (end - t0) / loadWindows, true
}

// spread adds amount, spread evenly over [from, to) seconds since the
// grid's origin, to the windows of width w it overlaps (all of it to one
// window when the interval is empty).
func spread(win []float64, from, to, w, amount float64) {
	last := len(win) - 1
	if to <= from {
		win[max(0, min(int(from/w), last))] += amount
		return
	}
	rate := amount / (to - from)
	for k := max(0, int(from/w)); k <= last; k++ {
		lo, hi := float64(k)*w, float64(k+1)*w
		if k == last {
			hi = math.Max(hi, to)
		}
		if lo >= to {
			break
		}
		if ov := math.Min(hi, to) - math.Max(lo, from); ov > 0 {
			win[k] += rate * ov
		}
	}
}

// inFlightChart is the number of requests in flight over time: each
// measured request, failed or not, from its send to its end, averaged over
// windows (the load the server saw).
func inFlightChart(runs []Run) *Chart {
	c := &Chart{ID: "inflight_time", Title: "Requests in flight over time", Kind: "line",
		XLabel: "time since the run's first request (s)", YLabel: "requests in flight",
		Note: fmt.Sprintf("time-weighted mean over %d windows", loadWindows)}
	var parts []string
	sumN, sumFailed, withFailed := 0, 0, 0
	for _, r := range runs {
		t0, w, ok := timeGrid(r.Records)
		if !ok {
			continue
		}
		win := make([]float64, loadWindows)
		n, failed := 0, 0
		for i := range r.Records {
			rec := &r.Records[i]
			if rec.Warmup || rec.Sent.IsZero() || rec.End.Before(rec.Sent) {
				continue
			}
			n++
			if !rec.OK() {
				failed++
			}
			from := float64(rec.Sent.UnixNano())/1e9 - t0
			to := float64(rec.End.UnixNano())/1e9 - t0
			// Request-seconds in each window; divided by its width below.
			spread(win, from, to, w, to-from)
		}
		if n == 0 {
			continue
		}
		pts := make([][2]float64, loadWindows)
		for k, v := range win {
			pts[k] = [2]float64{round((float64(k) + 0.5) * w), round(v / w)}
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: pts})
		if failed > 0 {
			p := inFlightText(n, failed)
			if len(runs) > 1 {
				p = r.Name + ": " + p
			}
			parts = append(parts, p)
			sumN, sumFailed, withFailed = sumN+n, sumFailed+failed, withFailed+1
		}
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage = strings.Join(parts, ". ")
	c.CoverageShort = c.Coverage
	if withFailed > 1 {
		c.CoverageShort = inFlightText(sumN, sumFailed) + fmt.Sprintf(" (%d runs)", withFailed)
	}
	return c
}

func inFlightText(n, failed int) string {
	if failed == n {
		return fmt.Sprintf("all %d requests, every one of which failed", n)
	}
	return fmt.Sprintf("all %d requests, the %d failed ones included", n, failed)
}

// tokensChart is the output token rate over time: each completed
// request's output tokens spread evenly from its first token to its end,
// summed over windows.
func tokensChart(runs []Run) *Chart {
	c := &Chart{ID: "tokens_time", Title: "Output tokens/s over time", Kind: "line",
		XLabel: "time since the run's first request (s)", YLabel: "output tokens/s",
		Note: "each request's tokens spread evenly from its first token to its end"}
	included := make([]int, len(runs))
	for ri, r := range runs {
		t0, w, ok := timeGrid(r.Records)
		if !ok {
			continue
		}
		win := make([]float64, loadWindows)
		for i := range r.Records {
			rec := &r.Records[i]
			if rec.Warmup || !rec.OK() || rec.End.IsZero() {
				continue
			}
			included[ri]++
			start := rec.FirstToken
			if start.IsZero() {
				start = rec.Sent
			}
			from := float64(start.UnixNano())/1e9 - t0
			to := float64(rec.End.UnixNano())/1e9 - t0
			spread(win, from, to, w, float64(rec.OutputTokens()))
		}
		if included[ri] == 0 {
			continue
		}
		pts := make([][2]float64, loadWindows)
		for k, v := range win {
			pts[k] = [2]float64{round((float64(k) + 0.5) * w), round(v / w)}
		}
		c.Series = append(c.Series, Series{Name: r.Name, Points: pts})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, false, "end time")
	return c
}

func anyStrided(runs []Run, maxPoints int) bool {
	for _, r := range runs {
		if len(r.Records) > maxPoints {
			return true
		}
	}
	return false
}

// turnChart shows per-turn TTFT drift in multi-turn runs (the article's
// 82 ms at turn 1 to 137 ms at turn 10).
func turnChart(runs []Run) *Chart {
	c := &Chart{ID: "ttft_turn", Title: "TTFT by conversation turn", Kind: "line", XLabel: "turn", YLabel: "TTFT (ms)", XInteger: true}
	included := make([]int, len(runs))
	for ri, r := range runs {
		byTurn := map[int][]float64{}
		multiTurn := false
		for i := range r.Records {
			rec := &r.Records[i]
			multiTurn = multiTurn || rec.Turn > 1
			if rec.Turn <= 0 || rec.Warmup || !rec.OK() || rec.JudgedTTFTMs() <= 0 {
				continue
			}
			byTurn[rec.Turn] = append(byTurn[rec.Turn], rec.JudgedTTFTMs())
			included[ri]++
		}
		if !multiTurn {
			// Not a conversation run: it is not in this chart at all.
			included[ri], _ = measured(r.Records)
		}
		if len(byTurn) < 2 {
			continue
		}
		turns := make([]int, 0, len(byTurn))
		for t := range byTurn {
			turns = append(turns, t)
		}
		slices.Sort(turns)
		var mean, p95 [][2]float64
		for _, t := range turns {
			s := sortedCopy(byTurn[t])
			sum := 0.0
			for _, v := range s {
				sum += v
			}
			mean = append(mean, [2]float64{float64(t), round(sum / float64(len(s)))})
			p95 = append(p95, [2]float64{float64(t), round(stats.Quantile(s, 0.95))})
		}
		c.Series = append(c.Series,
			Series{Name: r.Name + " mean", Points: mean, Markers: true},
			Series{Name: r.Name + " P95", Points: p95, Markers: true})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage, c.CoverageShort = coverage(runs, included, false, "turn or TTFT")
	return c
}

// loadLabels are the manifest labels that name a sweep's load axis, in
// order of preference.
var loadLabels = []string{"concurrency", "rate", "qps", "batch"}

// sweepChart plots latency against load when several runs form a sweep:
// the load is a numeric label all of them carry, else the achieved request
// rate. Runs are grouped into one curve per target and model, and per
// workload when they send different ones, so that a curve joins only runs
// that differ in load alone.
func sweepChart(runs []Run) *Chart {
	if len(runs) < 2 {
		return nil
	}
	key, xlabel := "", "achieved throughput (requests/s)"
	for _, k := range loadLabels {
		if numericLabel(runs, k) {
			key, xlabel = k, k
			break
		}
	}
	type pt struct{ x, p50, p95 float64 }
	groups := map[string][]pt{}
	var order []string
	group := sweepGroup(runs)
	for _, r := range runs {
		ttft := r.Summary.JudgedTTFT()
		if ttft.Count == 0 {
			continue
		}
		x := r.Summary.Throughput.RequestsPerS
		if key != "" {
			x, _ = strconv.ParseFloat(r.Labels[key], 64)
		}
		g := group(r)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], pt{x, ttft.P50, ttft.P95})
	}
	c := &Chart{ID: "sweep", Title: "Latency vs load", Kind: "line", XLabel: xlabel, YLabel: "TTFT (ms)"}
	if len(order) == 1 {
		c.Note = order[0]
	}
	for _, g := range order {
		ps := groups[g]
		if len(ps) < 2 {
			continue
		}
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].x < ps[j].x })
		var a, b [][2]float64
		for _, p := range ps {
			a = append(a, [2]float64{round(p.x), round(p.p50)})
			b = append(b, [2]float64{round(p.x), round(p.p95)})
		}
		prefix := g + " "
		if len(order) == 1 {
			prefix = "TTFT " // the group is in the note
		}
		c.Series = append(c.Series, Series{Name: prefix + "P50", Points: a, Markers: true}, Series{Name: prefix + "P95", Points: b, Markers: true})
	}
	if len(c.Series) == 0 {
		return nil
	}
	c.Coverage, c.CoverageShort = summaryCoverage(runs)
	return c
}

func nonEmpty(xs ...string) []string {
	var out []string
	for _, x := range xs {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

func numericLabel(runs []Run, k string) bool {
	seen := map[float64]bool{}
	for _, r := range runs {
		v, err := strconv.ParseFloat(r.Labels[k], 64)
		if err != nil {
			return false
		}
		seen[v] = true
	}
	return len(seen) >= 2
}

// Axis label candidates for the batch × context heatmap (§2.4 of the
// article): a sweep over both writes one of each as manifest labels.
var (
	batchLabels   = []string{"batch", "batch_size", "max_num_seqs", "concurrency"}
	contextLabels = []string{"context", "ctx", "context_tokens", "prompt_tokens"}
)

func heatmapChart(runs []Run) *Chart {
	if len(runs) < 4 {
		return nil
	}
	pick := func(cands []string) string {
		for _, k := range cands {
			ok := true
			vals := map[string]bool{}
			for _, r := range runs {
				v := r.Labels[k]
				if _, err := strconv.ParseFloat(v, 64); err != nil {
					ok = false
					break
				}
				vals[v] = true
			}
			if ok && len(vals) >= 2 {
				return k
			}
		}
		return ""
	}
	bk, ck := pick(batchLabels), pick(contextLabels)
	if bk == "" || ck == "" || bk == ck {
		return nil
	}
	xs, ys := distinctNumeric(runs, bk), distinctNumeric(runs, ck)
	z := make([][]*float64, len(ys))
	for i := range z {
		z[i] = make([]*float64, len(xs))
	}
	for _, r := range runs {
		ttft := r.Summary.JudgedTTFT()
		if ttft.Count == 0 {
			continue
		}
		xi, yi := slices.Index(xs, r.Labels[bk]), slices.Index(ys, r.Labels[ck])
		v := round(ttft.P95)
		z[yi][xi] = &v
	}
	c := &Chart{ID: "heatmap", Title: "TTFT P95 by " + bk + " × " + ck, Kind: "heatmap", XLabel: bk, YLabel: ck,
		Heat: &Heatmap{X: xs, Y: ys, Z: z, Unit: "ms"}}
	c.Coverage, c.CoverageShort = summaryCoverage(runs)
	return c
}

func distinctNumeric(runs []Run, k string) []string {
	var vs []string
	for _, r := range runs {
		if !slices.Contains(vs, r.Labels[k]) {
			vs = append(vs, r.Labels[k])
		}
	}
	sort.SliceStable(vs, func(i, j int) bool {
		a, _ := strconv.ParseFloat(vs[i], 64)
		b, _ := strconv.ParseFloat(vs[j], 64)
		return a < b
	})
	return vs
}

func paretoChart(points []stats.ParetoPoint) *Chart {
	return ParetoChart(points, ParetoOptions{})
}

// ParetoOptions tunes ParetoChart. Zero values give the report's chart.
type ParetoOptions struct {
	// YLabel titles the latency axis (default "TTFT P95 (ms)").
	YLabel string
	// SLOMs, when positive, draws the latency SLO as a dashed line.
	SLOMs float64
}

// ParetoChart is the cost/latency plane: every configuration as a labelled
// dot, the front (the configurations no other beats on both cost and
// latency) as a staircase, and the SLO, if any, as a dashed line. It is the
// report's chart and what `ttft pareto --svg` writes (SVG renders it).
func ParetoChart(points []stats.ParetoPoint, opt ParetoOptions) *Chart {
	if len(points) == 0 {
		return nil
	}
	if opt.YLabel == "" {
		opt.YLabel = "TTFT P95 (ms)"
	}
	marked := stats.MarkPareto(points)
	var all, front Series
	all = Series{Name: "configurations", Markers: true}
	for _, p := range marked {
		if math.IsNaN(p.Cost) || math.IsNaN(p.Latency) || math.IsInf(p.Cost, 0) || math.IsInf(p.Latency, 0) {
			continue
		}
		all.Points = append(all.Points, [2]float64{round(p.Cost), round(p.Latency)})
		all.Labels = append(all.Labels, p.Name)
	}
	front = Series{Name: "Pareto front", Markers: true}
	for _, p := range stats.ParetoFront(points) {
		front.Points = append(front.Points, [2]float64{round(p.Cost), round(p.Latency)})
		front.Labels = append(front.Labels, p.Name)
	}
	c := &Chart{ID: "pareto", Title: "Cost vs latency (Pareto front)", Kind: "pareto", XLabel: "cost (USD per million output tokens)", YLabel: opt.YLabel,
		Series: []Series{all, front}}
	if opt.SLOMs > 0 && !math.IsInf(opt.SLOMs, 0) {
		c.Limit = opt.SLOMs
		c.LimitLabel = "SLO " + strconv.FormatFloat(opt.SLOMs, 'g', -1, 64) + " ms"
	}
	return c
}

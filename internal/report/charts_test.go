package report

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func chartByID(t *testing.T, charts []Chart, id string) *Chart {
	t.Helper()
	for i := range charts {
		if charts[i].ID == id {
			return &charts[i]
		}
	}
	t.Fatalf("no chart %s", id)
	return nil
}

// axisTicks returns the tick labels an SVG chart draws along the x axis
// (at the baseline under the plot) or the y axis (right-aligned left of it).
func axisTicks(svg string, x bool) []string {
	var re *regexp.Regexp
	if x {
		re = regexp.MustCompile(`<text x="[0-9.]+" y="` + strconv.Itoa(chartH-padB+16) + `.0" text-anchor="middle" fill="#6e6e6e">([^<]*)</text>`)
	} else {
		re = regexp.MustCompile(`<text x="` + strconv.Itoa(padL-6) + `.0" y="[0-9.]+" text-anchor="end" fill="#6e6e6e">([^<]*)</text>`)
	}
	var out []string
	for _, m := range re.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestCDFAxesEndAtOne: a fraction cannot exceed 1, so no CDF's y axis
// goes above it.
func TestCDFAxesEndAtOne(t *testing.T) {
	charts := Charts(sweepRuns(200), ChartOptions{})
	for _, id := range []string{"ttft_cdf", "itl_cdf", "e2e_cdf", "tpot_cdf"} {
		ch := chartByID(t, charts, id)
		if _, _, y0, y1 := bounds(ch); y0 != 0 || y1 != 1 {
			t.Errorf("%s: y axis %v to %v, want 0 to 1", id, y0, y1)
		}
		ys := axisTicks(SVG(ch), false)
		if len(ys) == 0 || ys[len(ys)-1] != "1" {
			t.Errorf("%s: y ticks %v, want the last to be 1", id, ys)
		}
	}
}

func TestITLAxisCountsGaps(t *testing.T) {
	ch := chartByID(t, Charts(sweepRuns(100), ChartOptions{}), "itl_cdf")
	if ch.YLabel != "fraction of gaps" {
		t.Errorf("ITL CDF y axis %q, want fraction of gaps", ch.YLabel)
	}
}

// TestTurnTicksAreTurns: the per-turn chart's x axis has a tick at each
// turn (1 to 5) and nowhere else.
func TestTurnTicksAreTurns(t *testing.T) {
	ch := chartByID(t, Charts([]Run{fakeRun("multi", 200, 1, 80, 10, nil)}, ChartOptions{}), "ttft_turn")
	got := axisTicks(SVG(ch), true)
	if want := []string{"1", "2", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Errorf("turn ticks %v, want %v", got, want)
	}
	// Many turns: integer ticks, fewer of them.
	long := fakeRun("long", 400, 2, 80, 10, nil)
	for i := range long.Records {
		long.Records[i].Turn = 1 + i%37
	}
	got = axisTicks(SVG(chartByID(t, Charts([]Run{long}, ChartOptions{}), "ttft_turn")), true)
	if len(got) < 3 || len(got) > 12 {
		t.Errorf("37 turns: ticks %v", got)
	}
	for _, s := range got {
		if v, err := strconv.Atoi(s); err != nil || v < 1 || v > 37 {
			t.Errorf("37 turns: tick %q is not a turn", s)
		}
	}
}

// loadRun is a closed loop of users (the u-th starting u·125 ms late): each
// sends its next request when its previous one ends, requests last 500 ms,
// the first token comes at 100 ms and 41 output tokens stream over the
// remaining 400 ms (102.5 tokens/s per request). One request fails.
func loadRun(users, perUser int) Run {
	var recs []record.Record
	for u := range users {
		for k := range perUser {
			sent := t0.Add(time.Duration(k)*500*time.Millisecond + time.Duration(u)*125*time.Millisecond)
			r := record.Record{Index: len(recs), Intended: sent, Sent: sent, FirstToken: sent.Add(100 * time.Millisecond),
				End: sent.Add(500 * time.Millisecond), OutputTokensUsage: 41, OutputEvents: 41, Status: 200}
			if u == 0 && k == 3 {
				r.ErrorClass, r.Error, r.FirstToken, r.OutputTokensUsage, r.OutputEvents = record.ErrStreamCut, "cut", time.Time{}, 0, 0
			}
			r.Finalize()
			recs = append(recs, r)
		}
	}
	return Run{Name: "load", Records: recs}
}

// TestLoadOverTime: requests in flight over time come from the records'
// send and end times (4 users keep 4 in flight), and output tokens/s adds
// up to the tokens of the completed requests.
func TestLoadOverTime(t *testing.T) {
	run := loadRun(4, 20)
	charts := Charts([]Run{run}, ChartOptions{})
	inflight := chartByID(t, charts, "inflight_time")
	pts := inflight.Series[0].Points
	for _, p := range pts {
		if p[0] > 0.5 && p[0] < 9.5 && math.Abs(p[1]-4) > 1e-6 {
			t.Fatalf("in flight at %.2f s = %v, want 4 (all points %v)", p[0], p[1], pts)
		}
	}
	if inflight.YLabel != "requests in flight" {
		t.Errorf("y label %q", inflight.YLabel)
	}
	tok := chartByID(t, charts, "tokens_time")
	sp := tok.Series[0].Points
	if len(sp) < 10 {
		t.Fatalf("tokens/s has %d points", len(sp))
	}
	// Steady state: 4 requests streaming 102.5 tokens/s during 80% of the
	// time: 328 tokens/s on average (less where the failed request was).
	mid := 0.0
	for _, p := range sp[len(sp)/4 : 3*len(sp)/4] {
		mid += p[1]
	}
	mid /= float64(len(sp) / 2)
	if math.Abs(mid-328) > 10 {
		t.Errorf("output tokens/s mid-run = %v, want about 328 (points %v)", mid, sp)
	}
	// The area under the curve is every completed request's tokens.
	area := 0.0
	w := sp[1][0] - sp[0][0]
	for _, p := range sp {
		area += p[1] * w
	}
	if want := float64(79 * 41); math.Abs(area-want) > 0.02*want {
		t.Errorf("tokens under the curve %.0f, want %.0f", area, want)
	}
	if c := tok.Coverage; c == "" {
		t.Error("the tokens chart does not say that a failed request is left out")
	}
}

// TestLatencyDistributions: end-to-end latency and TPOT have CDFs.
func TestLatencyDistributions(t *testing.T) {
	charts := Charts([]Run{loadRun(2, 30)}, ChartOptions{})
	e2e := chartByID(t, charts, "e2e_cdf")
	if e2e.XLabel != "end-to-end latency (ms)" || e2e.Series[0].Points[0][0] != 500 {
		t.Errorf("e2e CDF: %s %v", e2e.XLabel, e2e.Series[0].Points[:2])
	}
	tpot := chartByID(t, charts, "tpot_cdf")
	// 400 ms over 40 tokens after the first.
	if got := tpot.Series[0].Points[0][0]; got != 10 {
		t.Errorf("TPOT %v ms, want 10", got)
	}
}

// The latency-against-load curve joins only runs that differ in load
// alone: runs sending another workload get a curve of their own.
func TestSweepCurveJoinsOnlyLoad(t *testing.T) {
	mk := func(name, conc, work string, base float64) Run {
		return fakeRun(name, 50, 1, base, 10, map[string]string{"loop": "closed", "concurrency": conc, "workload": work})
	}
	same := []Run{mk("a1", "1", "128-token prompts", 30), mk("a8", "8", "128-token prompts", 60)}
	if c := chartByID(t, Charts(same, ChartOptions{}), "sweep"); len(c.Series) != 2 {
		t.Fatalf("one workload: %d series, want P50 and P95", len(c.Series))
	}
	mixed := append(same, mk("b1", "1", "2048-token prompts", 300), mk("b8", "8", "2048-token prompts", 900))
	c := chartByID(t, Charts(mixed, ChartOptions{}), "sweep")
	if len(c.Series) != 4 {
		t.Fatalf("two workloads: %d series, want a P50 and a P95 curve each", len(c.Series))
	}
	for _, s := range c.Series {
		if len(s.Points) != 2 {
			t.Errorf("series %q joins %d runs, want the 2 of its workload", s.Name, len(s.Points))
		}
	}
}

func TestLoadText(t *testing.T) {
	for _, tc := range []struct {
		p    map[string]string
		want string
	}{
		{map[string]string{"loop": "closed", "concurrency": "8", "workload": "128-token prompts, ≤128 output tokens"}, "closed loop, concurrency 8; 128-token prompts, ≤128 output tokens"},
		{map[string]string{"loop": "open", "rate": "4", "arrival": "gamma", "max_concurrency": "64", "workload": "scenario chat"}, "open loop, 4 req/s gamma (≤64 in flight); scenario chat"},
		{map[string]string{"loop": "open", "arrival": "trace", "workload": "dataset azure.csv"}, "open loop on the trace's timestamps; dataset azure.csv"},
		// Older runs: their changed flags only.
		{map[string]string{"rate": "2", "prompt_tokens": "512", "max_tokens": "64"}, "open loop, 2 req/s poisson; 512-token prompts, ≤64 output tokens"},
		{map[string]string{"gpu": "a100"}, ""},
	} {
		if got := LoadText(tc.p); got != tc.want {
			t.Errorf("LoadText(%v) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

// TestParetoChartSLO: `ttft pareto --svg` draws the report's chart with its
// own latency axis and the SLO as a dashed, labelled line kept on the plot
// even above every point; the report's chart (no options) is unchanged.
func TestParetoChartSLO(t *testing.T) {
	if d := ParetoChart(paretoPoints, ParetoOptions{}); d.YLabel != "TTFT P95 (ms)" || d.Limit != 0 || !slices.Equal(d.Series[1].Labels, paretoChart(paretoPoints).Series[1].Labels) {
		t.Errorf("default chart: %+v", d)
	}
	ch := ParetoChart(paretoPoints, ParetoOptions{YLabel: "E2E P99 (ms)", SLOMs: 400})
	if ch.YLabel != "E2E P99 (ms)" || ch.Limit != 400 || ch.LimitLabel != "SLO 400 ms" {
		t.Fatalf("chart %+v", ch)
	}
	if _, _, _, y1 := bounds(ch); y1 < 400 {
		t.Errorf("y axis ends at %v, below the SLO", y1)
	}
	svg := SVG(ch)
	if !regexp.MustCompile(`<line [^>]*stroke="#b00020"[^>]*stroke-dasharray`).MatchString(svg) || !regexp.MustCompile(`>SLO 400 ms</text>`).MatchString(svg) {
		t.Errorf("no SLO line in\n%s", svg)
	}
}

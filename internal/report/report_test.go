package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// TestChartsGolden pins the data behind every chart (not the drawing).
func TestChartsGolden(t *testing.T) {
	runs := sweepRuns(300)
	charts := Charts(runs, ChartOptions{CDFPoints: 50, Bins: 20, MaxScatter: 100, Pareto: paretoPoints})
	var ids []string
	for _, c := range charts {
		ids = append(ids, c.ID)
	}
	want := "latency_throughput throughput_per_user ttft_cdf ttft_hist ttft_time itl_cdf tpot_cdf e2e_cdf ttft_turn inflight_time tokens_time sweep heatmap pareto"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("charts %q, want %q", got, want)
	}
	got, err := json.MarshalIndent(charts, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "charts.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantB, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(bytes.TrimSpace(wantB), bytes.TrimSpace(got)) {
		t.Fatalf("chart data differs from %s; if the change is intended run go test ./internal/report -run Golden -update", golden)
	}
}

func TestChartContents(t *testing.T) {
	runs := sweepRuns(400)
	byID := map[string]Chart{}
	for _, c := range Charts(runs, ChartOptions{Pareto: paretoPoints}) {
		byID[c.ID] = c
	}
	// CDFs end at 1 and rise monotonically.
	for _, s := range byID["ttft_cdf"].Series {
		last := s.Points[len(s.Points)-1]
		if last[1] != 1 {
			t.Fatalf("CDF %s ends at %v", s.Name, last[1])
		}
		for i := 1; i < len(s.Points); i++ {
			if s.Points[i][0] < s.Points[i-1][0] || s.Points[i][1] < s.Points[i-1][1] {
				t.Fatalf("CDF %s not monotone at %d", s.Name, i)
			}
		}
	}
	// Histogram fractions sum to 1 per run.
	for _, s := range byID["ttft_hist"].Series {
		sum := 0.0
		for _, p := range s.Points {
			sum += p[1]
		}
		if math.Abs(sum-1) > 0.01 {
			t.Fatalf("histogram %s sums to %v", s.Name, sum)
		}
	}
	// Per-turn drift: the fake runs' TTFT grows 5% a turn.
	turn := byID["ttft_turn"].Series[0]
	if len(turn.Points) != 5 || turn.Points[4][1] <= turn.Points[0][1] {
		t.Fatalf("turn drift not visible: %v", turn.Points)
	}
	// Sweep uses the concurrency label as the load axis.
	if byID["sweep"].XLabel != "concurrency" {
		t.Fatalf("sweep x axis %q", byID["sweep"].XLabel)
	}
	// Heatmap: larger batch × context is slower.
	h := byID["heatmap"].Heat
	if h == nil || len(h.X) != 2 || len(h.Y) != 2 || *h.Z[1][1] <= *h.Z[0][0] {
		t.Fatalf("heatmap %+v", h)
	}
	// Pareto: the A100 point is dominated.
	front := byID["pareto"].Series[1].Labels
	if strings.Join(front, ",") != "L4 x1 bs=16,A10G x1 bs=8" {
		t.Fatalf("front %v", front)
	}
}

func TestChartsSkipWhatIsMissing(t *testing.T) {
	r := fakeRun("solo", 50, 1, 100, 10, nil)
	for i := range r.Records {
		r.Records[i].Turn = 0
	}
	ids := ""
	for _, c := range Charts([]Run{r}, ChartOptions{}) {
		ids += c.ID + " "
	}
	if ids != "ttft_cdf ttft_hist ttft_time itl_cdf tpot_cdf e2e_cdf inflight_time tokens_time " {
		t.Fatalf("single-turn single run charts: %q", ids)
	}
	pruned := Run{Name: "pruned", Summary: r.Summary}
	if got := Charts([]Run{pruned}, ChartOptions{}); len(got) != 0 {
		t.Fatalf("charts from a run without records: %d", len(got))
	}
}

func TestCompareVerdicts(t *testing.T) {
	a := fakeRun("A", 800, 1, 100, 10, nil)
	b := fakeRun("B", 800, 2, 60, 10, nil)  // 40% faster
	c := fakeRun("C", 800, 3, 100, 10, nil) // same distribution as A
	cmp := Compare([]Run{a, b, c}, CompareOptions{})
	// Per run against A: TTFT mean, P95, P99 and distribution; ITL mean
	// and distribution.
	if len(cmp.Rows) != 3 || len(cmp.Diffs) != 12 {
		t.Fatalf("rows %d diffs %d", len(cmp.Rows), len(cmp.Diffs))
	}
	for _, d := range cmp.Diffs {
		if d.Metric != "TTFT" {
			continue
		}
		switch {
		case d.Run == "B" && d.Comparison.Stat == "distribution":
			if !d.Comparison.Significant || d.Comparison.ProbBLess <= 0.5 || !strings.HasPrefix(d.Verdict, "B tends to be faster than A at TTFT") {
				t.Fatalf("B vs A: %s", d.Verdict)
			}
		case d.Run == "B":
			if !d.Comparison.Significant || d.Comparison.Diff >= 0 || !strings.HasPrefix(d.Verdict, "B is faster than A") {
				t.Fatalf("B vs A: %s", d.Verdict)
			}
			if d.Comparison.CI95[0] > d.Comparison.Diff || d.Comparison.CI95[1] < d.Comparison.Diff {
				t.Fatalf("CI %v does not contain the difference %v", d.Comparison.CI95, d.Comparison.Diff)
			}
		case d.Run == "C":
			if d.Comparison.Stat == "mean" && d.Comparison.Significant {
				t.Fatalf("same distribution judged different: %s", d.Verdict)
			}
		}
	}
	var buf bytes.Buffer
	if err := cmp.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"mean TTFT ms", "P95 ms", "out tok/s", "95% CI ms", "verdict:", "B is faster than A at TTFT P95 by",
		"TTFT distribution", "Mann–Whitney U", "bootstrap"} {
		if !strings.Contains(out, want) {
			t.Fatalf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestCompareWithoutRecords(t *testing.T) {
	a := fakeRun("A", 100, 1, 100, 10, nil)
	b := fakeRun("B", 100, 2, 60, 10, nil)
	b.Records = nil
	cmp := Compare([]Run{a, b}, CompareOptions{})
	if len(cmp.Notes) != 1 || cmp.Diffs[0].Error == "" || !strings.Contains(cmp.Diffs[0].Verdict, "cannot compare") {
		t.Fatalf("pruned run: notes %v diff %+v", cmp.Notes, cmp.Diffs[0])
	}
	if cmp.Rows[1].P95TTFT != b.Summary.TTFT.P95 {
		t.Fatal("summary row lost")
	}
}

func TestHTMLIsSelfContainedAndEscaped(t *testing.T) {
	runs := sweepRuns(200)
	runs[0].Name = `<script>alert("x")</script>`
	rep := Build(runs, Options{Charts: ChartOptions{Pareto: paretoPoints}})
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if strings.Contains(page, "<script") {
		t.Fatal("a run name was not escaped (or a script slipped in)")
	}
	// Nothing external: the only URL is the SVG namespace.
	urls := regexp.MustCompile(`https?://[^"'\s<)]+`).FindAllString(page, -1)
	for _, u := range urls {
		if u != "http://www.w3.org/2000/svg" && !strings.HasPrefix(u, "sim://") {
			t.Fatalf("external reference %q", u)
		}
	}
	for _, banned := range []string{"<link", " src=", "url(", "@import"} {
		if strings.Contains(page, banned) {
			t.Fatalf("page contains %q", banned)
		}
	}
	if n := strings.Count(page, `<svg class="chart"`); n != 14 {
		t.Fatalf("%d charts in the page, want 14", n)
	}
	for _, want := range []string{`id="summary"`, `id="diffs"`, `id="slo"`, "is faster than", "Pareto"} {
		if !strings.Contains(page, want) {
			t.Fatalf("page lacks %q", want)
		}
	}
}

func TestPNGMatchesChart(t *testing.T) {
	runs := sweepRuns(200)
	charts := Charts(runs, ChartOptions{})
	dir := t.TempDir()
	paths, err := WritePNGs(dir, charts)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != len(charts) {
		t.Fatalf("%d PNGs for %d charts", len(paths), len(charts))
	}
	f, err := os.Open(paths[0]) // the CDF
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != chartW || b.Dy() != chartH {
		t.Fatalf("size %v", b)
	}
	// Every series colour appears (its line), and the title row has ink.
	for i := range charts[0].Series {
		want := seriesColor(i)
		found := false
		for y := padT; y < chartH-padB && !found; y++ {
			for x := padL; x < chartW-padR; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B {
					found = true
					break
				}
			}
		}
		if !found {
			t.Fatalf("series %d colour %v not drawn", i, want)
		}
	}
	ink := 0
	for y := 8; y < 24; y++ {
		for x := 0; x < chartW; x++ {
			if r, _, _, _ := img.At(x, y).RGBA(); r < 0x8000 {
				ink++
			}
		}
	}
	if ink < 50 {
		t.Fatalf("title not drawn (%d dark pixels)", ink)
	}
}

func TestTicks(t *testing.T) {
	for _, c := range [][2]float64{{0, 1}, {0, 137}, {12.5, 13.1}, {-5, 5}, {0, 1e6}, {3, 3.0001}} {
		ts := ticks(c[0], c[1], 6)
		if len(ts) < 2 || len(ts) > 20 {
			t.Fatalf("ticks(%v) = %v", c, ts)
		}
		eps := 1e-12 * math.Max(1, math.Abs(c[1]))
		if ts[0] > c[0]+eps || ts[len(ts)-1] < c[1]-eps {
			t.Fatalf("ticks(%v) = %v do not cover the range", c, ts)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Fatalf("ticks(%v) not increasing: %v", c, ts)
			}
		}
	}
}

package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// CompareOptions tunes Compare.
type CompareOptions struct {
	// Seed makes the bootstrap reproducible (default 1).
	Seed int64
}

// Row is one run's line in the comparison table. A statistic of no sample
// (no completed request, no gap) is NaN: "-" in text, null in JSON.
type Row struct {
	Name        string  `json:"name"`
	Source      string  `json:"source"`
	Target      string  `json:"target"`
	Requests    int     `json:"requests"`
	Completed   int     `json:"completed"`
	Failed      int     `json:"failed"`
	MeanTTFT    float64 `json:"ttft_mean_ms"`
	StdTTFT     float64 `json:"ttft_std_ms"`
	P50TTFT     float64 `json:"ttft_p50_ms"`
	P95TTFT     float64 `json:"ttft_p95_ms"`
	P99TTFT     float64 `json:"ttft_p99_ms"`
	MeanITL     float64 `json:"itl_mean_ms"`
	RequestsPS  float64 `json:"requests_per_s"`
	OutTokensPS float64 `json:"output_tokens_per_s"`
	// TTFTBasis is where the run's TTFT starts (record.BasisIntended for
	// open-loop runs, whose client lateness counts).
	TTFTBasis string `json:"ttft_basis,omitempty"`
	// Load is the load the run offered (LoadText), "" when unknown.
	Load string `json:"load,omitempty"`
}

// MarshalJSON writes a statistic of no sample (NaN) as null.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	fin := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		plain
		MeanTTFT *float64 `json:"ttft_mean_ms"`
		StdTTFT  *float64 `json:"ttft_std_ms"`
		P50TTFT  *float64 `json:"ttft_p50_ms"`
		P95TTFT  *float64 `json:"ttft_p95_ms"`
		P99TTFT  *float64 `json:"ttft_p99_ms"`
		MeanITL  *float64 `json:"itl_mean_ms"`
	}{plain(r), fin(r.MeanTTFT), fin(r.StdTTFT), fin(r.P50TTFT), fin(r.P95TTFT), fin(r.P99TTFT), fin(r.MeanITL)})
}

// FailedCell is the failed count with its share: "87 (87%)".
func (r Row) FailedCell() string {
	if r.Failed == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", r.Failed, share(r.Failed, r.Requests))
}

// Diff is one run against the first (the baseline) for one statistic
// (bootstrap) or one distribution (Mann–Whitney U); Comparison.Method says
// which, and the verdict follows from that row's own test.
type Diff struct {
	Run        string           `json:"run"`
	Baseline   string           `json:"baseline"`
	Metric     string           `json:"metric"` // TTFT, ITL
	Comparison stats.Comparison `json:"comparison"`
	Verdict    string           `json:"verdict"`
	Error      string           `json:"error,omitempty"`
}

// Comparison is the output of Compare.
type Comparison struct {
	Rows []Row `json:"rows"`
	// Failures lists the runs with failed requests, each with its error
	// classes; the statistics above describe completed requests only.
	Failures []Failures `json:"failures,omitempty"`
	Diffs    []Diff     `json:"diffs"`
	// Notes explain what could not be compared (pruned records...).
	Notes []string `json:"notes,omitempty"`
}

// compared statistics: the article's table (mean, P95, P99 of TTFT) and
// the whole distribution; the mean and the distribution of ITL.
var (
	compareTTFT = []string{"mean", "p95", "p99", stats.StatDistribution}
	compareITL  = []string{"mean", stats.StatDistribution}
)

// Compare builds the side-by-side table and compares every run with the
// first one: the difference of each statistic with its bootstrap 95% CI
// and bootstrap p-value, the Mann–Whitney U test of each distribution (one
// row per metric), and a one-line verdict per row from that row's test.
func Compare(runs []Run, opt CompareOptions) Comparison {
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	var out Comparison
	ttfts := make([][]float64, len(runs))
	itls := make([][]float64, len(runs))
	fails := make([]Failures, len(runs))
	for i, r := range runs {
		s := r.Summary
		ttft, itl := s.JudgedTTFT(), s.ITL
		fails[i] = failuresOf(i, r)
		row := Row{
			Name: r.Name, Source: s.Source, Target: strings.Join(nonEmpty(s.Model, s.Target), " @ "),
			Requests: fails[i].Total, Completed: fails[i].Completed, Failed: fails[i].Failed,
			MeanTTFT: ttft.Mean, StdTTFT: ttft.Std, P50TTFT: ttft.P50, P95TTFT: ttft.P95, P99TTFT: ttft.P99,
			TTFTBasis: s.TTFTBasis, Load: LoadText(r.Labels),
			MeanITL: itl.Mean, RequestsPS: s.Throughput.RequestsPerS, OutTokensPS: s.Throughput.OutputTokensPerS,
		}
		// No sample, no statistic: a run whose every request failed has
		// no TTFT, not a TTFT of 0.
		if ttft.Count == 0 {
			nan := math.NaN()
			row.MeanTTFT, row.StdTTFT, row.P50TTFT, row.P95TTFT, row.P99TTFT = nan, nan, nan, nan, nan
		}
		if itl.Count == 0 {
			row.MeanITL = math.NaN()
		}
		out.Rows = append(out.Rows, row)
		if fails[i].Failed > 0 {
			out.Failures = append(out.Failures, fails[i])
		}
		ttfts[i] = ttftOf(r.Records)
		itls[i] = itlPerRequest(r.Records)
		if len(r.Records) == 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("%s has no per-request records (pruned or summary only): its differences cannot be tested", r.Name))
		}
	}
	var open []string
	for _, r := range out.Rows {
		if r.TTFTBasis == record.BasisIntended {
			open = append(open, r.Name)
		}
	}
	out.Notes = append(out.Notes, loadNotes(runs)...)
	if len(open) > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("TTFT of %s (open loop) is %s, as its SLO verdicts judge it; of closed-loop runs %s",
			strings.Join(open, ", "), record.BasisText(record.BasisIntended), record.BasisText(record.BasisSent)))
	}
	if len(runs) < 2 {
		return out
	}
	for i := 1; i < len(runs); i++ {
		for _, st := range compareTTFT {
			out.Diffs = append(out.Diffs, diff(runs[0], runs[i], fails[0], fails[i], "TTFT", st, ttfts[0], ttfts[i], opt.Seed))
		}
		if len(itls[0]) > 0 && len(itls[i]) > 0 {
			for _, st := range compareITL {
				out.Diffs = append(out.Diffs, diff(runs[0], runs[i], fails[0], fails[i], "ITL", st, itls[0], itls[i], opt.Seed))
			}
		}
	}
	return out
}

func diff(a, b Run, fa, fb Failures, metric, st string, xa, xb []float64, seed int64) Diff {
	c := stats.CompareSamples(xa, xb, st, seed)
	d := Diff{Run: b.Name, Baseline: a.Name, Metric: metric, Comparison: c, Verdict: c.Verdict(a.Name, b.Name, metric)}
	if c.Err != nil {
		d.Error = c.Err.Error()
		// Say why a sample is empty in the run's terms.
		for _, x := range []struct {
			r Run
			f Failures
			n int
		}{{a, fa, len(xa)}, {b, fb, len(xb)}} {
			if x.n > 0 {
				continue
			}
			why := x.r.Name + " has no per-request records (pruned or summary only)"
			if len(x.r.Records) > 0 && x.f.NoneCompleted() {
				why = fmt.Sprintf("%s has no completed request (%d of %d failed)", x.r.Name, x.f.Failed, x.f.Total)
			} else if len(x.r.Records) > 0 {
				why = x.r.Name + " has no " + metric + " value"
			}
			d.Error = why
			d.Verdict = fmt.Sprintf("cannot compare %s and %s at %s: %s", a.Name, b.Name, atName(metric, st), why)
			break
		}
		return d
	}
	// A comparison of the requests that completed says nothing about the
	// ones that did not: say how many those are.
	var caveats []string
	for _, f := range []Failures{fa, fb} {
		if f.Failed > 0 {
			caveats = append(caveats, fmt.Sprintf("%d of %d of %s", f.Failed, f.Total, f.Run))
		}
	}
	if len(caveats) > 0 {
		d.Verdict += "; failed requests not compared: " + strings.Join(caveats, ", ")
	}
	return d
}

// rowName names a comparison row: "TTFT P95", "TTFT mean", "TTFT distribution".
func rowName(metric, st string) string {
	return strings.TrimSpace(metric + " " + statName(st))
}

// atName is rowName after "at": "TTFT P95", "the TTFT distribution".
func atName(metric, st string) string {
	if st == stats.StatDistribution {
		return "the " + rowName(metric, st)
	}
	return rowName(metric, st)
}

// itlPerRequest is each completed request's mean inter-token gap. The
// gaps of one request are not independent of each other (they share its
// batch, its position in it and the server's state), so pooling them would
// make the U test's p-value and the bootstrap interval far too confident;
// the requests are the independent units.
func itlPerRequest(recs []record.Record) []float64 {
	var out []float64
	for i := range recs {
		r := &recs[i]
		if r.Warmup || !r.OK() {
			continue
		}
		sum, n := 0.0, 0
		for _, g := range r.ITLMs {
			if g >= 0 && !math.IsNaN(g) && !math.IsInf(g, 0) {
				sum += g
				n++
			}
		}
		if n > 0 {
			out = append(out, sum/float64(n))
		}
	}
	return out
}

// WriteText prints the comparison: failed requests first (the table's
// latencies are of completed requests only), the article's table, then the
// differences and verdicts.
func (c Comparison) WriteText(w io.Writer) error {
	if len(c.Failures) > 0 {
		fmt.Fprintln(w, "failed requests (not in any latency below):")
		for _, f := range c.Failures {
			line := fmt.Sprintf("  %s: %d of %d requests failed (%s)", f.Run, f.Failed, f.Total, f.Share())
			if f.NoneCompleted() {
				line += "; no completed request, so no latency"
			}
			fmt.Fprintln(w, line)
			for _, e := range f.Classes {
				if e.First != "" {
					fmt.Fprintf(w, "    %s %d (first: %q)\n", e.Class, e.Count, e.First)
				} else {
					fmt.Fprintf(w, "    %s %d\n", e.Class, e.Count)
				}
			}
		}
		fmt.Fprintln(w)
	}
	for _, r := range c.Rows {
		if r.Load != "" {
			fmt.Fprintf(w, "load of %s: %s\n", r.Name, r.Load)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tsource\ttarget/model\trequests\tfailed\tmean TTFT ms\tstd ms\tP50 ms\tP95 ms\tP99 ms\tITL ms\treq/s\tout tok/s\t")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.Source, r.Target, r.Requests, r.FailedCell(),
			num(r.MeanTTFT), num(r.StdTTFT), num(r.P50TTFT), num(r.P95TTFT), num(r.P99TTFT), num(r.MeanITL), rate(r.RequestsPS), rate(r.OutTokensPS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(c.Diffs) > 0 {
		fmt.Fprintf(w, "\ndifferences vs %s (B − A): each statistic with its bootstrap 95%% CI and bootstrap p; each distribution with a Mann–Whitney U test (two-sided p):\n", c.Diffs[0].Baseline)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tcompared\tA ms\tB ms\tB − A ms\t95% CI ms\tchange\tp\ttest\t")
		for _, d := range c.Diffs {
			x := d.Comparison
			if d.Error != "" {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t%s\t\n", d.Run, rowName(d.Metric, x.Stat), testName(x.Method))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", d.Run, rowName(d.Metric, x.Stat), num(x.A), num(x.B), signed(x.Diff),
				ciText(x.CI95), pct(x.RelDiff), pval(x.PValue), testName(x.Method))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nverdict:")
		for _, d := range c.Diffs {
			fmt.Fprintf(w, "  %s\n", d.Verdict)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// testName names a row's test for tables.
func testName(method string) string {
	if method == stats.MethodMannWhitney {
		return "Mann–Whitney U"
	}
	return method
}

// signed prints a difference with its sign, one decimal ("+0.0" for a
// difference that rounds to zero, never "-0.0").
func signed(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if math.Abs(v) < 0.05 {
		v = 0
	}
	return fmt.Sprintf("%+.1f", v)
}

func ciText(c [2]float64) string {
	if math.IsNaN(c[0]) || math.IsNaN(c[1]) {
		return "-"
	}
	return signed(c[0]) + " … " + signed(c[1])
}

// rate prints a throughput: 0 when nothing completed (a measured zero,
// not a missing statistic).
func rate(v float64) string {
	if v == 0 {
		return "0"
	}
	return num(v)
}

func statName(s string) string {
	if s == "mean" || s == stats.StatDistribution {
		return s
	}
	return strings.ToUpper(s)
}

func num(v float64) string { return stats.FormatMs(v) }

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if math.Abs(v) < 0.0005 {
		v = 0
	}
	return fmt.Sprintf("%+.1f%%", 100*v)
}

func pval(p float64) string { return stats.FormatP(p) }

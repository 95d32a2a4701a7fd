package report

import (
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

// Row is one run's line in the comparison table.
type Row struct {
	Name        string  `json:"name"`
	Source      string  `json:"source"`
	Target      string  `json:"target"`
	Requests    int     `json:"requests"`
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
}

// Diff is one run against the first (the baseline) for one statistic.
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
	Rows  []Row  `json:"rows"`
	Diffs []Diff `json:"diffs"`
	// Notes explain what could not be compared (pruned records...).
	Notes []string `json:"notes,omitempty"`
}

// compared statistics: the article's table (mean, P95, P99 of TTFT) and ITL.
var compareTTFT = []string{"mean", "p95", "p99"}

// Compare builds the side-by-side table and compares every run with the
// first one: the difference of each statistic with its bootstrap 95% CI,
// a Mann–Whitney U test on the distributions, and a one-line verdict.
func Compare(runs []Run, opt CompareOptions) Comparison {
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	var out Comparison
	ttfts := make([][]float64, len(runs))
	itls := make([][]float64, len(runs))
	for i, r := range runs {
		s := r.Summary
		out.Rows = append(out.Rows, Row{
			Name: r.Name, Source: s.Source, Target: strings.Join(nonEmpty(s.Model, s.Target), " @ "),
			Requests: s.Requests.Total, Failed: s.Requests.Failed,
			MeanTTFT: s.JudgedTTFT().Mean, StdTTFT: s.JudgedTTFT().Std, P50TTFT: s.JudgedTTFT().P50, P95TTFT: s.JudgedTTFT().P95, P99TTFT: s.JudgedTTFT().P99,
			TTFTBasis: s.TTFTBasis,
			MeanITL:   s.ITL.Mean, RequestsPS: s.Throughput.RequestsPerS, OutTokensPS: s.Throughput.OutputTokensPerS,
		})
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
	if len(open) > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("TTFT of %s (open loop) is %s, as its SLO verdicts judge it; of closed-loop runs %s",
			strings.Join(open, ", "), record.BasisText(record.BasisIntended), record.BasisText(record.BasisSent)))
	}
	if len(runs) < 2 {
		return out
	}
	base := runs[0].Name
	for i := 1; i < len(runs); i++ {
		for _, st := range compareTTFT {
			out.Diffs = append(out.Diffs, diff(base, runs[i].Name, "TTFT", st, ttfts[0], ttfts[i], opt.Seed))
		}
		if len(itls[0]) > 0 && len(itls[i]) > 0 {
			out.Diffs = append(out.Diffs, diff(base, runs[i].Name, "ITL", "mean", itls[0], itls[i], opt.Seed))
		}
	}
	return out
}

func diff(a, b, metric, st string, xa, xb []float64, seed int64) Diff {
	c := stats.CompareSamples(xa, xb, st, seed)
	d := Diff{Run: b, Baseline: a, Metric: metric, Comparison: c, Verdict: c.Verdict(a, b, metric)}
	if c.Err != nil {
		d.Error = c.Err.Error()
	}
	return d
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

// WriteText prints the comparison as the article's table followed by the
// differences and verdicts.
func (c Comparison) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tsource\ttarget/model\trequests\tfailed\tmean TTFT ms\tstd ms\tP50 ms\tP95 ms\tP99 ms\tITL ms\treq/s\tout tok/s\t")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.Source, r.Target, r.Requests, r.Failed,
			num(r.MeanTTFT), num(r.StdTTFT), num(r.P50TTFT), num(r.P95TTFT), num(r.P99TTFT), num(r.MeanITL), num(r.RequestsPS), num(r.OutTokensPS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(c.Diffs) > 0 {
		fmt.Fprintf(w, "\ndifferences vs %s (B − A; bootstrap 95%% CI; Mann–Whitney U two-sided p):\n", c.Diffs[0].Baseline)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tmetric\tA ms\tB ms\tB − A ms\t95% CI ms\tchange\tp\t")
		for _, d := range c.Diffs {
			x := d.Comparison
			if d.Error != "" {
				fmt.Fprintf(tw, "%s\t%s %s\t-\t-\t-\t-\t-\t-\t\n", d.Run, d.Metric, statName(x.Stat))
				continue
			}
			fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%+.1f\t%s\t%s\t%s\t\n", d.Run, d.Metric, statName(x.Stat), num(x.A), num(x.B), x.Diff,
				fmt.Sprintf("%+.1f … %+.1f", x.CI95[0], x.CI95[1]), pct(x.RelDiff), pval(x.PValue))
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

func statName(s string) string {
	if s == "mean" {
		return "mean"
	}
	return strings.ToUpper(s)
}

func num(v float64) string { return stats.FormatMs(v) }

func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*v)
}

func pval(p float64) string {
	if math.IsNaN(p) {
		return "-"
	}
	if p < 0.001 {
		return "<0.001"
	}
	return fmt.Sprintf("%.3f", p)
}

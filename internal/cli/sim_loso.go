package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/ttft-dev/ttft/internal/sim"
)

// printLOSO regenerates the leave-one-source-out table of
// docs/simulator-validation.md: every row of the public corpus (or of
// corpusPath) predicted by physics fitted on the other sources only.
// draw > 0 simulates the served rows with other requests (lengths and
// arrivals drawn from seeds offset by draw × 1000).
func printLOSO(ctx context.Context, w io.Writer, cat *sim.Catalog, corpusPath string, draw int) error {
	rows, err := loadCorpus(corpusPath)
	if err != nil {
		return err
	}
	for i := range rows {
		rows[i].Draw = uint64(draw) * 1000
	}
	res, err := sim.LeaveOneSourceOut(ctx, cat, rows)
	if err != nil {
		return fmt.Errorf("leave-one-source-out: %w", err)
	}
	fmt.Fprintln(w, "Leave-one-source-out: each row predicted by physics fitted without its source.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| source | engine | profile/sched | model | GPU | TP | dtype | prompt/output | load | TTFT meas/pred ms | err | throughput meas/pred | err | ITL err |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range res.Rows {
		ttft, terr := "—", "—"
		if r.TTFTMs > 0 {
			ttft, terr = fmt.Sprintf("%.1f / %.1f", r.TTFTMs, r.Pred.TTFTMs), pct(r.TTFTErr)
		}
		tput, perr := "—", "—"
		switch {
		case r.Tput > 0:
			tput, perr = fmt.Sprintf("%.4g / %.4g %s", r.Tput, r.Pred.Tput, r.TputUnit), pct(r.TErr)
		case r.E2EMs > 0:
			tput, perr = fmt.Sprintf("%.0f / %.0f e2e ms", r.E2EMs, r.Pred.E2EMs), pct(r.E2EErr)
		}
		sat := ""
		if r.Saturation {
			sat = " (sat.)"
		}
		fmt.Fprintf(w, "| %s | %s | %s/%s | %s | %s | %d | %s | %d/%d %s | %s %g%s | %s | %s | %s | %s | %s |\n",
			r.Source, r.Published, r.Profile, r.Sched, r.Model, r.GPU, r.TP, r.DType, r.Prompt, r.Output, r.Lengths, r.Load, r.Value, sat, ttft, terr, tput, perr, pct(r.ITLErr))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| figure | rows | median abs. error |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, s := range sim.Summarize(res.Rows) {
		fmt.Fprintf(w, "| %s | %d | %.1f%% |\n", s.Name, s.N, s.Median)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| source (left out) | rows | median abs. TTFT error | median abs. throughput error | median abs. saturation throughput error |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, s := range sim.SummarizeBySource(res.Rows) {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", s.Source, s.Rows, abspct(s.TTFT), abspct(s.Throughput), abspct(s.Saturation))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Physics scales fitted per left-out source (× the public-figure priors):")
	for _, src := range foldOrder(res) {
		s := res.Folds[src]
		fmt.Fprintf(w, "  without %-14s compute %.2f  fp8 %.2f  fp8(amd) %.2f  mem %.2f  mem(amd) %.2f  layer %.2f  step %.2f  allreduce %.2f\n", src, s.Compute, s.FP8, s.FP8AMD, s.Mem, s.MemAMD, s.Layer, s.Step, s.AllReduce)
	}
	return nil
}

// printPublishedCapacity prints sim.PublishedCapacity as the table in
// docs/simulator-validation.md ("The planner's question on published
// deployments").
func printPublishedCapacity(ctx context.Context, w io.Writer, cat *sim.Catalog) error {
	checks, err := sim.PublishedCapacity(ctx, cat, nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "| deployment | workload | P90 TTFT limit | published bracket, req/s | simulated, req/s | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, c := range checks {
		r := c.Row
		dtype := r.DType
		if dtype == "" {
			dtype = "bf16"
		}
		bracket := fmt.Sprintf("%g – %g", c.PubLo, c.PubHi)
		if c.PubHi == 0 {
			bracket = fmt.Sprintf("≥ %g (none measured beyond)", c.PubLo)
		}
		got := fmt.Sprintf("%.1f", c.Simulated)
		if c.Simulated >= c.MaxRate {
			got = fmt.Sprintf("≥ %g (search cap)", c.MaxRate)
		}
		fmt.Fprintf(w, "| %s %s, %d× %s (%s) | %s %d/%d %s, %d requests | %.0f ms | %s | %s | %s |\n",
			r.Model, dtype, r.TP, r.GPU, r.Published, r.Lengths, r.Prompt, r.Output, "tokens", r.Requests, c.SLOP90Ms, bracket, got, c.Assessment)
	}
	return nil
}

func foldOrder(res *sim.LOSOResult) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range res.Rows {
		if !seen[r.Fold] {
			seen[r.Fold] = true
			out = append(out, r.Fold)
		}
	}
	return out
}

func loadCorpus(path string) ([]sim.CorpusRow, error) {
	if path == "" {
		return sim.DefaultCorpus()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	defer f.Close()
	rows, err := sim.ParseCorpus(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%+.1f%%", v)
}

func abspct(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", v)
}

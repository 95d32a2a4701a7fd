package cli

// ttft report: one self-contained HTML file (inline SVG charts, no
// JavaScript, nothing fetched) for one or more runs, and the same charts as
// PNG with --png.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/analysis"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/report"
	"github.com/ttft-dev/ttft/internal/stats"
)

type reportOptions struct {
	out, pngDir, title, prices, jsonOut string
	seed                                int64
}

func newReportCmd(env *Env) *cobra.Command {
	o := &storeOpener{env: env}
	var opt reportOptions
	cmd := &cobra.Command{
		Use:   "report RUN... -o report.html",
		Short: "Write a self-contained HTML report (tables and charts), optionally PNG charts",
		Long: `Writes ONE HTML file with each run's failed requests (count, error classes,
first message) at the top, the summary table, differences against the
first run (bootstrap 95% CI and p, Mann–Whitney U per distribution,
verdicts), SLO verdicts and charts: TTFT CDF, histogram and TTFT over time
per run, the ITL, TPOT and end-to-end latency distributions, requests in
flight and output tokens/s over time, per-turn TTFT drift (multi-turn
runs), latency against load and the
batch × context heatmap (runs labelled as a sweep: concurrency/rate,
batch and context labels), and the cost/latency Pareto front (runs
labelled with gpu=..., or hosted models with a known price; see
'ttft pareto'). Charts are inline SVG drawn by ttft: the file opens
offline and fetches nothing. --png DIR writes the same charts as PNG.
A RUN is a stored run ID, a unique prefix, "latest", or a run directory;
a directory of run directories (the output of ttft sweep) stands for all
of them.`,
		Example: `  ttft report latest -o report.html
  ttft report runs/c1 runs/c4 runs/c16 -o sweep.html --png charts/
  ttft report sweep-out/ -o sweep.html`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			return runReport(cmd, env, o, opt, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dsn, "db", "", dbFlagHelp)
	f.StringVarP(&opt.out, "output", "o", "", "write the HTML report to `FILE` (required unless --png or --json)")
	f.StringVar(&opt.pngDir, "png", "", "also write every chart as PNG into `DIR`")
	f.StringVar(&opt.jsonOut, "json", "", "also write the chart data as JSON to `FILE`")
	f.StringVar(&opt.title, "title", "", "report title (default \"ttft report\")")
	f.StringVar(&opt.prices, "prices", "", "price list `FILE` for the Pareto front (as in 'ttft pareto')")
	f.Int64Var(&opt.seed, "seed", 1, "bootstrap seed")
	return cmd
}

func runReport(cmd *cobra.Command, env *Env, o *storeOpener, opt reportOptions, args []string) error {
	if opt.out == "" && opt.pngDir == "" && opt.jsonOut == "" {
		return usageErr("report: say where to write: -o report.html, --png DIR or --json FILE")
	}
	runs, err := loadRuns(cmd.Context(), o, args)
	if err != nil {
		return err
	}
	rr := make([]report.Run, len(runs))
	for i, l := range runs {
		rr[i] = l.reportRun()
		if len(l.Records) == 0 {
			fmt.Fprintf(env.Stderr, "note: %s has no per-request records; only its summary is shown\n", rr[i].Name)
		}
	}
	pareto, err := reportPareto(env, runs, opt.prices)
	if err != nil {
		return err
	}
	rep := report.Build(rr, report.Options{
		Title: opt.title, Generated: time.Now(),
		Charts:  report.ChartOptions{Pareto: pareto},
		Compare: report.CompareOptions{Seed: opt.seed},
	})
	if opt.out != "" {
		if err := writeFileAtomic(opt.out, func(f *os.File) error { return rep.WriteHTML(f) }); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "wrote %s (%d runs, %d charts)\n", opt.out, len(rr), len(rep.Charts))
	}
	if opt.pngDir != "" {
		paths, err := report.WritePNGs(opt.pngDir, rep.Charts)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "wrote %d PNG charts to %s\n", len(paths), opt.pngDir)
	}
	if opt.jsonOut != "" {
		if err := record.WriteJSON(opt.jsonOut, rep.Charts); err != nil {
			return err
		}
	}
	return nil
}

// reportPareto prices the runs that can be priced (a gpu label, or a
// hosted model with a known price), as 'ttft pareto' does. With fewer than
// two priced runs there is no front to draw.
func reportPareto(env *Env, runs []*loadedRun, pricesPath string) ([]stats.ParetoPoint, error) {
	if len(runs) < 2 {
		return nil, nil
	}
	pr, err := analysis.NewPricer(pricesPath)
	if err != nil {
		return nil, usageErr("report: %v", err)
	}
	var pts []stats.ParetoPoint
	for _, l := range runs {
		ar := &analysis.Run{Dir: l.name(), Name: l.name(), Summary: l.Summary, Labels: l.Meta.Labels}
		if ar.Labels == nil {
			ar.Labels = map[string]string{}
		}
		p, err := pr.Point(ar, analysis.Statistic{Metric: "ttft", Stat: "p95"})
		if err != nil {
			continue // unpriced runs simply stay off the cost plane
		}
		pts = append(pts, p)
	}
	if len(pts) < 2 {
		if pricesPath != "" {
			fmt.Fprintf(env.Stderr, "note: fewer than two runs could be priced; no Pareto front\n")
		}
		return nil, nil
	}
	return pts, nil
}

// writeFileAtomic writes path through a temp file and a rename, so a failed
// render never leaves a truncated report behind.
func writeFileAtomic(path string, fill func(*os.File) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := fill(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

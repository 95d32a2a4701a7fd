package cli

// ttft sim calibrate: fit an engine profile to `ttft bench` runs of a real
// endpoint (black-box: only TTFT, inter-token times and throughput), check
// it on runs held out of the fit, and write it as a catalog file that sim
// run, sim serve and plan load with --catalog.

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/sim"
)

func newSimCalibrateCmd(env *Env) *cobra.Command {
	o := &storeOpener{env: env}
	var catalogs []string
	var model, gpu, quant, base, name, out string
	var tp, every, maxLen, maxSeqs int
	var memUtil float64
	cmd := &cobra.Command{
		Use:   "calibrate RUN...",
		Short: "Fit an engine profile to bench runs of a real endpoint and write it as a catalog",
		Long: `Fit an engine profile to ttft bench runs of one deployment (a short sweep
of concurrencies, rates or prompt lengths is enough): compute and memory
efficiency, attention's efficiency relative to the GEMMs, the per-step
overhead, and the front end's cost per request and per request in flight
are searched so that the simulator reproduces each run's median TTFT,
median TPOT and request throughput (mean absolute log error). Every --holdout-every'th run (ordered by
load) is left out of the fit and predicted, so the printed held-out error is
out of sample. The profile is written to --out as a catalog file:

  ttft sim calibrate --model llama-3.1-8b --gpu h100-sxm --out my.yaml RUN1 RUN2 RUN3 RUN4
  ttft sim run --catalog my.yaml --engine-profile calibrated ...

RUN is a run ID, a unique prefix, "latest" or a run directory.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			defer o.close()
			cat, err := loadCatalog(catalogs)
			if err != nil {
				return err
			}
			runs, err := loadRuns(cmd.Context(), o, args)
			if err != nil {
				return err
			}
			var rows []sim.CorpusRow
			for _, r := range runs {
				row, err := runToRow(r, model, gpu, quant, tp, base)
				if err != nil {
					return usageErr("%s: %v", r.name(), err)
				}
				row.MemUtil, row.MaxLen, row.MaxSeqs = memUtil, maxLen, maxSeqs
				rows = append(rows, row)
			}
			sort.SliceStable(rows, func(i, j int) bool { return rows[i].Value < rows[j].Value })
			var train, held []sim.CorpusRow
			for i, r := range rows {
				if every > 1 && i%every == every-1 {
					held = append(held, r)
				} else {
					train = append(train, r)
				}
			}
			if len(train) == 0 {
				return usageErr("no runs left to fit after holding out every %d'th", every)
			}
			p, loss, err := sim.FitServed(cmd.Context(), cat, base, train)
			if err != nil {
				return failErr("%v", err)
			}
			p.Name = name
			fitted := *cat
			fitted.Engines = append(append([]sim.EngineProfile(nil), cat.Engines...), p)
			for i := range rows {
				rows[i].Profile = name
			}
			res, err := sim.PredictRows(cmd.Context(), &fitted, rows)
			if err != nil {
				return failErr("%v", err)
			}
			w := env.Stdout
			fmt.Fprintf(w, "fitted %s from %s on %d runs (mean |log error| %.3f): compute_eff_max %.3f  attn_eff %.3f  mem_eff %.3f  step_overhead_ms %.2f  api_overhead_ms %.2f  api_inflight_ms %.3f\n\n",
				name, base, len(train), loss, p.ComputeEffMax, p.AttnEff, p.MemEff, p.StepOverheadMs, p.APIOverheadMs, p.APIInflightMs)
			fmt.Fprintln(w, "| run | split | load | prompt/output | TTFT P50 meas/pred ms | err | TPOT P50 meas/pred ms | err | req/s meas/pred | err |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
			var heldErr []float64
			for i, r := range res {
				split := "fit"
				if every > 1 && i%every == every-1 {
					split = "held-out"
					if !math.IsNaN(r.TTFTErr) {
						heldErr = append(heldErr, math.Abs(r.TTFTErr))
					}
				}
				fmt.Fprintf(w, "| %s | %s | %s %g | %d/%d | %.1f / %.1f | %s | %.2f / %.2f | %s | %.3g / %.3g | %s |\n",
					r.Source, split, r.Load, r.Value, r.Prompt, r.Output, r.TTFTMs, r.Pred.TTFTMs, pct(r.TTFTErr), r.ITLMs, r.Pred.ITLMs, pct(r.ITLErr), r.Tput, r.Pred.Tput, pct(r.TErr))
			}
			if len(heldErr) > 0 {
				fmt.Fprintf(w, "\nheld-out median |TTFT error| %.1f%% over %d runs\n", median(heldErr), len(heldErr))
			}
			if out != "" {
				b, err := yaml.Marshal(sim.Catalog{Engines: []sim.EngineProfile{p}})
				if err != nil {
					return err
				}
				hdr := fmt.Sprintf("# Engine profile %q fitted by `ttft sim calibrate` from %s on %d runs of %s on %d× %s.\n# Use: ttft sim run --catalog %s --engine-profile %s ...\n", name, base, len(train), model, max(1, tp), gpu, out, name)
				if err := os.WriteFile(out, append([]byte(hdr), b...), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(w, "wrote %s\n", out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model the runs served (catalog name; required)")
	f.StringVar(&gpu, "gpu", "", "GPU the runs were served on (catalog name; required)")
	f.IntVar(&tp, "tensor-parallel-size", 1, "tensor-parallel size of the served deployment")
	f.StringVar(&quant, "quantization", "", "weight format of the served deployment (fp8, int4, ...)")
	f.StringVar(&base, "engine-profile", "vllm", "profile to start from")
	f.Float64Var(&memUtil, "gpu-memory-utilization", 0, "the served deployment's --gpu-memory-utilization (0: 0.9)")
	f.IntVar(&maxLen, "max-model-len", 0, "the served deployment's --max-model-len (0: the model's)")
	f.IntVar(&maxSeqs, "max-num-seqs", 0, "the served deployment's --max-num-seqs, requests batched at once (Ollama: OLLAMA_NUM_PARALLEL; 0: 256)")
	f.StringVar(&name, "name", "calibrated", "name of the fitted profile")
	f.IntVar(&every, "holdout-every", 2, "hold every N'th run (ordered by load) out of the fit and report its error (0 or 1: fit all)")
	f.StringVar(&out, "out", "", "write the fitted profile as a catalog YAML file")
	f.StringArrayVar(&catalogs, "catalog", nil, "extra catalog file (models, GPUs, profiles)")
	f.StringVar(&o.dsn, "db", "", dbFlagHelp)
	_ = cmd.MarkFlagRequired("model")
	_ = cmd.MarkFlagRequired("gpu")
	return cmd
}

// runToRow summarises one bench run as a measured operating point: its
// load (from the flags it was run with), mean prompt and output lengths,
// median TTFT and TPOT, and completed requests per second.
func runToRow(r *loadedRun, model, gpu, quant string, tp int, base string) (sim.CorpusRow, error) {
	params := runParams(r.Manifest, r.Meta.Labels)
	row := sim.CorpusRow{Source: r.name(), URL: "run:" + r.name(), Engine: base, Profile: base, Sched: "v1", Frontend: "http",
		Model: model, GPU: gpu, TP: max(1, tp), KV: "auto", Lengths: "fixed", TTFTStat: "p50", ITLStat: "p50_tpot", TputUnit: "req_s"}
	if quant == "fp8" {
		row.DType = "fp8"
	}
	row.Warmup = int(atof(params["warmup"]))
	if p, err := cfgSched(params); err == nil && p != "" {
		row.Sched = p
	}
	switch {
	case atof(params["concurrency"]) > 0:
		row.Load, row.Value = sim.LoadClosed, atof(params["concurrency"])
	case atof(params["rate"]) > 0:
		row.Load, row.Value = sim.LoadRate, atof(params["rate"])
	default:
		row.Load, row.Value = sim.LoadClosed, 1
	}
	var ttft, tpot []float64
	var in, outTok float64
	var first, last time.Time
	for i := range r.Records {
		rec := &r.Records[i]
		if !rec.OK() || rec.Warmup {
			continue
		}
		ttft = append(ttft, rec.TTFTMs)
		if rec.TPOTMs > 0 {
			tpot = append(tpot, rec.TPOTMs)
		}
		in += float64(rec.InputTokens())
		outTok += float64(rec.OutputTokens())
		if first.IsZero() || rec.Sent.Before(first) {
			first = rec.Sent
		}
		if rec.End.After(last) {
			last = rec.End
		}
	}
	n := len(ttft)
	if n == 0 {
		return row, fmt.Errorf("no successful measured request")
	}
	row.Requests = n
	row.Prompt, row.Output = max(1, int(math.Round(in/float64(n)))), max(1, int(math.Round(outTok/float64(n))))
	row.TTFTMs, row.ITLMs = median(ttft), median(tpot)
	if secs := last.Sub(first).Seconds(); secs > 0 {
		row.Tput = float64(n) / secs
	}
	return row, nil
}

func cfgSched(params map[string]string) (string, error) {
	switch s := params["scheduler"]; s {
	case "", "v0", "v1":
		return s, nil
	default:
		return "", fmt.Errorf("unknown scheduler %q", s)
	}
}

func atof(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return v
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	n := len(s)
	return (s[n/2-1] + s[n/2]) / 2
}

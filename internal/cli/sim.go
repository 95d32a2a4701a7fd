package cli

// ttft sim (serve, run, validate, catalog) and ttft plan: the vLLM-like
// engine simulator, live over HTTP or offline on a virtual clock.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/workload"
	"github.com/ttft-dev/ttft/internal/yamlerr"
)

// simDeployFlags are the engine flags, named like vLLM's.
type simDeployFlags struct {
	cfg       sim.Config
	catalogs  []string
	specToks  int
	specAcc   float64
	specDraft string
	specQuant string
	noChunked bool
}

func (f *simDeployFlags) add(fs *pflag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&c.Model, "model", "llama-3.1-8b", "model from the catalog (name, alias or HuggingFace id; see 'ttft sim catalog')")
	fs.StringVar(&c.GPU, "gpu", "h100-sxm", "accelerator from the catalog")
	fs.IntVar(&c.TensorParallelSize, "tensor-parallel-size", 1, "tensor-parallel GPUs per replica")
	fs.StringVar(&c.Quantization, "quantization", "", "weight format: fp8 (W8A8 where the GPU has FP8), int8 or int4 (every tensor, one 16-bit scale per group), awq or gptq (4-bit, scale and zero point per group, 16-bit embeddings and head); empty: 16-bit")
	fs.IntVar(&c.QuantGroupSize, "quant-group-size", 0, "weights per quantization scale for int8/int4/awq/gptq (0: 128; llama.cpp Q4_0/Q8_0 use 32)")
	fs.StringVar(&c.KVCacheDtype, "kv-cache-dtype", "auto", "KV cache dtype: auto or fp8")
	fs.StringVar(&c.KVRetention, "kv-retention", "", "KV retention policy: full (default), sliding:W (attend to and keep the last W tokens), compress:R (KV at 1/R of its bytes) or evict:F (after each conversation turn drop the fraction F of its cached prompt blocks with the lowest attention scores; needs --enable-prefix-caching)")
	fs.BoolVar(&c.EnablePrefixCaching, "enable-prefix-caching", false, "reuse KV blocks of identical prompt prefixes")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", 0, "maximum sequences per batch (0: the engine profile's, 256 unless it names another: trtllm-serve and sglang 2048, vllm 1024 on ≥ 70 GiB GPUs other than the A100)")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "token budget per engine step (0: 8192)")
	fs.Float64Var(&c.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "fraction of GPU memory for weights, activations and KV cache")
	fs.IntVar(&c.MaxModelLen, "max-model-len", 0, "maximum tokens per sequence (0: the model's)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "KV cache block size in tokens")
	fs.BoolVar(&f.noChunked, "no-enable-chunked-prefill", false, "schedule whole prompts only")
	fs.StringVar(&c.Scheduler, "scheduler", "", "v1 (vLLM ≥ 0.8: chunked prefill mixed with decodes) or v0 (vLLM ≤ 0.6: prefill steps first, never mixed); empty: the engine profile's (vllm, trtllm, lmdeploy: v1; vllm-v0, tgi, sglang: v0)")
	fs.StringVar(&c.Engine, "engine-profile", "vllm", "calibrated overhead profile: vllm, trtllm, sglang or one from --catalog")
	fs.IntVar(&f.specToks, "num-speculative-tokens", 0, "speculative decoding: draft tokens per step (0: off)")
	fs.Float64Var(&f.specAcc, "spec-acceptance", 0.7, "speculative decoding: per-token acceptance probability")
	fs.StringVar(&f.specDraft, "speculative-model", "", "speculative decoding: draft model from the catalog, with its own weights, KV cache and step cost (empty: free n-gram drafter)")
	fs.StringVar(&f.specQuant, "speculative-quantization", "", "speculative decoding: the draft model's weight format (empty: same as --quantization; bf16 for 16-bit)")
	fs.Float64Var(&c.Jitter, "jitter", 0, "relative standard deviation of step times (0: deterministic)")
	fs.Int64Var(&c.Seed, "sim-seed", 0, "seed for step-time jitter")
	fs.StringArrayVar(&f.catalogs, "catalog", nil, "extra catalog file: YAML (models/gpus/engines) or a HuggingFace config.json; repeatable")
}

func (f *simDeployFlags) build() (sim.Config, *sim.Catalog, error) {
	cat, err := loadCatalog(f.catalogs)
	if err != nil {
		return sim.Config{}, nil, err
	}
	c := f.cfg
	c.DisableChunkedPrefill = f.noChunked
	if f.specToks > 0 {
		c.Speculative = sim.SpecConfig{NumSpeculativeTokens: f.specToks, Acceptance: f.specAcc, DraftModel: f.specDraft, DraftQuantization: f.specQuant}
	}
	return c, cat, nil
}

func newSimCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate a vLLM-like serving engine (live server or offline run)",
		Long: `The simulator models continuous batching, chunked prefill, a paged KV cache
with prefix caching, preemption and a calibrated roofline step time.

  ttft sim serve     serve the OpenAI API on loopback, tokens at simulated times
  ttft sim run       simulate a workload on a virtual clock, write summary.json
  ttft sim validate  predicted vs published TTFT
  ttft sim session   one conversation on an idle replica under a KV retention policy
  ttft sim catalog   list the known models, GPUs and engine profiles`,
	}
	cmd.AddCommand(newSimServeCmd(env), newSimRunCmd(env), newSimValidateCmd(env), newSimCatalogCmd(env), newSimCalibrateCmd(env))
	cmd.AddCommand(newSimSessionCmd(env))
	return cmd
}

func newSimServeCmd(env *Env) *cobra.Command {
	var (
		dep                        simDeployFlags
		host                       string
		port, replicas, defaultMax int
		fleetFile, served          string
		faults                     serve.FaultConfig
		startup                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a simulated model over the OpenAI API (chat/completions, completions, models, health, metrics)",
		Example: `  ttft sim serve --model meta-llama/Meta-Llama-3-70B-Instruct --gpu a100-80gb \
      --tensor-parallel-size 4 --kv-cache-dtype fp8 --enable-prefix-caching --max-num-seqs 256
  ttft sim serve --replicas 3 --port 8000          # ports 8000, 8001, 8002
  ttft sim serve --fleet fleet.yaml                # heterogeneous replicas`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, cat, err := dep.build()
			if err != nil {
				return err
			}
			if host != "127.0.0.1" && host != "localhost" && host != "::1" {
				fmt.Fprintf(env.Stderr, "warning: listening on %s exposes the simulator beyond this machine\n", host)
			}
			base := serve.Config{Config: cfg, Addr: fmt.Sprintf("%s:%d", host, port), ServedModelName: served, DefaultMaxTokens: defaultMax, Faults: faults, StartupDelay: startup, Catalog: cat}
			var cfgs []serve.Config
			if fleetFile != "" {
				b, err := os.ReadFile(fleetFile)
				if err != nil {
					return usageErr("--fleet: %v", err)
				}
				cfgs, err = serve.ParseFleet(b)
				if err != nil {
					var ye *yamlerr.Error
					if errors.As(yamlerr.Clean(fleetFile, err), &ye) {
						return usageErr("--fleet %v", ye)
					}
					return usageErr("--fleet %s: %v", fleetFile, err)
				}
				for i := range cfgs {
					cfgs[i].Catalog = cat
					if i == 0 && cfgs[i].Addr == "" {
						cfgs[i].Addr = base.Addr
					}
				}
			} else {
				if replicas < 1 {
					return usageErr("--replicas must be at least 1, got %d", replicas)
				}
				for i := 0; i < replicas; i++ {
					c := base
					if i > 0 {
						c.Addr = ""
					}
					cfgs = append(cfgs, c)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			servers, err := serve.StartFleet(ctx, cfgs)
			if err != nil {
				return usageErr("%v", err)
			}
			for _, s := range servers {
				d := s.Deployment()
				fmt.Fprintf(env.Stdout, "serving %s (%s, %d KV blocks = %d tokens) at %s/v1\n", s.ModelName(), d.Name(), d.NumBlocks, d.NumBlocks*d.BlockSize, s.URL())
			}
			<-ctx.Done()
			for _, s := range servers {
				_ = s.Close()
			}
			return nil
		},
	}
	fs := cmd.Flags()
	dep.add(fs)
	fs.StringVar(&host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&port, "port", 8000, "port of the first replica (0: any free port)")
	fs.IntVar(&replicas, "replicas", 1, "identical replicas on consecutive ports")
	fs.StringVar(&fleetFile, "fleet", "", "fleet YAML of heterogeneous replicas (see docs/simulator.md)")
	fs.StringVar(&served, "served-model-name", "", "model id clients send (default: the catalog name)")
	fs.IntVar(&defaultMax, "default-max-tokens", 256, "output tokens when a request sets no max_tokens")
	fs.Float64Var(&faults.ErrorRate, "fault-error-rate", 0, "fraction of requests answered with --fault-error-status")
	fs.IntVar(&faults.ErrorStatus, "fault-error-status", 500, "HTTP status of injected errors")
	fs.DurationVar(&faults.SlowStart, "fault-slow-start", 0, "hold every response (headers included) this long")
	fs.DurationVar(&faults.StallFirst, "fault-stall-first", 0, "hold every first token this long")
	fs.DurationVar(&faults.StallMid, "fault-stall-mid", 0, "pause every stream this long mid-way")
	fs.IntVar(&faults.StallMidAfter, "fault-stall-mid-after", 0, "token after which --fault-stall-mid pauses (0: half way)")
	fs.IntVar(&faults.CutAfter, "fault-cut-after", 0, "cut every stream's connection after this many tokens (0: never)")
	fs.DurationVar(&startup, "startup-delay", 0, "answer 503 (health included) for this long after start")
	return cmd
}

// simRunOptions are ttft sim run's flags.
type simRunOptions struct {
	dep         simDeployFlags
	wl          workloadOptions
	load        loadOptions
	out         string
	seed        int64
	textPrompts bool
	db          string
	noStore     bool
	labels      []string
	replicas    int
}

func newSimRunCmd(env *Env) *cobra.Command {
	o := &simRunOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Simulate a workload on a virtual clock and write bench-compatible results",
		Example: `  ttft sim run --model llama-3-70b --gpu a100-80gb --tensor-parallel-size 4 \
      --prompt-tokens 2048 --max-tokens 128 --rate 8 --requests 2000 --out runs/sim70b`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd.Context(), env, o, cmd.Flags())
		},
	}
	fs := cmd.Flags()
	o.dep.add(fs)
	addWorkloadFlags(fs, &o.wl)
	addLoadFlags(fs, &o.load)
	fs.StringVar(&o.out, "out", "", "directory for requests.jsonl, summary.json and manifest.json (default: a new directory under the ttft data directory)")
	fs.StringVar(&o.db, "db", "", "results database (SQLite path or postgres:// URL; default $TTFT_DB or the per-user SQLite file)")
	fs.BoolVar(&o.noStore, "no-store", false, "do not record the run in the results database")
	fs.StringArrayVar(&o.labels, "label", nil, "label key=value stored in the manifest (repeatable; e.g. gpu=a100)")
	fs.IntVar(&o.replicas, "replicas", 1, "identical replicas behind a round-robin load balancer (the load is the fleet's; --concurrency and --max-concurrency are split across them)")
	fs.Int64Var(&o.seed, "load-seed", 1, "seed for arrivals and the bootstrap")
	fs.BoolVar(&o.textPrompts, "text-prompts", false, "generate real prompt text even for a fixed-length workload (slower; the engine only needs lengths)")
	return cmd
}

// runSim simulates the workload on the virtual clock and keeps the run as
// ttft bench keeps a measured one.
func runSim(ctx context.Context, env *Env, o *simRunOptions, fs *pflag.FlagSet) error {
	cfg, cat, err := o.dep.build()
	if err != nil {
		return err
	}
	d, err := sim.Resolve(cat, cfg)
	if err != nil {
		return usageErr("%v", err)
	}
	src, scen, opt, err := o.workload(env, fs)
	if err != nil {
		return err
	}
	man := o.manifest(env, d, cfg, src, scen, opt.Start, fs)
	rd, err := rundir.Create(o.out, man)
	if err != nil {
		return usageErr("--out: %v", err)
	}
	defer rd.Close()
	var recs []record.Record
	wall := time.Now()
	if c, ok := src.(workload.ClockedSource); ok {
		c.SetOrigin(opt.Start) // session think times count from the virtual start
	}
	st, err := sim.RunFleet(ctx, d, o.replicas, src, opt, func(r *record.Record) error {
		recs = append(recs, *r)
		_ = rd.Write(r) // a failure ends the file; the records stay in memory (rd.Err)
		return nil
	})
	if err != nil {
		return failErr("simulation: %v", err)
	}
	elapsed := time.Since(wall)
	sum := stats.Summarize(recs, stats.SummaryOptions{Source: "sim", Target: man.Target, API: "sim", Model: d.Model.Name, Scenario: man.Scenario, Seed: o.seed,
		OpenLoop: o.load.openLoop(src)})
	if w := overloadWarning(&sum, recs, o.load.offeredRate(src, scen)); w != "" {
		sum.Warnings = append(sum.Warnings, w)
	}
	if scen != nil {
		verdicts, goodput := scen.Evaluate(sum, recs)
		sum.SLO, sum.Goodput = verdicts, &goodput
	}
	sum.Warnings = append(sum.Warnings, fmt.Sprintf("simulated: %s of virtual time in %s of CPU wall time, %d engine steps, %d preemptions, prefix-cache hit rate %.1f%%",
		st.Virtual.Round(time.Millisecond), elapsed.Round(time.Millisecond), st.Steps, st.Engine.Preemptions, 100*hitRate(st.Engine)))
	if err := rd.Err(); err != nil {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("%s holds only the first %d of %d records: %v", rd.RequestsPath(), rd.Kept(), len(recs), err))
	}
	man.Ended = opt.Start.Add(st.Virtual)
	extra := map[string]any{}
	drift := workload.TurnDrift(recs)
	if len(drift) > 0 {
		extra[rundir.TurnsFile] = drift
	}
	keep := keepRun(ctx, env, "ttft sim run", o.db, false, o.noStore, rd, man, &sum, recs, extra)
	printSimSummary(env, d, sum)
	if len(drift) > 0 {
		workload.PrintTurnDrift(env.Stdout, drift)
		if line := sessionMemory(d, recs); line != "" {
			fmt.Fprintln(env.Stdout, line)
		}
	}
	if keep != nil {
		return keep
	}
	if len(sum.SLO) > 0 && !workload.Passed(sum.SLO) {
		return failErr("scenario %s: SLO not met", man.Scenario)
	}
	return nil
}

// workload builds the requests and the run's load, refusing what the
// simulation cannot do before anything is written.
func (o *simRunOptions) workload(env *Env, fs *pflag.FlagSet) (workload.Source, *workload.Scenario, sim.RunOptions, error) {
	load := &o.load
	var opt sim.RunOptions
	if err := load.validate(); err != nil {
		return nil, nil, opt, err
	}
	if load.Requests == 0 && load.Duration == 0 {
		return nil, nil, opt, usageErr("give --requests or --duration: a simulation needs an end")
	}
	var (
		src  workload.Source
		scen *workload.Scenario
		tok  workload.Tokenizer
		err  error
	)
	if !o.textPrompts && lengthOnlyWorkload(fs) {
		// The engine needs lengths (and prefix identity), not text:
		// skip generating and tokenising prompts.
		minTok, err := o.wl.lengths()
		if err != nil {
			return nil, nil, opt, err
		}
		src = &sim.LengthSource{PromptTokens: o.wl.PromptTokens, MaxTokens: o.wl.MaxTokens, MinTokens: minTok, Same: o.wl.SamePrompt}
	} else if src, scen, tok, err = o.wl.build(env); err != nil {
		return nil, nil, opt, err
	}
	if err := load.fitWorkload(o.wl.size(scen)); err != nil {
		return nil, nil, opt, err
	}
	if src, err = load.ramped(src, o.wl.Seed); err != nil { // --rate-ramp (load_flags.go)
		return nil, nil, opt, err
	}
	if err := load.checkOpenLoopFlags(src); err != nil {
		return nil, nil, opt, err
	}
	if err := o.checkReplicas(src); err != nil {
		return nil, nil, opt, err
	}
	opt = sim.RunOptions{Concurrency: load.Concurrency, Requests: load.Requests, Duration: load.Duration, Warmup: load.Warmup, RampUp: load.RampUp,
		Seed: uint64(o.seed), Tokenizer: tok, Start: time.Now().UTC()}
	if load.Rate > 0 {
		// --rate overrides --concurrency, as in bench.
		arr, err := workload.NewArrivals(load.Arrival, load.Rate, load.Burstiness, o.seed)
		if err != nil {
			return nil, nil, opt, usageErr("--arrival: %v", err)
		}
		opt.Concurrency, opt.Rate, opt.NextGap, opt.MaxInFlight = 0, load.Rate, arr.Next, load.MaxConcurrency
	} else if load.openLoop(src) {
		// A scenario's arrival process or a trace is the load;
		// sim.Run sends on it, capped by --max-concurrency only.
		opt.MaxInFlight = load.MaxConcurrency
	}
	return src, scen, opt, nil
}

func (o *simRunOptions) checkReplicas(src workload.Source) error {
	switch {
	case o.replicas < 1:
		return usageErr("--replicas must be at least 1, got %d", o.replicas)
	case o.replicas == 1:
		return nil
	}
	if _, ok := src.(workload.FeedbackSource); ok {
		return usageErr("--replicas: a multi-turn workload waits for each reply on its replica; simulate it on one")
	}
	if l := &o.load; l.Requests == 0 && (l.Rate <= 0 && !l.openLoop(src) || l.Duration == 0) {
		return usageErr("--replicas needs --requests (or, in an open loop, --duration)")
	}
	return nil
}

// manifest describes the run (and picks its directory when --out is not
// given).
func (o *simRunOptions) manifest(env *Env, d *sim.Deployment, cfg sim.Config, src workload.Source, scen *workload.Scenario, start time.Time, fs *pflag.FlagSet) record.Manifest {
	runID := newRunID(time.Now())
	if o.out == "" {
		o.out = filepath.Join(dataDir(env), "runs", runID)
	}
	scenario := ""
	if scen != nil {
		scenario = scen.Name
	}
	target := "sim://" + d.Name()
	if o.replicas > 1 {
		target = fmt.Sprintf("sim://%d×%s (round robin)", o.replicas, d.Name())
	}
	host, _ := os.Hostname()
	man := record.Manifest{Schema: record.ManifestSchema, RunID: runID, Tool: "ttft", ToolVersion: version(), Command: "sim run", Args: env.Args, Source: "sim", Target: target, API: "sim", Model: d.Model.Name, Scenario: scenario,
		Host:    record.Host{Hostname: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()},
		Started: start,
		Labels: map[string]string{"gpu": d.GPU.Name, "gpus": strconv.Itoa(d.TP * o.replicas), "tp": strconv.Itoa(d.TP), "replicas": strconv.Itoa(o.replicas), "engine_profile": d.Profile.Name, "kv_blocks": strconv.Itoa(d.NumBlocks),
			"quantization": cfg.Quantization, "kv_cache_dtype": cfg.KVCacheDtype, "prefix_caching": strconv.FormatBool(cfg.EnablePrefixCaching)},
		Flags: changedFlags(fs)}
	maps.Copy(man.Labels, withLoad(loadLabels(&o.load, &o.wl, src, scen), parseLabels(o.labels)))
	return man
}

// lengthOnlyWorkload reports whether the workload flags given describe a
// fixed-length workload, which sim.LengthSource reproduces exactly.
func lengthOnlyWorkload(fs *pflag.FlagSet) bool {
	scratch := pflag.NewFlagSet("workload", pflag.ContinueOnError)
	var tmp workloadOptions
	addWorkloadFlags(scratch, &tmp)
	lengthFlags := map[string]bool{"prompt-tokens": true, "max-tokens": true, "min-tokens": true, "ignore-eos": true, "same-prompt": true, "seed": true, "tokenizer": true}
	ok := true
	fs.Visit(func(f *pflag.Flag) {
		if scratch.Lookup(f.Name) != nil && !lengthFlags[f.Name] {
			ok = false
		}
	})
	return ok
}

func hitRate(st sim.EngineStats) float64 {
	if st.PrefixQueries == 0 {
		return 0
	}
	return float64(st.PrefixHits) / float64(st.PrefixQueries)
}

func changedFlags(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { m[f.Name] = f.Value.String() })
	return m
}

func printSimSummary(env *Env, d *sim.Deployment, s record.Summary) {
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s: %d requests (%d failed) over %.1f s simulated\n", d.Name(), s.Requests.Total, s.Requests.Failed, s.DurationS)
	fmt.Fprintln(tw, "metric\tmean\tp50\tp90\tp95\tp99\t")
	for _, m := range []struct {
		name string
		m    record.Metric
	}{{"ttft_ms", s.TTFT}, {"itl_ms", s.ITL}, {"tpot_ms", s.TPOT}, {"e2e_ms", s.E2E}} {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", m.name, m.m.Mean, m.m.P50, m.m.P90, m.m.P95, m.m.P99)
	}
	fmt.Fprintf(tw, "throughput\t%.2f req/s\t%.0f out tok/s\t\t\t\t\n", s.Throughput.RequestsPerS, s.Throughput.OutputTokensPerS)
	_ = tw.Flush()
	printVerdicts(env.Stdout, &s)
	for _, w := range s.Warnings {
		fmt.Fprintln(env.Stdout, "note:", w)
	}
}

func newSimValidateCmd(env *Env) *cobra.Command {
	var catalogs []string
	var loso, plan bool
	var corpus string
	var draw int
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Print predicted vs published TTFT with each row's error",
		Long: `Print predicted vs published TTFT with each row's error.

With --loso, predict every row of the public validation corpus
(internal/sim/testdata/public_corpus.csv, or --corpus FILE) by physics
fitted on the other sources only (leave-one-source-out), and print the
median |error| per load category. --draw N (N ≥ 1) simulates the
served rows (closed loops, open loops, bursts) with other requests:
their lengths and arrival times drawn from other seeds, for the spread
that sampling alone puts on the medians.

With --plan, ask the planner's question of published deployments: the
highest Poisson rate one replica sustains within a P90 TTFT limit,
simulated, beside the bracket the deployment's own published sweep gives.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if draw < 0 {
				return usageErr("--draw: %d is negative", draw)
			}
			if draw > 0 && !loso && corpus == "" {
				return usageErr("--draw applies to --loso")
			}
			cat, err := loadCatalog(catalogs)
			if err != nil {
				return err
			}
			if plan {
				if err := printPublishedCapacity(cmd.Context(), env.Stdout, cat); err != nil {
					return failErr("%v", err)
				}
				return nil
			}
			if loso || corpus != "" {
				if err := printLOSO(cmd.Context(), env.Stdout, cat, corpus, draw); err != nil {
					return failErr("%v", err)
				}
				return nil
			}
			rows, err := sim.Validate(cat, sim.ValidationSet)
			if err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintln(env.Stdout, "| source | engine | model | GPU | TP | dtype | prompt | measured ms | predicted ms | error |")
			fmt.Fprintln(env.Stdout, "|---|---|---|---|---|---|---|---|---|---|")
			for _, r := range rows {
				dt := "fp16"
				if r.Quant != "" {
					dt = r.Quant
				}
				fmt.Fprintf(env.Stdout, "| %s | %s | %s | %s | %d | %s | %d | %.0f | %.1f | %+.1f%% |\n", r.Source, r.Engine, r.Model, r.GPU, r.TP, dt, r.Prompt, r.TTFTMs, r.PredMs, r.ErrPct)
			}
			fmt.Fprintf(env.Stdout, "\nmedian |error| %.1f%% over %d rows\n", sim.MedianAbsErr(rows), len(rows))

			// Loaded queues: closed-loop concurrency sweeps run through the
			// offline runner (engine + API-server contention model).
			loaded, err := sim.ValidateLoaded(cmd.Context(), cat, sim.LoadedSet)
			if err != nil {
				return failErr("%v", err)
			}
			fmt.Fprintln(env.Stdout, "\nLoaded (median TTFT under concurrency):")
			fmt.Fprintln(env.Stdout, "| source | split | profile | model | GPU | prompt/output | C | measured P50 ms | predicted ms | error |")
			fmt.Fprintln(env.Stdout, "|---|---|---|---|---|---|---|---|---|---|")
			for _, r := range loaded {
				fmt.Fprintf(env.Stdout, "| %s | %s | %s | %s | %s | %d/%d | %d | %.1f | %.1f | %+.1f%% |\n", r.Source, r.Split, r.Engine, r.Model, r.GPU, r.Prompt, r.Output, r.Concurrency, r.TTFTP50Ms, r.PredMs, r.ErrPct)
			}
			cal, nc := sim.LoadedMedianAbsErr(loaded, "calibration")
			held, nh := sim.LoadedMedianAbsErr(loaded, "held-out")
			fmt.Fprintf(env.Stdout, "\nmedian |error| %.1f%% over %d calibration rows, %.1f%% over %d held-out rows\n", cal, nc, held, nh)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&catalogs, "catalog", nil, "extra catalog file (recalibrated engine profiles)")
	cmd.Flags().BoolVar(&loso, "loso", false, "leave-one-source-out accuracy on the public validation corpus")
	cmd.Flags().BoolVar(&plan, "plan", false, "sustainable rate within a TTFT limit of published deployments, simulated vs published")
	cmd.Flags().StringVar(&corpus, "corpus", "", "validation corpus CSV for --loso (default: the embedded public corpus)")
	cmd.Flags().IntVar(&draw, "draw", 0, "with --loso: simulate the served rows with other requests (another draw of their lengths and arrivals; 0: the published table's)")
	return cmd
}

func newSimCatalogCmd(env *Env) *cobra.Command {
	var catalogs []string
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List the known models, GPUs and engine profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := loadCatalog(catalogs)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tPARAMS (B)\tLAYERS\tHIDDEN\tHEADS/KV\tMAX LEN\t")
			for _, m := range cat.Models {
				p := fmt.Sprintf("%.1f", m.ParamsB)
				if m.ActiveParamsB > 0 {
					p += fmt.Sprintf(" (%.1f active)", m.ActiveParamsB)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%d\t\n", m.Name, p, m.Layers, m.Hidden, m.Heads, m.KVHeads, m.MaxModelLen)
			}
			fmt.Fprintln(tw, "\nGPU\tBF16 TFLOPS\tFP8 TFLOPS\tHBM GB\tGB/s\t$/h\t")
			for _, g := range cat.GPUs {
				fp8 := "-"
				if v := g.TFLOPS["fp8"]; v > 0 {
					fp8 = fmt.Sprint(v)
				}
				bf := g.TFLOPS["bf16"]
				if bf == 0 {
					bf = g.TFLOPS["fp16"]
				}
				fmt.Fprintf(tw, "%s\t%g\t%s\t%g\t%g\t%.2f\t\n", g.Name, bf, fp8, g.MemoryGB, g.BandwidthGBs, g.PricePerHour)
			}
			names := make([]string, len(cat.Engines))
			for i, e := range cat.Engines {
				names[i] = e.Name
			}
			fmt.Fprintf(tw, "\nengine profiles: %s\n", strings.Join(names, ", "))
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&catalogs, "catalog", nil, "extra catalog file: YAML or a HuggingFace config.json")
	return cmd
}

func newPlanCmd(env *Env) *cobra.Command {
	var (
		req      sim.PlanRequest
		gpus     []string
		tps      []int
		fp8      string
		prices   string
		catalogs []string
		seed     int64
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Find the cheapest deployment (GPU, TP, replicas, fp8) meeting a TTFT/ITL SLO at a load",
		Example: `  ttft plan --model llama-3-70b --rate 8 --prompt-tokens 2048 --max-tokens 128 --ttft-p95 650
  ttft plan --model llama-3.1-8b --rate 50 --gpu l4,a10g,h100-sxm --itl-p95 40`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := loadCatalog(catalogs)
			if err != nil {
				return err
			}
			req.Catalog, req.GPUs, req.TPs, req.Seed = cat, gpus, tps, uint64(seed)
			switch fp8 {
			case "both":
			case "yes", "true":
				req.FP8 = []bool{true}
			case "no", "false":
				req.FP8 = []bool{false}
			default:
				return usageErr("--fp8 must be both, yes or no; got %q", fp8)
			}
			if prices != "" {
				m, err := parsePrices(prices)
				if err != nil {
					return usageErr("--prices: %v", err)
				}
				req.Prices = map[string]float64{}
				for k, v := range m {
					g, err := cat.GPU(k)
					if err != nil {
						return usageErr("--prices: %v", err)
					}
					req.Prices[g.Name] = v
				}
			}
			for _, n := range req.AtReplicas {
				if n < 1 {
					return usageErr("--replicas: counts must be at least 1, got %d", n)
				}
			}
			if req.TTFTP95Ms <= 0 && req.ITLP95Ms <= 0 {
				return usageErr("give at least one SLO: --ttft-p95 or --itl-p95 (milliseconds)")
			}
			rows, err := sim.Plan(cmd.Context(), req)
			if err != nil {
				return usageErr("%v", err)
			}
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "%s at %.2f req/s, %d prompt + %d output tokens; SLO: TTFT P95 ≤ %s, ITL P95 ≤ %s\n", req.Model, req.Rate, req.PromptTokens, req.MaxTokens, msOrDash(req.TTFTP95Ms), msOrDash(req.ITLP95Ms))
			fmt.Fprintln(tw, "\tGPU\tTP\tFP8\tREPLICAS\tTTFT P50 ms\tTTFT P95 ms\tITL P95 ms\t$/h\tNOTE")
			for i, r := range rows {
				mark := " "
				if i == 0 && r.Meets {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%s\n", mark, r.GPU, r.TP, r.FP8, r.Replicas, r.TTFTP50Ms, r.TTFTP95Ms, r.ITLP95Ms, r.CostPerHour, r.Note)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(req.AtReplicas) > 0 {
				fmt.Fprintf(env.Stdout, "\nat the replica counts asked (load split evenly):\n")
				tw = tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "GPU\tTP\tFP8\tREPLICAS\tTTFT P50 ms\tTTFT P95 ms\tITL P95 ms\t$/h\tSLO")
				for _, r := range rows {
					for _, a := range r.At {
						fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%s\n", r.GPU, r.TP, r.FP8, a.Replicas, a.TTFTP50Ms, a.TTFTP95Ms, a.ITLP95Ms, a.CostPerHour,
							planVerdict(a))
					}
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if !rows[0].Meets {
				return failErr("no candidate meets the SLO")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Model, "model", "llama-3.1-8b", "model from the catalog")
	fs.Float64Var(&req.Rate, "rate", 1, "offered load in requests per second (Poisson)")
	fs.IntVar(&req.PromptTokens, "prompt-tokens", 1024, "prompt length in tokens")
	fs.IntVar(&req.MaxTokens, "max-tokens", 128, "output length in tokens")
	fs.Float64Var(&req.TTFTP95Ms, "ttft-p95", 0, "SLO: P95 TTFT limit in ms")
	fs.Float64Var(&req.ITLP95Ms, "itl-p95", 0, "SLO: P95 inter-token latency limit in ms")
	fs.StringSliceVar(&gpus, "gpu", nil, "GPUs to consider (default: all in the catalog)")
	fs.IntSliceVar(&tps, "tensor-parallel-size", nil, "TP sizes to consider (default 1,2,4,8)")
	fs.StringVar(&fp8, "fp8", "both", "try fp8 weights+KV: both, yes or no")
	fs.IntVar(&req.MaxReplicas, "max-replicas", 64, "largest replica count to consider")
	fs.IntSliceVar(&req.AtReplicas, "replicas", nil, "also print every candidate at these replica counts (e.g. 2,4,8)")
	fs.IntVar(&req.Requests, "requests", 1000, "simulated requests per candidate")
	fs.BoolVar(&req.PrefixCaching, "enable-prefix-caching", false, "simulate with prefix caching")
	fs.StringVar(&req.Engine, "engine-profile", "vllm", "engine profile")
	fs.StringVar(&prices, "prices", "", "USD per GPU-hour overrides, e.g. h100-sxm=2.5,a100-80gb=1.4")
	fs.StringArrayVar(&catalogs, "catalog", nil, "extra catalog file")
	fs.Int64Var(&seed, "seed", 1, "seed for arrivals")
	fs.BoolVar(&asJSON, "json", false, "print the candidates as JSON")
	return cmd
}

func msOrDash(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%g ms", v)
}

func parsePrices(s string) (map[string]float64, error) {
	m := map[string]float64{}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("item %q is not gpu=price", item)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("price %q for %s is not a non-negative number", v, k)
		}
		m[strings.ToLower(strings.TrimSpace(k))] = f
	}
	return m, nil
}

// sessionMemory reports the KV cache a multi-turn session holds after its
// last turn under the deployment's retention policy (article §3.3's
// "memory per session"), per GPU.
func sessionMemory(d *sim.Deployment, recs []record.Record) string {
	last := map[string]*record.Record{} // session -> its last turn
	for i := range recs {
		r := &recs[i]
		if r.Session == "" || !r.OK() {
			continue
		}
		if p, ok := last[r.Session]; !ok || r.PromptTokens+r.OutputTokens() > p.PromptTokens+p.OutputTokens() {
			last[r.Session] = r
		}
	}
	if len(last) == 0 {
		return ""
	}
	pol := sim.Retention{Kind: "full"}
	if d.Config.KVRetention != "" {
		if p, err := sim.ParseRetention(d.Config.KVRetention); err == nil {
			pol = p
		}
	}
	var sum, peak float64
	for _, r := range last {
		// What the engine kept cached for the next turn, where it says
		// (prefix caching on); else the context under the policy.
		held := float64(r.PromptTokens + r.OutputTokens())
		if v, ok := r.ServerTimings["kv_retained_tokens"]; ok {
			held = v
		} else if pol.Kind == "sliding" {
			held = math.Min(held, float64(pol.Window))
		}
		// Compression is already in KVBytesTok (the engine stores KV at
		// 1/R of its bytes).
		b := held * (d.KVBytesTok + d.DraftKVBytesTok)
		sum += b
		peak = math.Max(peak, b)
	}
	return fmt.Sprintf("KV cache per session after its last turn (%s, per GPU): mean %.2f GB, max %.2f GB over %d sessions",
		pol, sum/float64(len(last))/1e9, peak/1e9, len(last))
}

// loadCatalog is the embedded catalog extended by the --catalog files.
func loadCatalog(paths []string) (*sim.Catalog, error) {
	cat := sim.DefaultCatalog()
	for _, p := range paths {
		if err := cat.LoadFile(p); err != nil {
			return nil, usageErr("--catalog: %v", err)
		}
	}
	return cat, nil
}

func planVerdict(p sim.PlanPoint) string {
	switch {
	case p.Meets:
		return "meets"
	case p.Overloaded:
		return "misses (overloaded: the queue grows; P95 measures the run's length)"
	}
	return "misses"
}

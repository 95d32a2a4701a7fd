package cli

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

type benchOptions struct {
	Target        string
	API           string
	Model         string
	APIKey        string
	Headers       []string
	Timeout       time.Duration
	TTFTTimeout   time.Duration
	Out           string
	Format        string
	Goodput       []string
	goodputSLOs   []workload.SLO
	vllm          vllmFormatOptions
	MaxErrorRate  float64
	MaxEventBytes int
	Temperature   float64
	NoTemperature bool
	NoUsage       bool
	Insecure      bool
	ReadClock     bool
	MaxTokensKey  string
	ExtraBody     string
	SelfCheck     bool
	NoProbe       bool
	PromptBasis   string
	NoProgress    bool
	Labels        []string
	DB            string
	NoStore       bool
	Quiet         bool

	load  loadOptions
	work  workloadOptions
	obs   observeOptions
	shard shardOptions // shard_flags.go
	args  []string
	flags map[string]string
	// onRecord, when set, sees every finished record as it is written
	// (sweep watches a point's queue through it).
	onRecord func(*record.Record)
}

func newBenchCmd(env *Env) *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure TTFT, ITL, TPOT, end-to-end latency and throughput of a streaming endpoint",
		Long: `Measure the time to first token of a streaming LLM endpoint (OpenAI
chat/completions or completions, or Anthropic messages), with inter-token
latency, time per output token, end-to-end latency, throughput and errors.

With no --target, the built-in simulator (Llama-3.1-8B on one H100) is started
in-process on a loopback port and measured over real HTTP.

Every finished request is appended to DIR/requests.jsonl at once; summary.json
and manifest.json are written at the end (also after Ctrl-C).`,
		Example: `  ttft bench
  ttft bench --target http://localhost:8000 --model meta-llama/Llama-3.1-8B-Instruct -c 16 -n 500
  ttft bench --target https://api.openai.com --model gpt-4o-mini --rate 2 --duration 60s
  ttft bench --target https://api.anthropic.com --api anthropic --model claude-3-5-haiku-latest
  ttft bench --self-check`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.args = env.Args
			o.flags = recordedFlags(cmd.Flags())
			_, err := runBench(cmd.Context(), env, o)
			return err
		},
	}
	addBenchFlags(cmd.Flags(), o)
	return cmd
}

// addBenchFlags defines bench's flags on f (the command's, or a sweep
// point's own set).
func addBenchFlags(f *pflag.FlagSet, o *benchOptions) {
	f.StringVarP(&o.Target, "target", "t", "", "base URL of the endpoint, with or without /v1 (default: the built-in simulator)")
	f.StringVar(&o.API, "api", "openai-chat", "wire protocol: openai-chat, openai-completions or anthropic")
	f.StringVarP(&o.Model, "model", "m", "", "model name (default: the first model the server lists at /v1/models)")
	f.StringVar(&o.APIKey, "api-key", "", "API key (default: $OPENAI_API_KEY, or $ANTHROPIC_API_KEY for --api anthropic); never printed or stored")
	f.StringArrayVarP(&o.Headers, "header", "H", nil, "extra request header 'Name: value' (repeatable)")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "limit for a whole request")
	f.DurationVar(&o.TTFTTimeout, "ttft-timeout", time.Minute, "limit until the first token")
	f.StringVarP(&o.Out, "out", "o", "", "results directory (default: a new directory under the ttft data directory)")
	f.StringSliceVar(&o.Goodput, "goodput", nil, "goodput objectives as vLLM's --goodput, NAME:MS with NAME ttft, tpot or e2el (comma-separated or repeated; e.g. ttft:120,tpot:50): the summary's goodput counts requests meeting all of them (replaces a scenario's for goodput; its verdicts stay)")
	f.StringVar(&o.Format, "format", "", "also write the summary in another schema: vllm (DIR/summary.vllm.json, the result file of vllm bench serve --save-result)")
	addVLLMFormatFlags(f, &o.vllm)
	f.Float64Var(&o.MaxErrorRate, "max-error-rate", 0.01, "exit 1 when the fraction of failed requests is above this")
	f.IntVar(&o.MaxEventBytes, "max-event-bytes", 8<<20, "largest stream line or event accepted")
	f.Float64Var(&o.Temperature, "temperature", 0.7, "sampling temperature sent with each request")
	f.BoolVar(&o.NoTemperature, "no-temperature", false, "send no temperature (for models that refuse one)")
	f.BoolVar(&o.Insecure, "insecure", false, "do not verify the target's TLS certificate (self-signed internal endpoints)")
	f.BoolVar(&o.NoUsage, "no-usage", false, "do not ask for stream_options.include_usage (servers that reject it)")
	f.BoolVar(&o.ReadClock, "read-clock", false, "time events when each read returns, as most clients do, instead of by the kernel's receive timestamps")
	f.StringVar(&o.ExtraBody, "extra-body", "", "JSON object merged into every request body")
	f.StringVar(&o.MaxTokensKey, "max-tokens-field", "max_tokens", "OpenAI body field for --max-tokens: max_tokens, or max_completion_tokens for OpenAI's reasoning models")
	f.StringVar(&o.PromptBasis, "prompt-length-basis", "server", "what --prompt-tokens counts against a --target: server (the server's tokens, calibrated before the run with its /tokenize or the prompt usage of a few one-token requests, printed) or local (the --tokenizer's)")
	f.BoolVar(&o.NoProbe, "no-probe", false, "skip the one-token check request sent to --target before the run (a refused check exits 2 with the server's message), and with it the prompt-length calibration")
	f.BoolVar(&o.SelfCheck, "self-check", false, "measure this client's own added TTFT error and event rate against an exact-timing server")
	f.BoolVar(&o.NoProgress, "no-progress", false, "no live progress on stderr")
	f.StringArrayVar(&o.Labels, "label", nil, "label key=value stored in the manifest (repeatable; e.g. gpu=a100)")
	f.StringVar(&o.DB, "db", "", "results database (SQLite path or postgres:// URL; default $TTFT_DB or the per-user SQLite file)")
	f.BoolVar(&o.NoStore, "no-store", false, "do not record the run in the results database")
	f.BoolVarP(&o.Quiet, "quiet", "q", false, "print only the summary table")
	addLoadFlags(f, &o.load)
	addWorkloadFlags(f, &o.work)
	addObserveFlags(f, &o.obs)
	addShardFlags(f, &o.shard)
}

// benchTarget is what a run measures.
type benchTarget struct {
	base, model, label string
	server             map[string]any
	client             *http.Client // for requests before the run (the run has its own transport)
}

// runBench runs one benchmark and writes its files; sweep calls it per point.
func runBench(ctx context.Context, env *Env, o *benchOptions) (record.Summary, error) {
	if o.shard.k8s.File != "" { // k8s.go: render the run as an Indexed Job instead
		if err := o.load.validate(); err != nil {
			return record.Summary{}, err
		}
		return record.Summary{}, renderK8s(env, o)
	}
	api, reqOpt, err := o.requestOptions(env)
	if err != nil {
		return record.Summary{}, err
	}
	if o.SelfCheck {
		if o.Target != "" {
			return record.Summary{}, usageErr("--self-check measures ttft's own client against a built-in exact-timing server; it takes no --target")
		}
		return record.Summary{}, runSelfCheck(ctx, env, o)
	}
	src, scenario, tok, err := o.workload(env)
	if err != nil {
		return record.Summary{}, err
	}
	tgt, stop, err := resolveTarget(ctx, env, o, api, &reqOpt)
	if err != nil {
		return record.Summary{}, err
	}
	defer stop()
	reqOpt.Model = tgt.model

	b := &benchRun{o: o, env: env, api: api, tgt: tgt, src: src, scenario: scenario, runID: newRunID(time.Now())}
	if err := setupShard(ctx, env, o, b); err != nil { // shard_flags.go
		return record.Summary{}, err
	}
	if o.Target != "" && !o.NoProbe {
		if b.probeStatus, err = probeTarget(ctx, tgt.client, api, tgt.base, reqOpt, b.runID, probeTimeout(o.TTFTTimeout)); err != nil {
			return record.Summary{}, err
		}
	}
	if tok, err = b.alignPromptLengths(ctx, reqOpt, tok); err != nil {
		return record.Summary{}, err
	}
	rd, err := b.createDir()
	if err != nil {
		return record.Summary{}, err
	}
	defer rd.Close()
	res, runErr, stopObs, err := b.execute(ctx, rd, reqOpt, tok)
	if err != nil {
		return record.Summary{}, err
	}
	// What follows must happen even after Ctrl-C.
	post := context.WithoutCancel(ctx)
	sum := b.summarize(res, rd)
	sum.ServerSide = stopObs(post)
	b.man.Ended, b.man.Interrupted = time.Now(), res.Interrupted
	if err := rd.Err(); err != nil {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("%s holds only the first %d of %d records: %v", rd.RequestsPath(), rd.Kept(), len(res.Records), err))
	}
	extra := map[string]any{}
	if drift := workload.TurnDrift(res.Records); len(drift) > 0 {
		extra[rundir.TurnsFile] = drift
	}
	if o.Format == "vllm" {
		extra[rundir.VLLMSummaryFile] = rundir.Raw(b.vllmResult(sum, res.Records))
	}
	// A failed file (a full disk) loses nothing the run measured: the
	// records are in memory, so the summary is printed and the run stored
	// in the database all the same, and the failure is named at the end.
	keep := keepRun(post, env, "ttft bench", o.DB, o.NoStore || o.Quiet, o.NoStore, rd, b.man, &sum, res.Records, extra)
	keep = finishShard(post, env, b, &sum, res, keep) // shard_flags.go
	printSummary(env.Stdout, &sum, &b.man, b.dir)
	if len(sum.ServerSide) > 0 {
		fmt.Fprintln(env.Stdout, "\nserver side:")
		for _, l := range sum.ServerSide {
			fmt.Fprintln(env.Stdout, "  "+l)
		}
	}
	workload.PrintTurnDrift(env.Stdout, workload.TurnDrift(res.Records))
	return sum, b.exit(&sum, res, runErr, keep)
}

// requestOptions validates the flags that shape each request and builds
// them (the model is set once the target is known).
func (o *benchOptions) requestOptions(env *Env) (wire.API, wire.RequestOptions, error) {
	var reqOpt wire.RequestOptions
	if err := o.load.validate(); err != nil {
		return "", reqOpt, err
	}
	api, err := wire.ParseAPI(o.API)
	if err != nil {
		return "", reqOpt, usageErr("--api: %v", err)
	}
	if len(o.Goodput) > 0 {
		slos, err := workload.ParseGoodput(o.Goodput)
		if err != nil {
			return "", reqOpt, usageErr("--goodput: %v", err)
		}
		o.goodputSLOs = slos
	}
	if err := checkPromptBasis(o.PromptBasis); err != nil {
		return "", reqOpt, err
	}
	if o.Format != "" && o.Format != "vllm" {
		return "", reqOpt, usageErr("--format must be vllm, got %q", o.Format)
	}
	if err := o.vllm.validate(o.load.fs, o.Format); err != nil {
		return "", reqOpt, err
	}
	switch {
	case o.MaxErrorRate < 0 || o.MaxErrorRate > 1:
		return "", reqOpt, usageErr("--max-error-rate must be between 0 and 1, got %v", o.MaxErrorRate)
	case o.MaxTokensKey != "max_tokens" && o.MaxTokensKey != "max_completion_tokens":
		return "", reqOpt, usageErr("--max-tokens-field must be max_tokens or max_completion_tokens, got %q", o.MaxTokensKey)
	}
	reqOpt = wire.RequestOptions{Temperature: o.Temperature, NoTemperature: o.NoTemperature, NoUsage: o.NoUsage, Headers: http.Header{}, MaxTokensField: o.MaxTokensKey}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return "", reqOpt, usageErr("--header %q: want 'Name: value'", h)
		}
		reqOpt.Headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if o.ExtraBody != "" {
		if err := json.Unmarshal([]byte(o.ExtraBody), &reqOpt.ExtraBody); err != nil {
			return "", reqOpt, usageErr("--extra-body is not a JSON object: %v", err)
		}
	}
	reqOpt.APIKey = o.APIKey
	if reqOpt.APIKey == "" {
		if api == wire.Anthropic {
			reqOpt.APIKey = env.getenv("ANTHROPIC_API_KEY")
		} else if o.Target != "" {
			reqOpt.APIKey = env.getenv("OPENAI_API_KEY")
		}
	}
	return api, reqOpt, nil
}

// workload builds the run's requests and fits the load flags to them.
func (o *benchOptions) workload(env *Env) (workload.Source, *workload.Scenario, workload.Tokenizer, error) {
	src, scenario, tok, err := o.work.build(env)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := o.load.fitWorkload(o.work.size(scenario)); err != nil {
		return nil, nil, nil, err
	}
	if src, err = o.load.ramped(src, o.work.Seed); err != nil { // --rate-ramp (load_flags.go)
		return nil, nil, nil, err
	}
	if err := o.load.checkOpenLoopFlags(src); err != nil {
		return nil, nil, nil, err
	}
	return src, scenario, tok, nil
}

// benchRun is one bench run between its target and its verdict.
type benchRun struct {
	o        *benchOptions
	env      *Env
	api      wire.API
	tgt      benchTarget
	src      workload.Source
	scenario *workload.Scenario
	runID    string
	dir      string
	man      record.Manifest
	// texts keeps the responses for --format-detailed.
	texts textKeeper
	// cpuWarning says the client was short of CPU ("" when not).
	cpuWarning string
	// probeStatus is the HTTP status of the check request (0: not sent or
	// unanswered); prompt-length calibration needs a target that answers.
	probeStatus int
}

func (b *benchRun) scenarioName() string {
	if b.scenario == nil {
		return ""
	}
	return b.scenario.Name
}

// createDir makes the run directory with the run's manifest.
func (b *benchRun) createDir() (*rundir.Writer, error) {
	o := b.o
	b.dir = o.Out
	if b.dir == "" {
		b.dir = filepath.Join(dataDir(b.env), "runs", b.runID)
	}
	b.man = record.Manifest{
		Schema: record.ManifestSchema, RunID: b.runID, Tool: "ttft", ToolVersion: version(),
		Command: "bench", Args: o.args, Source: "bench", Target: b.tgt.label, API: string(b.api),
		Model: b.tgt.model, Scenario: b.scenarioName(), Host: hostInfo(), Started: time.Now(),
		Labels: withLoad(loadLabels(&o.load, &o.work, b.src, b.scenario), parseLabels(o.Labels)), Server: b.tgt.server, Flags: o.flags,
	}
	rd, err := rundir.Create(b.dir, b.man)
	if err != nil {
		return nil, usageErr("--out: %v", err)
	}
	return rd, nil
}

// execute sends the workload with live progress; err is a setup failure
// (nothing ran), runErr what stopped the run early. stopObs ends the
// observers and says what the server's own metrics saw.
func (b *benchRun) execute(ctx context.Context, rd *rundir.Writer, reqOpt wire.RequestOptions, tok workload.Tokenizer) (res bench.Result, runErr error, stopObs func(context.Context) []string, err error) {
	o := b.o
	observers, stopObs, err := o.obs.start(ctx, b.env, b.tgt.base)
	if err != nil {
		return res, nil, nil, err
	}
	transport := bench.NewTransport(max(o.load.Concurrency, o.load.MaxConcurrency, 64))
	if !o.load.openLoop(b.src) {
		bench.ClosedLoop(transport, o.load.Concurrency)
	}
	if o.Insecure {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the user asked: self-signed internal endpoints
	}
	runner, err := bench.New(bench.Options{
		API: b.api, BaseURL: b.tgt.base, Request: reqOpt,
		Concurrency: o.load.Concurrency, Rate: o.load.Rate, Arrival: o.load.Arrival, Burstiness: o.load.Burstiness,
		MaxConcurrency: o.load.MaxConcurrency, RampUp: o.load.RampUp,
		Requests: o.load.Requests, Duration: o.load.Duration, Warmup: o.load.Warmup,
		Timeout: o.Timeout, TTFTTimeout: o.TTFTTimeout, MaxEventBytes: o.MaxEventBytes, ReadClock: o.ReadClock,
		Seed: o.work.Seed, RunID: b.runID, Target: b.tgt.label, Tokenizer: tok,
		Sinks: sinks(rd, o.onRecord), Observers: observers, Text: b.keepText(),
		Shard: o.shard.benchShard(b), // shard_flags.go
		// W3C trace context of each request's span goes to the server.
		Client: &http.Client{Transport: telemetry.Transport(transport)},
	})
	if err != nil {
		stopObs(context.WithoutCancel(ctx))
		return res, nil, nil, usageErr("%v", err)
	}
	if !o.Quiet {
		fmt.Fprintf(b.env.Stderr, "ttft bench: %s, model %s, %s; results in %s\n", b.tgt.label, b.tgt.model, loadLine(&o.load, b.src, b.scenario), b.dir)
	}
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if o.NoProgress || o.Quiet {
			<-stopProgress
			return
		}
		bench.Display(b.env.Stderr, runner.Progress(), b.env.IsTerminal, 10*time.Second, stopProgress)
	}()
	defer tuneGC(b.env)()
	cpu0, wall0 := cpuTime(), time.Now()
	res, runErr = runner.Run(ctx, b.src)
	b.cpuShare(cpuTime()-cpu0, time.Since(wall0))
	close(stopProgress)
	<-progressDone
	return res, runErr, stopObs, nil
}

// cpuShare notes the client's CPU use for the summary's warning.
func (b *benchRun) cpuShare(cpu, wall time.Duration) {
	if share := cpu.Seconds() / wall.Seconds() / float64(runtime.GOMAXPROCS(0)); wall > time.Second && share > 0.8 {
		who := "the client"
		if b.o.Target == "" {
			who = "the client and the in-process simulator"
		}
		b.cpuWarning = fmt.Sprintf("%s used %.0f%% of %d CPUs: latencies may include client-side queueing", who, 100*share, runtime.GOMAXPROCS(0))
	}
}

// summarize reduces the records to the run's summary, its warnings and
// its SLO verdicts.
func (b *benchRun) summarize(res bench.Result, rd *rundir.Writer) record.Summary {
	o := b.o
	sum := stats.Summarize(res.Records, stats.SummaryOptions{Source: "bench", Target: b.tgt.label, API: string(b.api), Model: b.tgt.model, Scenario: b.scenarioName(), Seed: o.work.Seed,
		OpenLoop: o.load.openLoop(b.src)})
	if res.Interrupted {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("interrupted: %d requests in flight were abandoned; the summary covers the %d that completed", res.Canceled, sum.Requests.Total))
	}
	for _, e := range res.SinkErrors {
		if e != rd.Err() {
			sum.Warnings = append(sum.Warnings, "writing results: "+e.Error())
		}
	}
	if b.cpuWarning != "" {
		sum.Warnings = append(sum.Warnings, b.cpuWarning)
	}
	if w := overloadWarning(&sum, res.Records, o.load.offeredRate(b.src, b.scenario)); w != "" {
		sum.Warnings = append(sum.Warnings, w)
	}
	if b.scenario != nil {
		verdicts, goodput := b.scenario.Evaluate(sum, res.Records)
		sum.SLO, sum.Goodput = verdicts, &goodput
	}
	if len(o.goodputSLOs) > 0 {
		g := workload.Goodput(o.goodputSLOs, sum, res.Records)
		sum.Goodput = &g
	}
	return sum
}

// exit is the run's exit status: files that failed, an early stop, an
// interrupt, then the gates (error rate, SLOs).
func (b *benchRun) exit(sum *record.Summary, res bench.Result, runErr, keep error) error {
	switch {
	case keep != nil:
		return keep
	case runErr != nil:
		return fmt.Errorf("run stopped early: %w", runErr)
	case res.Interrupted:
		return &exitError{code: 130, err: errors.New("interrupted")}
	}
	if total := sum.Requests.Total; total > 0 {
		if rate := float64(sum.Requests.Failed) / float64(total); rate > b.o.MaxErrorRate {
			return failErr("%d of %d requests failed (%.1f%% > --max-error-rate %.1f%%)", sum.Requests.Failed, total, 100*rate, 100*b.o.MaxErrorRate)
		}
	}
	if len(sum.SLO) > 0 && !workload.Passed(sum.SLO) {
		return failErr("scenario %s: SLO not met", b.scenarioName())
	}
	return nil
}

// keepRun finishes a run directory and stores the run in the results
// database (unless noStore). Its error, when files failed, names them and
// says what was kept: the database holds every record when it could store
// them, and the file its first whole lines.
func keepRun(ctx context.Context, env *Env, cmd, db string, quiet, noStore bool, rd *rundir.Writer, man record.Manifest, sum *record.Summary, recs []record.Record, extra map[string]any) error {
	fileErr := rundir.ErrorText(rd.Finish(man, sum, extra))
	storedID := ""
	var storeErr error
	if !noStore {
		if id, err := storeRun(ctx, env, db, rd.Dir(), man, *sum, recs); err != nil {
			storeErr = err
			where := "in " + rd.Dir()
			if fileErr != nil {
				where = "not (all) on disk either: only what the summary below shows is kept"
			}
			fmt.Fprintf(env.Stderr, "%s: warning: the run is not in the results database (%v); its results are %s\n", cmd, err, where)
		} else {
			storedID = id
			if id != "" && !quiet {
				fmt.Fprintf(env.Stderr, "%s: results in %s, stored as run %s\n", cmd, rd.Dir(), id)
			}
		}
	}
	if fileErr == nil {
		if storeErr != nil {
			// Nothing is lost (the directory holds the run, and `ttft
			// runs import` stores it later), but a run the user expects
			// in the database is not there: say so in the exit status.
			return failErr("storing the run: %v; its results are in %s (ttft runs import %s stores them)", storeErr, rd.Dir(), rd.Dir())
		}
		return nil
	}
	kept := "only the summary printed"
	if storedID != "" {
		kept = fmt.Sprintf("all %d records in the results database as run %s", len(recs), storedID)
	}
	return failErr("%v; kept: %s; %s holds the first %d records, whole", fileErr, kept, rd.RequestsPath(), rd.Kept())
}

// resolveTarget starts the built-in simulator when no target was given, and
// checks that the target answers, asking /v1/models for the model when none
// was named.
func resolveTarget(ctx context.Context, env *Env, o *benchOptions, api wire.API, reqOpt *wire.RequestOptions) (benchTarget, func(), error) {
	noop := func() {}
	if o.Target == "" {
		cfg := serve.DefaultConfig()
		srv, err := serve.Start(ctx, cfg)
		if err != nil {
			return benchTarget{}, noop, fmt.Errorf("starting the built-in simulator: %w", err)
		}
		d := srv.Deployment()
		t := benchTarget{base: srv.URL(), model: srv.ModelName(),
			label:  fmt.Sprintf("built-in simulator (%s)", d.Name()),
			server: map[string]any{"simulator": d.Name()}}
		if o.Model != "" && o.Model != t.model {
			srv.Close()
			return benchTarget{}, noop, usageErr("the built-in simulator serves %q; --model %q needs --target", t.model, o.Model)
		}
		return t, func() { srv.Close() }, nil
	}
	base, err := wire.BaseURL(o.Target)
	if err != nil {
		return benchTarget{}, noop, usageErr("--target: %v", err)
	}
	t := benchTarget{base: base, model: o.Model, label: base, server: map[string]any{}}
	client := http.DefaultClient
	if o.Insecure {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		client = &http.Client{Transport: tr}
	}
	t.client = client
	models, hdr, err := listModels(ctx, client, base, api, reqOpt)
	if err != nil {
		var ue *unreachableError
		if errors.As(err, &ue) {
			return t, noop, usageErr("cannot reach %s: %v", base, ue.err)
		}
		if t.model == "" {
			return t, noop, usageErr("--model not given and the model list at %s/v1/models could not be read: %v", base, err)
		}
	}
	if len(models) > 0 {
		t.server["models"] = models
	}
	if s := hdr.Get("Server"); s != "" {
		t.server["server_header"] = s
	}
	if t.model == "" {
		if len(models) == 0 {
			return t, noop, usageErr("--model not given and %s/v1/models lists no model", base)
		}
		t.model = models[0]
		fmt.Fprintf(env.Stderr, "ttft bench: no --model given; using %q, the first of %d listed by the server\n", t.model, len(models))
	} else if len(models) > 0 && !listsModel(models, t.model) {
		// Not an error: servers answer to aliases they do not list
		// (hosted APIs).
		shown := models
		if len(shown) > 8 {
			shown = shown[:8]
		}
		fmt.Fprintf(env.Stderr, "warning: --model %q is not among the %d models %s/v1/models lists (%s%s)\n", t.model, len(models), base,
			strings.Join(shown, ", "), map[bool]string{true: ", …", false: ""}[len(models) > len(shown)])
	}
	return t, noop, nil
}

type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }

func listModels(ctx context.Context, client *http.Client, base string, api wire.API, reqOpt *wire.RequestOptions) ([]string, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range reqOpt.Headers {
		req.Header[k] = vs
	}
	if reqOpt.APIKey != "" {
		if api == wire.Anthropic {
			req.Header.Set("x-api-key", reqOpt.APIKey)
			req.Header.Set("anthropic-version", wire.AnthropicVersion)
		} else {
			req.Header.Set("Authorization", "Bearer "+reqOpt.APIKey)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, &unreachableError{err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, resp.Header, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		Models []struct { // Ollama's native /api/tags shape, in case a proxy serves it
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, resp.Header, fmt.Errorf("malformed model list: %v", err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	for _, m := range list.Models {
		ids = append(ids, m.Name)
	}
	return ids, resp.Header, nil
}

func loadLine(l *loadOptions, src workload.Source, sc *workload.Scenario) string {
	var parts []string
	capped := func(s string) string {
		if l.MaxConcurrency > 0 {
			s += fmt.Sprintf(" (max %d in flight)", l.MaxConcurrency)
		}
		return s
	}
	switch {
	case l.ramp != nil: // --rate-ramp
		parts = append(parts, capped("Poisson ramp "+l.ramp.String()))
	case l.Rate > 0:
		parts = append(parts, capped(fmt.Sprintf("%g req/s %s", l.Rate, l.Arrival)))
	case workload.OwnsSchedule(src) && sc != nil && sc.Arrival.RatePerS > 0:
		proc := sc.Arrival.Process
		if proc == "" {
			proc = "poisson"
		}
		parts = append(parts, capped(fmt.Sprintf("the scenario's %g req/s %s", sc.Arrival.RatePerS, proc)))
	case workload.OwnsSchedule(src):
		parts = append(parts, capped("the trace's timestamps"))
	default:
		parts = append(parts, fmt.Sprintf("concurrency %d", l.Concurrency))
	}
	if l.Requests > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", l.Requests))
	}
	if l.Duration > 0 {
		parts = append(parts, "for "+l.Duration.String())
	}
	if l.Warmup > 0 {
		parts = append(parts, fmt.Sprintf("%d warm-up", l.Warmup))
	}
	return strings.Join(parts, ", ")
}

func newRunID(t time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return t.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// dataDir is where ttft keeps runs and its database by default.
func dataDir(env *Env) string {
	if d := env.getenv("TTFT_DATA_DIR"); d != "" {
		return d
	}
	if d := env.getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "ttft")
	}
	if h := env.getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "ttft")
	}
	return filepath.Join(os.TempDir(), "ttft")
}

func parseLabels(kvs []string) map[string]string {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m
}

// recordedFlags lists the flags the user set, secrets redacted, for the
// manifest.
func recordedFlags(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.Visit(func(f *pflag.Flag) {
		v := f.Value.String()
		switch f.Name {
		case "api-key":
			v = "REDACTED"
		case "header":
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				hs := sv.GetSlice()
				for i, h := range hs {
					if rundir.IsSecretHeader(h) {
						k, _, _ := strings.Cut(h, ":")
						hs[i] = k + ": REDACTED"
					}
				}
				v = "[" + strings.Join(hs, ",") + "]"
			}
		}
		m[f.Name] = v
	})
	return m
}

func hostInfo() record.Host {
	h, _ := os.Hostname()
	return record.Host{Hostname: h, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
}

// tuneGC makes garbage collection rare during a run: a load generator's
// collections are client-added latency (measured by --self-check: at 1,000
// streams on 2 cores, P99 added error 5.4 ms with GOGC=400, 1.2 ms with
// collections off). Unless the user set GOGC or GOMEMLIMIT, the collector
// only runs when the heap nears a 2 GiB soft limit. It returns the restore.
func tuneGC(env *Env) func() {
	if env.getenv("GOGC") != "" || env.getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	pct := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(2 << 30)
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	}
}

// version is Version, and for a development build the commit it was built
// from (Go stamps it into binaries built inside a git checkout).
func version() string {
	if Version != "dev" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return Version
	}
	return fmt.Sprintf("%s (commit %s%s, %s)", Version, rev, dirty, bi.GoVersion)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sinks are the run directory and, when set, an in-process watcher.
func sinks(rd *rundir.Writer, watch func(*record.Record)) []bench.Sink {
	if watch == nil {
		return []bench.Sink{rd}
	}
	return []bench.Sink{rd, sinkFunc(func(r *record.Record) error { watch(r); return nil })}
}

type sinkFunc func(*record.Record) error

func (f sinkFunc) Write(r *record.Record) error { return f(r) }

// listsModel reports whether a server's model list names model, taking
// Ollama's "name" as its "name:latest".
func listsModel(models []string, model string) bool {
	return slices.Contains(models, model) || !strings.Contains(model, ":") && slices.Contains(models, model+":latest")
}

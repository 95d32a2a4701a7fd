package cli

// ttft gateway: the SLO-aware routing reverse proxy, plus its helpers
// (validate, hash-key, eval).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/eval"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/sloclass"
	"github.com/ttft-dev/ttft/internal/telemetry"
)

// gatewayOptions are ttft gateway's flags.
type gatewayOptions struct {
	configPath string
	backends   []string
	listen     string
	policy     string
	sloClass   string
	noLog      bool
	cpuProfile string
	httpServer string
	recordsDir string
	redis      string
}

func newGatewayCmd(env *Env) *cobra.Command {
	o := &gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Route LLM requests to the backend most likely to meet their TTFT SLO",
		Long: `An OpenAI- and Anthropic-compatible reverse proxy (/v1/chat/completions,
/v1/completions, /v1/messages, /v1/models) that picks a backend per request:
round-robin, random, least-outstanding, power-of-two, prefix-affinity,
cache-aware or slo-predictive (default: online per-backend TTFT predictors,
best SLO headroom). Streams pass through event by event; failures before the
first byte are retried on another backend. Metrics on /metrics, health on
/healthz, JSON access log on stderr.

Backends come from --config FILE (YAML; reloaded on change or SIGHUP) or,
to try it, from --backend URL (repeatable, optionally name=URL).

A request's SLO: header x-ttft-slo-ms, or x-slo-class: ` + strings.Join(sloclass.Names(), "|") + `
(` + sloclass.Targets() + ` P95 TTFT), else the route's or the configured default.`,
		Example: `  ttft sim serve --port 8001 & ttft sim serve --port 8002 &
  ttft gateway --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002
  ttft gateway --config gateway.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGateway(cmd.Context(), env, o, cmd.Flags())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.configPath, "config", "c", "", "gateway YAML configuration (see docs/gateway.md)")
	f.StringArrayVar(&o.backends, "backend", nil, "backend base URL, or name=URL; repeatable (any model, OpenAI API; Anthropic clients are translated — use --config for Anthropic-API backends)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve on")
	f.StringVar(&o.policy, "policy", sched.SLOPredictive, "scheduling policy: "+strings.Join(sched.Policies(), ", "))
	f.StringVar(&o.sloClass, "slo-class", "", "default SLO class for requests without one: "+strings.Join(sched.Classes(), ", "))
	f.BoolVar(&o.noLog, "no-access-log", false, "disable the JSON access log")
	f.StringVar(&o.httpServer, "http-server", "ttft", "client-facing HTTP/1.1 server: ttft (the gateway's own, lowest overhead) or net/http (Go's standard server)")
	f.StringVar(&o.recordsDir, "records", "", "write every request through the gateway as a record to `DIR`/requests.jsonl (a run directory for ttft report, compare and runs import)")
	f.StringVar(&o.redis, "redis", "", "share the prefix index and breakers with the gateway's other replicas through this Redis `URL` (redis://127.0.0.1:6379/0; overrides shared_state.redis)")
	f.StringVar(&o.cpuProfile, "cpu-profile", "", "write a Go CPU profile to this file when the gateway stops (SIGINT/SIGTERM); for 'go tool pprof'")
	cmd.AddCommand(newGatewayValidateCmd(env), newGatewayHashKeyCmd(env), newGatewayEvalCmd(env), newGatewayLiveEvalCmd(env), newGatewayEPPCmd(env))
	return cmd
}

// config is the gateway's configuration: the file's, or the quick form's
// backends, with the flags that override it.
func (o *gatewayOptions) config(env *Env, fs *pflag.FlagSet) (*gateway.Config, error) {
	var cfg *gateway.Config
	var err error
	switch {
	case o.configPath != "" && len(o.backends) > 0:
		return nil, usageErr("gateway: use --config or --backend, not both")
	case o.configPath != "":
		cfg, err = gateway.LoadConfig(o.configPath, env.getenv)
	case len(o.backends) > 0:
		cfg, err = gateway.FromBackendURLs(o.backends)
	default:
		return nil, usageErr("gateway: no backends: pass --config FILE or --backend URL (see 'ttft gateway --help')")
	}
	if err != nil {
		return nil, usageErr("gateway: %v", err)
	}
	if fs.Changed("listen") || cfg.Listen == "" {
		cfg.Listen = o.listen
	}
	if fs.Changed("policy") {
		cfg.Policy = o.policy
	}
	if fs.Changed("slo-class") {
		cfg.SLOClass = o.sloClass
	}
	if fs.Changed("redis") {
		cfg.SharedState.Redis = o.redis
	}
	if o.noLog {
		off := false
		cfg.AccessLog = &off
	}
	if err := cfg.Validate(env.getenv); err != nil {
		return nil, usageErr("gateway: %v", err)
	}
	return cfg, nil
}

// runGateway serves until ctx ends or SIGINT/SIGTERM.
func runGateway(ctx context.Context, env *Env, o *gatewayOptions, fs *pflag.FlagSet) (retErr error) {
	cfg, err := o.config(env, fs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.cpuProfile != "" {
		// For finding the gateway's own cost under real load
		// (docs/performance.md); written when the gateway stops.
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return usageErr("gateway: --cpu-profile: %v", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return usageErr("gateway: --cpu-profile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	// Article §5: sample 10% normally, everything while P99 TTFT is
	// above 1.2 s and errors above 0.5%; errors and SLO misses are
	// always kept.
	tp, sampler, shutdown, err := telemetry.SetupDynamicTracing(ctx, env.getenv, "ttft-gateway", 0.1, 1200*time.Millisecond, 0.005, 0)
	if err != nil {
		return usageErr("gateway: tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shutdown(sctx)
	}()
	// Log lines (the access log above all) are written in batches
	// of up to 32 KiB, at most 200 ms late: a write system call
	// per request costs as much as routing it.
	logw := gateway.NewLogBuffer(env.Stderr, 200*time.Millisecond)
	defer logw.Flush()
	log := slog.New(slog.NewJSONHandler(logw, nil))
	gopts := gateway.Options{Logger: log, AccessLog: logw, TracerProvider: tp, Getenv: env.getenv, OnFinish: sampler.Observe, HTTPServer: o.httpServer}
	// GenAI server metrics over OTLP (gen_ai.server.*), on the tracing's variables.
	mp, mstop, err := telemetry.SetupMetrics(ctx, env.getenv, "ttft-gateway")
	if err != nil {
		return usageErr("gateway: metrics: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mstop(sctx)
	}()
	gopts.MeterProvider = mp
	if o.recordsDir != "" {
		finish, err := recordGateway(env, o.recordsDir, cfg, log, &gopts)
		if err != nil {
			return err
		}
		defer func() {
			// Records that could not be written make the exit non-zero:
			// the run directory is short of the traffic it claims.
			if ferr := finish(); ferr != nil && retErr == nil {
				retErr = ferr
			}
		}()
	}
	// The gateway, and its configuration reloads (file changes
	// and SIGHUP) when it came from a file.
	err = gateway.Run(ctx, o.configPath, gateway.RunOptions{Options: gopts, Config: cfg,
		Listening: func(net.Addr) { logw.Flush() }})
	var se *gateway.StartError
	switch {
	case errors.As(err, &se):
		return usageErr("gateway: %v", se.Err)
	case err != nil:
		return failErr("gateway: %v", err)
	}
	return nil
}

// recordGateway makes a run directory of the traffic through the gateway,
// for ttft report / compare / runs import: one record per request,
// appended as it finishes. finish closes it; its error names the file that
// could not be written (a full disk), what it kept and how many records
// were lost. Serving goes on whatever happens to the records.
func recordGateway(env *Env, dir string, cfg *gateway.Config, log *slog.Logger, gopts *gateway.Options) (finish func() error, err error) {
	man := record.Manifest{Schema: record.ManifestSchema, RunID: newRunID(time.Now()), Tool: "ttft", ToolVersion: version(), Command: "gateway", Args: env.Args,
		Source: "gateway", Target: "http://" + cfg.Listen, Host: hostInfo(), Started: time.Now().UTC(), Labels: map[string]string{"policy": cfg.Policy}}
	rd, err := rundir.Create(dir, man)
	if err != nil {
		return nil, usageErr("gateway: --records: %v", err)
	}
	// offered counts every record handed to the writer; those not
	// written are offered − Kept once the file is closed. Counting a
	// record as lost when the file's error is set after its write would
	// miscount: with group commit, a record already written whole can
	// see the failure of a later batch.
	var offered atomic.Int64
	gopts.OnRecord = func(r *record.Record) {
		offered.Add(1)
		// Only the first failure returns an error: the file ends
		// there, whole (see rundir.Writer.Write).
		if err := rd.Write(r); err != nil {
			log.Error("gateway: writing records stopped", "error", err.Error(), "kept", rd.Kept())
		}
	}
	return func() error {
		man.Ended = time.Now().UTC()
		// No summary: ttft report and runs import compute it from the
		// records.
		errs := rd.Finish(man, nil, nil)
		for _, err := range errs {
			log.Error("gateway: --records", "error", err.Error())
		}
		if len(errs) == 0 {
			return nil
		}
		kept := rd.Kept()
		return failErr("gateway: --records %s: %v; kept: %s holds the first %d records, whole; %d records not written", dir, errs[0], rd.RequestsPath(), kept, max(offered.Load()-int64(kept), 0))
	}, nil
}

func newGatewayValidateCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a gateway configuration (errors name file, line and field)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := gateway.LoadConfig(args[0], env.getenv)
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(env.Stdout, "%s: ok (%d backends, %d routes, %d keys, policy %s)\n", args[0], len(cfg.Backends), len(cfg.Routes), len(cfg.Keys), cfg.Policy)
			return nil
		},
	}
}

func newGatewayHashKeyCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "hash-key",
		Short: "Read a client API key on stdin and print the sha256 to put in the config",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if env.Stdin == nil {
				return usageErr("hash-key: no standard input")
			}
			line, err := bufio.NewReader(env.Stdin).ReadString('\n')
			key := strings.TrimSpace(line)
			if key == "" {
				return usageErr("hash-key: no key on standard input (%v)", err)
			}
			fmt.Fprintln(env.Stdout, gateway.HashKey(key))
			return nil
		},
	}
}

func newGatewayEvalCmd(env *Env) *cobra.Command {
	var (
		rates    []float64
		requests int
		policies []string
		sloMs    float64
		seed     uint64
		groups   int
		prefix   int
		suffix   int
	)
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Compare scheduling policies on a simulated heterogeneous fleet",
		Long: `Runs every policy against the same shared-prefix workload on a simulated
fleet (2× H100 + 2× A10G serving Llama-3.1-8B, the ttft simulator's engine on
a virtual clock) at each rate, and prints mean/P50/P95/P99 TTFT, SLO
attainment, goodput and prefix-cache hit rate as a Markdown table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opt := eval.DefaultOptions()
			if len(rates) > 0 {
				opt.Rates = rates
			}
			for _, r := range opt.Rates {
				if r <= 0 {
					return usageErr("eval: --rates: %g is not a positive rate", r)
				}
			}
			if requests < 20 {
				return usageErr("eval: --requests must be at least 20")
			}
			opt.Requests = requests
			if len(policies) > 0 {
				for _, p := range policies {
					if _, err := sched.New(sched.Options{Policy: p}, nil); err != nil {
						return usageErr("eval: --policies: %v", err)
					}
				}
				opt.Policies = policies
			}
			if sloMs <= 0 {
				return usageErr("eval: --slo-ms must be positive")
			}
			opt.SLO = time.Duration(sloMs * float64(time.Millisecond))
			if groups < 1 || prefix < 1 {
				return usageErr("eval: --groups and --prefix-tokens must be positive")
			}
			opt.Workload.Groups, opt.Workload.PrefixTokens = groups, prefix
			if suffix <= opt.Workload.SuffixMin {
				return usageErr("eval: --suffix-max must exceed %d", opt.Workload.SuffixMin)
			}
			opt.Workload.SuffixMax = suffix
			opt.Seed = seed
			rows, err := eval.Run(cmd.Context(), opt)
			if err != nil {
				return failErr("eval: %v", err)
			}
			eval.Format(env.Stdout, rows, opt.SLO)
			return nil
		},
	}
	f := cmd.Flags()
	f.Float64SliceVar(&rates, "rates", nil, "arrival rates in requests/s")
	f.Lookup("rates").DefValue = "10,20,30,40" // eval.DefaultOptions().Rates, shown as typed
	f.IntVar(&requests, "requests", 2000, "requests per policy and rate (the first 10% are warm-up)")
	f.StringSliceVar(&policies, "policies", nil, "policies to compare (default all)")
	f.Float64Var(&sloMs, "slo-ms", float64(eval.DefaultOptions().SLO.Milliseconds()), "TTFT SLO in milliseconds")
	f.Uint64Var(&seed, "seed", 1, "random seed (workload and scheduler)")
	f.IntVar(&groups, "groups", eval.DefaultOptions().Workload.Groups, "tenants, each with its own shared system prompt")
	f.IntVar(&suffix, "suffix-max", eval.DefaultOptions().Workload.SuffixMax, "longest unique (uncached) part of a prompt, in tokens")
	f.IntVar(&prefix, "prefix-tokens", eval.DefaultOptions().Workload.PrefixTokens, "tokens of each tenant's shared system prompt")
	return cmd
}

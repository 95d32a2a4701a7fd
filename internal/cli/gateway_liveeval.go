package cli

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/liveeval"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/rundir"
)

// newGatewayLiveEvalCmd is "ttft gateway live-eval": every policy on live
// fleets (stand-in backends and the simulator's replicas) through the real
// gateway, measured by bench's runner (package liveeval).
func newGatewayLiveEvalCmd(env *Env) *cobra.Command {
	var (
		fleets, policies []string
		seeds            int
		requests         int
		verbose          bool
		admission        bool
		predictor        bool
		ollama           string
		out              string
		report, compare  []string
		resume           bool
	)
	cmd := &cobra.Command{
		Use:   "live-eval",
		Short: "Compare scheduling policies live: the gateway over HTTP in front of stand-in and simulated fleets",
		Long: `Starts each fleet (stand-in backends with their own latency model, or the
simulator's live replicas) and a gateway running each policy in front of it on
loopback ports, sends the same seeded shared-prefix workload through it with
ttft bench's runner, and prints per fleet and policy the medians across seeds
of mean/P95/P99 TTFT, P99's range, SLO attainment and goodput, then whether
the default policy meets its targets (P99 within 10% of the best
single-signal policy, at most 1/3 of round-robin's).

With --ollama PATH it runs the real-engine fleets instead (or beside the
fleets --fleets names): ollama serve instances on the CPU, each serving a
generated model with a small prompt cache, started once per fleet and
reset (model unloaded and reloaded, caches empty) before every run.

Every run is written to the results directory as soon as it finishes
(--out; default a new directory under the ttft data directory, printed at
the start): suite.json, then runs/NNNN-FLEET-POLICY-seedN.json with the
run's figures and every scored request's TTFT. --report DIR prints the
tables again from such a directory without running anything, and --resume
with --out DIR and the same flags as before takes a suite that stopped up
again: the runs on disk are kept and only the others run.

--report AFTER --compare BEFORE compares two builds' suites (the same
flags, each build's binary): per fleet and policy the pooled P99 of each
and after ÷ before with a 90% paired bootstrap interval. Several rounds
run alternately go comma-separated on both sides, round i paired with
round i.

The last table, which decides, pools each policy's requests over the seeds
(the seeds replay the same requests for every policy) and gives each ratio
a 90% paired bootstrap interval (seeds, then their requests, resampled
alike for both policies; seeded, so reproducible): a target is met when
the whole interval is within it, not met when wholly beyond, otherwise
undecided (docs/routing-evaluation.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(compare) > 0 && len(report) == 0 {
				return usageErr("live-eval: --compare BEFORE goes with --report AFTER")
			}
			if len(report) > 0 {
				for _, n := range []string{"fleets", "policies", "seeds", "requests", "admission", "predictor", "ollama", "out", "resume"} {
					if cmd.Flags().Changed(n) {
						return usageErr("live-eval: --report prints a finished directory's tables; --%s is for a new suite", n)
					}
				}
				if len(compare) > 0 {
					return liveEvalCompare(env, compare, report)
				}
				if len(report) > 1 {
					return usageErr("live-eval: --report takes one directory (several only with --compare)")
				}
				return liveEvalReport(env, report[0])
			}
			all := liveeval.Fleets()
			opt := liveeval.Options{Policies: sched.Policies()}
			switch {
			case admission && predictor:
				return usageErr("live-eval: --admission and --predictor are separate evaluations")
			case admission:
				all = liveeval.AdmissionFleets()
				opt.Policies = liveeval.AdmissionPolicies()
			case predictor:
				all = liveeval.PredictorFleets()
				opt.Policies = liveeval.PredictorPolicies()
			}
			if ollama != "" {
				if admission || predictor {
					return usageErr("live-eval: --ollama has fleets of its own, not --admission or --predictor ones")
				}
				// Real engines: without --fleets only their fleets run.
				if len(fleets) == 0 {
					all = nil
				}
				all = append(all, liveeval.OllamaFleets()...)
				opt.Ollama = ollama
			}
			if len(policies) > 0 {
				for _, p := range policies {
					inner, _ := liveeval.SplitEPP(p)
					if err := liveeval.CheckEPPPolicy(p); err != nil {
						return usageErr("live-eval: --policies: %v", err)
					}
					pol, adm, _ := liveeval.SplitPolicy(inner)
					if !slices.Contains(sched.Policies(), pol) {
						return usageErr("live-eval: --policies: unknown policy %q (want %s)", p, strings.Join(sched.Policies(), ", "))
					}
					if !slices.Contains([]string{gateway.AdmitBestEffort, gateway.AdmitReject, gateway.AdmitDegrade}, adm) {
						return usageErr("live-eval: --policies: unknown admission in %q (want POLICY, POLICY+reject, POLICY+degrade, each optionally +switching)", p)
					}
				}
				opt.Policies = policies
			}
			for _, f := range all {
				if len(fleets) == 0 || slices.Contains(fleets, f.Name) {
					if requests > 0 {
						f.Workload.Requests = requests
					}
					opt.Fleets = append(opt.Fleets, f)
				}
			}
			var names []string
			for _, f := range all {
				names = append(names, f.Name)
			}
			for _, n := range fleets {
				if !slices.Contains(names, n) && slices.Contains(liveeval.OllamaFleetNames(), n) {
					return usageErr("live-eval: --fleets: fleet %q needs --ollama PATH (the ollama binary)", n)
				}
				if !slices.Contains(names, n) {
					return usageErr("live-eval: --fleets: unknown fleet %q (want %s)", n, strings.Join(names, ", "))
				}
			}
			if seeds < 1 {
				return usageErr("live-eval: --seeds must be at least 1")
			}
			for i := range seeds {
				opt.Seeds = append(opt.Seeds, uint64(i+1))
			}
			if verbose {
				opt.Progress = func(r liveeval.Result) {
					fmt.Fprintf(env.Stderr, "%s %s seed %d: P99 %.1f ms, mean %.1f ms, attain %.1f%% (admitted %.1f%%, %d rejected), hit %.0f%%, %d failed, decisions %v (%.1fs)\n",
						r.Fleet, r.Policy, r.Seed, r.P99.Seconds()*1000, r.Mean.Seconds()*1000, 100*r.Attainment, 100*r.AdmittedAttainment, r.Rejected,
						100*r.HitRate, r.Failed, r.Reasons, r.Wall.Seconds())
					if r.BackendN > 0 {
						fmt.Fprintf(env.Stderr, "  backend-side (%d requests): P99 %.1f ms, P95 %.1f ms, mean %.1f ms (queued %.1f ms), attain %.1f%%\n",
							r.BackendN, r.BackendP99.Seconds()*1000, r.BackendP95.Seconds()*1000, r.BackendMean.Seconds()*1000, r.BackendQueued.Seconds()*1000, 100*r.BackendAttainment)
					}
				}
			}
			mode := liveeval.ModePolicies
			switch {
			case admission:
				mode = liveeval.ModeAdmission
			case predictor:
				mode = liveeval.ModePredictor
			}
			suite := liveeval.NewSuite(opt, mode, sched.SLOPredictive, version(), rundir.RedactArgs(env.Args))
			var st *liveeval.Store
			switch {
			case resume:
				if out == "" {
					return usageErr("live-eval: --resume needs --out DIR, the directory of the suite to take up again")
				}
				var warns []error
				var err error
				st, opt.Done, warns, err = liveeval.ResumeStore(out, suite)
				for _, w := range warns {
					fmt.Fprintf(env.Stderr, "live-eval: warning: will run again: %v\n", w)
				}
				if err != nil {
					return usageErr("live-eval: --resume: %v (it takes the flags the suite was started with)", err)
				}
				if v := st.Suite().ToolVersion; v != suite.ToolVersion {
					fmt.Fprintf(env.Stderr, "live-eval: warning: the suite was started by ttft %s, this is %s\n", v, suite.ToolVersion)
				}
				fmt.Fprintf(env.Stderr, "live-eval: resuming %s: %d of %d runs on disk\n", out, len(opt.Done),
					len(opt.Fleets)*len(opt.Policies)*len(opt.Seeds))
			default:
				if out == "" {
					out = filepath.Join(dataDir(env), "live-eval", newRunID(time.Now()))
				}
				var err error
				if st, err = liveeval.CreateStore(out, suite); err != nil {
					return usageErr("live-eval: --out: %v (--resume takes a stopped suite up again)", err)
				}
			}
			opt.Store = st
			fmt.Fprintf(env.Stderr, "live-eval: writing results to %s (ttft gateway live-eval --report %s prints them again)\n", out, out)
			rs, err := liveeval.Run(cmd.Context(), opt)
			if ferr := st.Finish(err); ferr != nil {
				fmt.Fprintf(env.Stderr, "live-eval: %v\n", ferr)
			}
			if err != nil {
				return failErr("live-eval: %v (the %d runs that finished are in %s)", err, len(rs), out)
			}
			printLiveEval(env, mode, sched.SLOPredictive, rs, opt.Fleets)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&fleets, "fleets", nil, "fleets to run (default all: "+strings.Join(liveeval.FleetNames(), ", ")+")")
	f.StringSliceVar(&policies, "policies", nil, "policies to compare (default all); epp:POLICY routes through the Endpoint Picker behind an Envoy stand-in instead of the gateway")
	f.IntVar(&seeds, "seeds", 5, "seeds per fleet and policy (1..N)")
	f.IntVar(&requests, "requests", 0, "scored requests per run (default: the fleet's)")
	f.BoolVar(&admission, "admission", false, "compare admission under overload instead (fleet overload; round-robin and the default, best-effort, +reject, +degrade)")
	f.BoolVar(&predictor, "predictor", false, "compare the default TTFT predictor with the switching one (linear / gradient-boosted trees) on volatile fleets: MAPE side by side and routing")
	f.StringVar(&ollama, "ollama", "", "ollama binary: run the real-engine fleets ("+strings.Join(liveeval.OllamaFleetNames(), ", ")+"; only those unless --fleets names others)")
	f.BoolVarP(&verbose, "verbose", "v", false, "print each run's result on stderr as it finishes")
	f.StringVarP(&out, "out", "o", "", "results directory, written run by run (default: a new directory under the ttft data directory's live-eval/); one that holds a suite is refused")
	f.StringSliceVar(&report, "report", nil, "print the tables of the results directory `DIR` (a suite's --out) without running anything")
	f.StringSliceVar(&compare, "compare", nil, "with --report AFTER[,AFTER...]: compare those suites with these, `BEFORE[,BEFORE...]`, round by round")
	f.BoolVar(&resume, "resume", false, "take up again the suite in --out that stopped part way, with the flags it was started with: runs on disk are kept, the others run")
	return cmd
}

// printLiveEval writes a suite's tables: the admission comparison, or the
// per-policy table, the Endpoint Picker comparison where it ran, then the
// predictors' errors or the verdicts on the targets (medians of the
// seeds, then the seeds pooled with their intervals), and last the runs
// in which the host served requests late (liveeval.FormatHostLate).
func printLiveEval(env *Env, mode, def string, rs []liveeval.Result, fleets []liveeval.Fleet) {
	// Whatever the mode, last: the runs a stall of the host touched.
	defer func() {
		if slices.ContainsFunc(rs, func(r liveeval.Result) bool { return r.HostLate > 0 }) {
			fmt.Fprintln(env.Stdout)
			liveeval.FormatHostLate(env.Stdout, rs)
		}
	}()
	sums := liveeval.Summarize(rs)
	if mode == liveeval.ModeAdmission {
		liveeval.FormatAdmission(env.Stdout, sums)
		return
	}
	liveeval.Format(env.Stdout, sums)
	fmt.Fprintln(env.Stdout)
	if cs := liveeval.CompareEPP(sums); len(cs) > 0 {
		liveeval.FormatEPP(env.Stdout, cs)
		fmt.Fprintln(env.Stdout)
	}
	if mode == liveeval.ModePredictor {
		liveeval.FormatMAPE(env.Stdout, rs)
		return
	}
	liveeval.FormatVerdicts(env.Stdout, liveeval.Check(sums, fleets, def), def)
	fmt.Fprintln(env.Stdout)
	var boot liveeval.Bootstrap
	liveeval.FormatPooledVerdicts(env.Stdout, liveeval.CheckPooled(rs, fleets, def, boot), def, boot)
}

// liveEvalReport prints the tables of a results directory: a run file
// that cannot be read is named and left out, the rest still report.
func liveEvalReport(env *Env, dir string) error {
	suite, rs, warns, err := liveeval.ReadDir(dir)
	for _, w := range warns {
		fmt.Fprintf(env.Stderr, "live-eval: warning: left out: %v\n", w)
	}
	if err != nil {
		return usageErr("live-eval: --report: %v", err)
	}
	if suite.Status != "complete" {
		fmt.Fprintf(env.Stderr, "live-eval: suite %s (%d runs on disk of %d planned)\n", suite.Status, len(rs), len(suite.Fleets)*len(suite.Policies)*len(suite.Seeds))
	}
	def := suite.DefaultPolicy
	if def == "" {
		def = sched.SLOPredictive
	}
	printLiveEval(env, suite.Mode, def, rs, suite.ReportFleets())
	return nil
}

// liveEvalCompare prints the comparison of two builds' suites, round i of
// before with round i of after.
func liveEvalCompare(env *Env, before, after []string) error {
	if len(before) != len(after) {
		return usageErr("live-eval: --compare has %d suites and --report %d: rounds pair one to one", len(before), len(after))
	}
	read := func(dirs []string) ([][]liveeval.Result, error) {
		var out [][]liveeval.Result
		for _, d := range dirs {
			suite, rs, warns, err := liveeval.ReadDir(d)
			for _, w := range warns {
				fmt.Fprintf(env.Stderr, "live-eval: warning: left out: %v\n", w)
			}
			if err != nil {
				return nil, err
			}
			if suite.Status != "complete" {
				fmt.Fprintf(env.Stderr, "live-eval: %s: suite %s (%d runs on disk)\n", d, suite.Status, len(rs))
			}
			out = append(out, rs)
		}
		return out, nil
	}
	b, err := read(before)
	if err != nil {
		return usageErr("live-eval: --compare: %v", err)
	}
	a, err := read(after)
	if err != nil {
		return usageErr("live-eval: --report: %v", err)
	}
	var boot liveeval.Bootstrap
	cs := liveeval.CompareSuites(b, a, boot)
	if len(cs) == 0 {
		return usageErr("live-eval: --compare: the suites have no fleet, policy and seed in common")
	}
	liveeval.FormatComparison(env.Stdout, cs, boot)
	return nil
}

package cli

import (
	"math"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/workload"
)

// loadOptions are the load-shape flags shared by bench, sim run and sweep.
type loadOptions struct {
	Concurrency    int
	Rate           float64
	Arrival        string
	Burstiness     float64
	MaxConcurrency int
	Requests       int
	Duration       time.Duration
	Warmup         int
	RampUp         time.Duration
	// RateRamp is --rate-ramp FROM:TO:OVER (ramp.go's non-homogeneous
	// Poisson schedule); ramp is it parsed.
	RateRamp string
	ramp     *workload.Ramp

	// allAtOnce: --rate inf became a closed loop at --max-concurrency.
	allAtOnce bool
	fs        *pflag.FlagSet
}

// vllmFlagNames maps vLLM benchmark_serving's flag names to ttft's, so that
// a command line written for one runs the other where they mean the same.
var vllmFlagNames = map[string]string{
	"request-rate":      "rate",
	"num-prompts":       "requests",
	"base-url":          "target",
	"random-input-len":  "prompt-tokens",
	"random-output-len": "max-tokens",
	"dataset-path":      "dataset",
	"save-detailed":     "format-detailed",
}

// vllmAliases is a pflag normalizer accepting vllmFlagNames.
func vllmAliases(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if to, ok := vllmFlagNames[name]; ok {
		return pflag.NormalizedName(to)
	}
	return pflag.NormalizedName(name)
}

func addLoadFlags(fs *pflag.FlagSet, o *loadOptions) {
	o.fs = fs
	fs.SetNormalizeFunc(vllmAliases)
	fs.IntVarP(&o.Concurrency, "concurrency", "c", 8, "closed loop: requests in flight at once (each sends its next when the previous ends)")
	fs.Float64VarP(&o.Rate, "rate", "r", 0, "open loop: requests per second on a schedule (overrides --concurrency)")
	fs.StringVar(&o.Arrival, "arrival", "poisson", "open-loop arrival process: poisson, gamma or constant")
	fs.Float64Var(&o.Burstiness, "burstiness", 1, "gamma shape for --arrival gamma (1 = Poisson, < 1 burstier)")
	fs.IntVar(&o.MaxConcurrency, "max-concurrency", 0, "open loop: cap on requests in flight (0 = none); late sends show as schedule lag")
	fs.IntVarP(&o.Requests, "requests", "n", 100, "measured requests (0 with --duration: until the duration ends)")
	fs.DurationVarP(&o.Duration, "duration", "d", 0, "stop sending after this long (e.g. 60s); requests in flight complete")
	fs.IntVar(&o.Warmup, "warmup", 0, "warm-up requests sent first and left out of statistics (the source article uses 50)")
	fs.DurationVar(&o.RampUp, "ramp-up", 0, "closed loop: start the workers evenly over this long")
	fs.StringVar(&o.RateRamp, "rate-ramp", "", "open loop: Poisson arrivals whose rate goes linearly FROM:TO:OVER, e.g. 10:100:60s (then stays at TO; to 0 ends the run)")
}

func (o *loadOptions) validate() error {
	if o.RateRamp != "" {
		r, err := workload.ParseRamp(o.RateRamp)
		if err != nil {
			return usageErr("--rate-ramp: %v", err)
		}
		if o.fs != nil && (o.fs.Changed("rate") || o.fs.Changed("concurrency") || o.fs.Changed("ramp-up") || o.fs.Changed("arrival") || o.fs.Changed("burstiness")) {
			return usageErr("--rate-ramp is the run's load: it replaces --rate, --concurrency, --ramp-up, --arrival and --burstiness")
		}
		o.ramp = &r
	}
	if math.IsInf(o.Rate, 1) {
		// vLLM's --request-rate inf: every request at once, at most
		// --max-concurrency in flight; that is a closed loop of that many.
		n := o.MaxConcurrency
		if n == 0 {
			n = o.Requests
		}
		if n <= 0 {
			return usageErr("--rate inf sends every request at once: it needs --max-concurrency or --requests")
		}
		o.Rate, o.MaxConcurrency, o.Concurrency, o.allAtOnce = 0, 0, n, true
		return o.validateRest(false)
	}
	return o.validateRest(true)
}

func (o *loadOptions) validateRest(checkCombos bool) error {
	switch {
	case o.Rate < 0:
		return usageErr("--rate must be positive, got %v", o.Rate)
	case o.Rate == 0 && o.Concurrency < 1:
		return usageErr("--concurrency must be at least 1, got %d", o.Concurrency)
	case o.Requests < 0:
		return usageErr("--requests must not be negative, got %d", o.Requests)
	case o.Duration < 0:
		return usageErr("--duration must not be negative, got %v", o.Duration)
	case o.Warmup < 0:
		return usageErr("--warmup must not be negative, got %d", o.Warmup)
	case o.MaxConcurrency < 0:
		return usageErr("--max-concurrency must not be negative, got %d", o.MaxConcurrency)
	}
	switch o.Arrival {
	case "poisson", "gamma", "constant":
	default:
		return usageErr("--arrival must be poisson, gamma or constant, got %q", o.Arrival)
	}
	if o.Arrival == "gamma" && !(o.Burstiness > 0) {
		return usageErr("--burstiness must be > 0, got %v", o.Burstiness)
	}
	if o.fs != nil && checkCombos {
		// Flags that would be silently ignored are refused instead.
		changed := o.fs.Changed
		switch {
		case changed("rate") && o.Rate == 0:
			return usageErr("--rate must be > 0 (leave it out for a closed loop at --concurrency)")
		case changed("rate") && changed("concurrency"):
			return usageErr("--rate (open loop) and --concurrency (closed loop) are two different loads; cap an open loop with --max-concurrency")
		case o.Rate > 0 && changed("ramp-up"):
			return usageErr("--ramp-up starts a closed loop's workers; an open loop at --rate has none")
		case o.Rate == 0 && (changed("arrival") || changed("burstiness")):
			return usageErr("--arrival and --burstiness shape an open loop; they need --rate")
		case o.Arrival != "gamma" && changed("burstiness"):
			return usageErr("--burstiness is the gamma shape; it needs --arrival gamma")
		}
	}
	// --duration alone means "until the duration ends".
	if o.fs != nil && o.Duration > 0 && !o.fs.Changed("requests") {
		o.Requests = 0
	}
	return nil
}

// fitWorkload adapts the request count to a workload of known size: a
// multi-turn workload without --requests runs all its turns (the default
// 100 would stop 20 sessions × 10 turns at turn 5), and --requests 0
// without --duration is refused for a workload that never ends.
func (o *loadOptions) fitWorkload(turns int, finite bool) error {
	if turns > 0 && o.Duration == 0 && o.fs != nil && !o.fs.Changed("requests") {
		o.Requests = turns
	}
	if o.Requests == 0 && o.Duration == 0 && !finite {
		return usageErr("--requests 0 runs until --duration ends, and no --duration was given")
	}
	return nil
}

// openLoop reports whether the run sends on a schedule: --rate, or a
// workload that owns its schedule (a scenario's arrival process, a trace's
// timestamps), which --concurrency does not cap; only --max-concurrency does.
func (o *loadOptions) openLoop(src workload.Source) bool {
	return o.Rate > 0 || workload.OwnsSchedule(src)
}

// checkOpenLoopFlags refuses --max-concurrency on a closed loop, where it
// would be ignored; it is known only once the workload is (a scenario's
// arrival process or a trace makes an open loop).
func (o *loadOptions) checkOpenLoopFlags(src workload.Source) error {
	if o.ramp != nil {
		return nil // an open loop on the ramp's schedule: --max-concurrency caps it
	}
	if o.fs != nil && o.fs.Changed("max-concurrency") && !o.allAtOnce && !o.openLoop(src) {
		return usageErr("--max-concurrency caps an open loop (--rate, a scenario's arrival rate or a trace); a closed loop has --concurrency requests in flight")
	}
	return nil
}

// offeredRate is the open-loop load asked for, in requests per second: --rate
// or a scheduled scenario's arrival rate (0 when unknown or closed loop).
func (o *loadOptions) offeredRate(src workload.Source, sc *workload.Scenario) float64 {
	switch {
	case o.Rate > 0:
		return o.Rate
	case sc != nil && workload.OwnsSchedule(src) && sc.Session == nil:
		return sc.Arrival.RatePerS
	}
	return 0
}

// overloadWarning is the summary's warning when a run looks overloaded
// (stats.Overload), or "".
func overloadWarning(sum *record.Summary, recs []record.Record, offered float64) string {
	why := stats.Overload(sum, recs, offered)
	if why == "" {
		return ""
	}
	return "OVERLOADED: " + why + "; the latencies grow with the run's length and describe no steady state (lower the load or add replicas)"
}

// ramped puts src on --rate-ramp's schedule (src unchanged without one).
// A workload with a schedule of its own (a scenario's arrival process, a
// trace, multi-turn sessions) is refused rather than silently re-timed.
func (o *loadOptions) ramped(src workload.Source, seed int64) (workload.Source, error) {
	if o.ramp == nil {
		return src, nil
	}
	if _, multi := src.(workload.FeedbackSource); multi {
		return nil, usageErr("--rate-ramp sends independent requests; multi-turn sessions pace themselves")
	}
	r, err := workload.NewRamped(src, *o.ramp, seed)
	if err != nil {
		return nil, usageErr("--rate-ramp: %v", err)
	}
	return r, nil
}

package cli

// Workload flags shared by bench, sim run and sweep: they turn into a
// workload.Source, an optional scenario with SLOs, and the tokenizer used to
// count tokens.

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/workload"
)

type workloadOptions struct {
	PromptTokens int
	MaxTokens    int
	MinTokens    int
	IgnoreEOS    bool
	Tokenizer    string
	Seed         int64
	SamePrompt   bool
	// Length distributions: ttft's (--prompt-tokens-dist normal:500,100)
	// or vLLM's random dataset (--random-range-ratio around the lengths).
	PromptDist string
	OutputDist string
	RangeRatio float64

	Scenario string

	Sessions     int
	Turns        int
	ThinkTime    time.Duration
	MaxActive    int
	SystemTokens int

	PrefixGroups     int
	PrefixTokens     int
	PrefixPopularity string
	ZipfS            float64

	Dataset          string
	DatasetFormat    string
	OnBadLine        string
	TimeScale        float64
	MaxRate          float64
	IgnoreTimestamps bool
	LoopDataset      bool

	fs *pflag.FlagSet // to tell explicit flags from defaults
	// promptScale is the server's tokens per local token when bench has
	// calibrated prompt lengths against its target (0: local lengths).
	promptScale float64
}

func addWorkloadFlags(fs *pflag.FlagSet, o *workloadOptions) {
	o.fs = fs
	fs.IntVar(&o.PromptTokens, "prompt-tokens", 128, "prompt length in tokens (exact, under the tokenizer)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 128, "maximum output tokens per request")
	fs.IntVar(&o.MinTokens, "min-tokens", 0, "ask the server for at least this many output tokens (vLLM min_tokens)")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false, "force every output to its full length (min_tokens = max_tokens, ignore_eos)")
	fs.StringVar(&o.Tokenizer, "tokenizer", workload.DefaultTokenizerName, "tokenizer: an embedded encoding (cl100k_base, o200k_base), a HuggingFace tokenizer.json (or a directory holding one), or a GGUF model file (its tokenizer)")
	fs.Int64Var(&o.Seed, "seed", 1, "random seed for prompts and workload draws")
	fs.StringVar(&o.PromptDist, "prompt-tokens-dist", "", "prompt length distribution instead of a fixed --prompt-tokens: N, uniform:MIN,MAX, normal:MEAN,STD[,MIN,MAX] or lognormal:MEDIAN,SIGMA[,MIN,MAX] (as a scenario's prompt_tokens)")
	fs.StringVar(&o.OutputDist, "output-tokens-dist", "", "output length distribution instead of a fixed --max-tokens, same forms as --prompt-tokens-dist")
	fs.Float64Var(&o.RangeRatio, "random-range-ratio", 0, "vLLM's random dataset: prompt and output lengths uniform in [L·(1−R), L·(1+R)] around --prompt-tokens and --max-tokens (0 ≤ R < 1)")
	fs.BoolVar(&o.SamePrompt, "same-prompt", false, "send one identical prompt every time (prefix caches hit); by default every prompt differs from its first token")

	fs.StringVar(&o.Scenario, "scenario", "", "workload scenario with SLOs: chat, code, summary, or a YAML file; the run ends with a verdict per SLO")

	fs.IntVar(&o.Sessions, "sessions", 0, "multi-turn: number of conversations (each turn resends the history)")
	fs.IntVar(&o.Turns, "turns", 5, "multi-turn: turns per conversation")
	fs.DurationVar(&o.ThinkTime, "think-time", 0, "multi-turn: pause between a reply and the next turn")
	fs.IntVar(&o.MaxActive, "max-active-sessions", 0, "multi-turn: conversations open at once (0 = all)")
	fs.IntVar(&o.SystemTokens, "system-tokens", 0, "multi-turn: system prompt length per conversation")

	fs.IntVar(&o.PrefixGroups, "prefix-groups", 0, "shared prefixes: number of groups, each with its own shared prefix")
	fs.IntVar(&o.PrefixTokens, "prefix-tokens", 1024, "shared prefixes: tokens in each group's shared prefix (then --prompt-tokens of suffix)")
	fs.StringVar(&o.PrefixPopularity, "prefix-popularity", "uniform", "shared prefixes: how groups are picked: uniform or zipf")
	fs.Float64Var(&o.ZipfS, "zipf-s", 1.1, "shared prefixes: Zipf exponent for --prefix-popularity zipf")

	fs.StringVar(&o.Dataset, "dataset", "", "replay a dataset or trace: ShareGPT JSON, JSONL {prompt|messages, output_tokens}, Azure trace CSV, Mooncake JSONL")
	fs.StringVar(&o.DatasetFormat, "dataset-format", "auto", "dataset format: auto, sharegpt, jsonl, azure, mooncake")
	fs.StringVar(&o.OnBadLine, "on-bad-line", "stop", "malformed dataset records: stop (error naming file:line) or skip (counted, warned)")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "traces: multiply timestamps by this (0.5 replays twice as fast)")
	fs.Float64Var(&o.MaxRate, "max-rate", 0, "traces: cap the replay rate in requests/s (later requests shift; 0 = no cap)")
	fs.BoolVar(&o.IgnoreTimestamps, "ignore-timestamps", false, "traces: ignore timestamps and use --rate/--concurrency")
	fs.BoolVar(&o.LoopDataset, "loop-dataset", false, "datasets: start again at the end instead of stopping")
}

func (o *workloadOptions) changed(name string) bool {
	return o.fs != nil && o.fs.Changed(name)
}

// loadChosen reports whether the user chose the load (--rate or
// --concurrency), which then overrides a scenario's arrival process.
func (o *workloadOptions) loadChosen() bool {
	return o.changed("rate") || o.changed("concurrency")
}

// lengths validates the length flags and returns the effective minimum
// output length (--ignore-eos forces it to --max-tokens).
func (o *workloadOptions) lengths() (minTokens int, err error) {
	if o.PromptTokens < 1 {
		return 0, usageErr("--prompt-tokens must be at least 1, got %d", o.PromptTokens)
	}
	if o.MaxTokens < 1 {
		return 0, usageErr("--max-tokens must be at least 1, got %d", o.MaxTokens)
	}
	minTok := o.MinTokens
	if o.IgnoreEOS {
		if o.MinTokens != 0 && o.MinTokens != o.MaxTokens {
			return 0, usageErr("--ignore-eos forces --min-tokens to --max-tokens (%d); drop --min-tokens %d", o.MaxTokens, o.MinTokens)
		}
		minTok = o.MaxTokens
	}
	if minTok < 0 || minTok > o.MaxTokens {
		return 0, usageErr("--min-tokens %d must be between 0 and --max-tokens %d", minTok, o.MaxTokens)
	}
	return minTok, nil
}

// build returns the run's request source, its scenario (nil when none was
// chosen) and the tokenizer used to count output tokens. It reads at most
// local files and never touches the network.
// size is how many requests the workload holds: sessions × turns for a
// multi-turn one (0 otherwise), and whether it ends by itself (multi-turn,
// or a dataset that is not looped).
func (o *workloadOptions) size(sc *workload.Scenario) (turns int, finite bool) {
	switch {
	case sc != nil && sc.Session != nil:
		return sc.Session.Sessions * sc.Session.Turns, true
	case o.Sessions > 0:
		return o.Sessions * o.Turns, true
	case o.Dataset != "":
		return 0, !o.LoopDataset
	}
	return 0, false
}

// dists returns the length distributions the flags ask for: set is false
// when every length is fixed (--prompt-tokens, --max-tokens as they are).
func (o *workloadOptions) dists() (prompt, output workload.Dist, set bool, err error) {
	prompt, output = workload.FixedDist(o.PromptTokens), workload.FixedDist(o.MaxTokens)
	if o.RangeRatio != 0 {
		if o.PromptDist != "" || o.OutputDist != "" {
			return prompt, output, false, usageErr("--random-range-ratio spreads the fixed lengths; with --prompt-tokens-dist/--output-tokens-dist give the spread there")
		}
		if prompt, err = workload.RangeDist(o.PromptTokens, o.RangeRatio); err != nil {
			return prompt, output, false, usageErr("--random-range-ratio: %v", err)
		}
		if output, err = workload.RangeDist(o.MaxTokens, o.RangeRatio); err != nil {
			return prompt, output, false, usageErr("--random-range-ratio: %v", err)
		}
		set = true
	}
	if o.PromptDist != "" {
		if o.changed("prompt-tokens") {
			return prompt, output, false, usageErr("--prompt-tokens and --prompt-tokens-dist both set the prompt length; give one")
		}
		if prompt, err = workload.ParseDist(o.PromptDist); err != nil {
			return prompt, output, false, usageErr("--prompt-tokens-dist: %v", err)
		}
		set = true
	}
	if o.OutputDist != "" {
		if o.changed("max-tokens") {
			return prompt, output, false, usageErr("--max-tokens and --output-tokens-dist both set the output length; give one")
		}
		if output, err = workload.ParseDist(o.OutputDist); err != nil {
			return prompt, output, false, usageErr("--output-tokens-dist: %v", err)
		}
		set = true
	}
	if set && (o.Dataset != "" || o.SamePrompt || o.MinTokens > 0) {
		return prompt, output, false, usageErr("length distributions cannot be combined with --dataset, --same-prompt or --min-tokens (use --ignore-eos to force the drawn lengths)")
	}
	return prompt, output, set, nil
}

func (o *workloadOptions) build(env *Env) (workload.Source, *workload.Scenario, workload.Tokenizer, error) {
	tok, err := workload.LoadTokenizer(o.Tokenizer)
	if err != nil {
		return nil, nil, nil, usageErr("--tokenizer: %v", err)
	}
	minTok, err := o.lengths()
	if err != nil {
		return nil, nil, nil, err
	}
	promptDist, outputDist, distSet, err := o.dists()
	if err != nil {
		return nil, nil, nil, err
	}

	var sc *workload.Scenario
	if o.Scenario != "" {
		if sc, err = workload.LoadScenario(o.Scenario); err != nil {
			return nil, nil, nil, usageErr("--scenario: %v", err)
		}
		o.applyOverrides(sc)
		if distSet {
			if o.PromptDist != "" || o.RangeRatio != 0 {
				sc.PromptTokens = promptDist
			}
			if o.OutputDist != "" || o.RangeRatio != 0 {
				sc.OutputTokens = outputDist
			}
		}
		if err := sc.Validate(); err != nil {
			return nil, nil, nil, usageErr("--scenario %s with the given flags: %v", o.Scenario, err)
		}
	}
	label := ""
	if sc != nil {
		label = sc.Name
	}

	if o.Dataset != "" {
		if o.Sessions > 0 || o.PrefixGroups > 0 {
			return nil, nil, nil, usageErr("--dataset cannot be combined with --sessions or --prefix-groups")
		}
		policy, err := workload.ParseBadLinePolicy(o.OnBadLine)
		if err != nil {
			return nil, nil, nil, usageErr("%v", err)
		}
		ds, err := workload.LoadDataset(o.Dataset, o.DatasetFormat, policy)
		if err != nil {
			return nil, nil, nil, usageErr("--dataset: %v", err)
		}
		if ds.Unusable > 0 {
			fmt.Fprintf(env.Stderr, "ttft: dropped %d record(s) of %s with nothing to send (e.g. a conversation without a human turn)\n", ds.Unusable, ds.File)
		}
		if n := len(ds.Skipped); n > 0 {
			fmt.Fprintf(env.Stderr, "ttft: skipped %d malformed record(s) in %s; first: %v\n", n, ds.File, ds.Skipped[0])
		}
		maxOut := 0
		if o.changed("max-tokens") {
			maxOut = o.MaxTokens
		}
		src, err := workload.NewReplay(ds, workload.ReplayOptions{
			Tokenizer: tok, Seed: o.Seed, Scenario: label,
			DefaultOutput: o.MaxTokens, MaxOutput: maxOut, ForceOutput: o.IgnoreEOS,
			TimeScale: o.TimeScale, MaxRate: o.MaxRate, IgnoreTimestamps: o.IgnoreTimestamps || o.loadChosen(),
			Loop: o.LoopDataset,
		})
		if err != nil {
			return nil, nil, nil, usageErr("--dataset: %v", err)
		}
		return src, sc, tok, nil
	}

	if sc != nil {
		src, err := o.scenarioSource(sc, tok)
		if err != nil {
			return nil, nil, nil, usageErr("--scenario %s: %v", o.Scenario, err)
		}
		return src, sc, tok, nil
	}

	if o.Sessions > 0 {
		src, err := workload.NewSessions(workload.SessionOptions{
			Tokenizer: tok, Seed: o.Seed, Sessions: o.Sessions, Turns: o.Turns,
			UserTokens: promptDist, Output: outputDist,
			ForceOutput: minTok == o.MaxTokens, SystemTokens: o.SystemTokens,
			ThinkTime: o.ThinkTime, MaxActive: o.MaxActive,
		})
		if err != nil {
			return nil, nil, nil, usageErr("%v", err)
		}
		return src, nil, tok, nil
	}

	if o.PrefixGroups > 0 {
		src, err := workload.NewGenerated(workload.GenOptions{
			Tokenizer: tok, Seed: o.Seed,
			Prompt: promptDist, Output: outputDist,
			ForceOutput: minTok == o.MaxTokens,
			Prefix:      &workload.PrefixSpec{Groups: o.PrefixGroups, Tokens: o.PrefixTokens, Popularity: o.PrefixPopularity, ZipfS: o.ZipfS},
			PromptScale: o.promptScale,
		})
		if err != nil {
			return nil, nil, nil, usageErr("%v", err)
		}
		return src, nil, tok, nil
	}

	if distSet {
		// Lengths drawn per request: the generated source of scenarios,
		// without a prefix; --ignore-eos forces each drawn output length.
		src, err := workload.NewGenerated(workload.GenOptions{
			Tokenizer: tok, Seed: o.Seed, Prompt: promptDist, Output: outputDist,
			ForceOutput: o.IgnoreEOS, PromptScale: o.promptScale,
		})
		if err != nil {
			return nil, nil, nil, usageErr("%v", err)
		}
		return src, nil, tok, nil
	}

	src, err := workload.NewFixed(workload.FixedOptions{
		PromptTokens: o.PromptTokens,
		MaxTokens:    o.MaxTokens,
		MinTokens:    minTok,
		Tokenizer:    tok,
		Seed:         o.Seed,
		Chat:         true,
		SamePrompt:   o.SamePrompt,
		PromptScale:  o.promptScale,
	})
	if err != nil {
		return nil, nil, nil, usageErr("%v", err)
	}
	return src, nil, tok, nil
}

// applyOverrides lets explicit flags replace a scenario's settings.
func (o *workloadOptions) applyOverrides(sc *workload.Scenario) {
	if o.changed("prompt-tokens") {
		sc.PromptTokens = workload.FixedDist(o.PromptTokens)
	}
	if o.changed("max-tokens") {
		sc.OutputTokens = workload.FixedDist(o.MaxTokens)
	}
	if o.IgnoreEOS {
		sc.ForceOutput = true
	}
	if o.PrefixGroups > 0 {
		sc.Prefix = &workload.PrefixSpec{Groups: o.PrefixGroups, Tokens: o.PrefixTokens, Popularity: o.PrefixPopularity, ZipfS: o.ZipfS}
		sc.Session = nil
	}
	if o.Sessions > 0 {
		sc.Session = &workload.SessionSpec{Sessions: o.Sessions, Turns: o.Turns, ThinkTime: workload.Duration(o.ThinkTime), SystemTokens: o.SystemTokens}
		sc.Prefix = nil
	}
}

func (o *workloadOptions) scenarioSource(sc *workload.Scenario, tok workload.Tokenizer) (workload.Source, error) {
	arrival := sc.Arrival
	if o.loadChosen() {
		arrival = workload.ArrivalSpec{}
	}
	if ss := sc.Session; ss != nil {
		return workload.NewSessions(workload.SessionOptions{
			Tokenizer: tok, Seed: o.Seed, Scenario: sc.Name,
			Sessions: ss.Sessions, Turns: ss.Turns, ThinkTime: time.Duration(ss.ThinkTime), SystemTokens: ss.SystemTokens,
			UserTokens: sc.PromptTokens, Output: sc.OutputTokens, ForceOutput: sc.ForceOutput,
			Arrival: arrival, MaxActive: o.MaxActive,
		})
	}
	return workload.NewGenerated(workload.GenOptions{
		Tokenizer: tok, Seed: o.Seed, Scenario: sc.Name,
		Prompt: sc.PromptTokens, Output: sc.OutputTokens, ForceOutput: sc.ForceOutput,
		Prefix: sc.Prefix, Arrival: arrival, Schedule: arrival.RatePerS > 0,
		PromptScale: o.promptScale,
	})
}

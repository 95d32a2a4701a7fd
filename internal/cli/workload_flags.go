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
}

func addWorkloadFlags(fs *pflag.FlagSet, o *workloadOptions) {
	o.fs = fs
	fs.IntVar(&o.PromptTokens, "prompt-tokens", 128, "prompt length in tokens (exact, under the tokenizer)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 128, "maximum output tokens per request")
	fs.IntVar(&o.MinTokens, "min-tokens", 0, "ask the server for at least this many output tokens (vLLM min_tokens)")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false, "force every output to its full length (min_tokens = max_tokens, ignore_eos)")
	fs.StringVar(&o.Tokenizer, "tokenizer", workload.DefaultTokenizerName, "tokenizer: an embedded encoding (cl100k_base, o200k_base) or a HuggingFace tokenizer.json (or a directory holding one)")
	fs.Int64Var(&o.Seed, "seed", 1, "random seed for prompts and workload draws")
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

func (o *workloadOptions) build(env *Env) (workload.Source, *workload.Scenario, workload.Tokenizer, error) {
	tok, err := workload.LoadTokenizer(o.Tokenizer)
	if err != nil {
		return nil, nil, nil, usageErr("--tokenizer: %v", err)
	}
	minTok, err := o.lengths()
	if err != nil {
		return nil, nil, nil, err
	}

	var sc *workload.Scenario
	if o.Scenario != "" {
		if sc, err = workload.LoadScenario(o.Scenario); err != nil {
			return nil, nil, nil, usageErr("--scenario: %v", err)
		}
		o.applyOverrides(sc)
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
			UserTokens: workload.FixedDist(o.PromptTokens), Output: workload.FixedDist(o.MaxTokens),
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
			Prompt: workload.FixedDist(o.PromptTokens), Output: workload.FixedDist(o.MaxTokens),
			ForceOutput: minTok == o.MaxTokens,
			Prefix:      &workload.PrefixSpec{Groups: o.PrefixGroups, Tokens: o.PrefixTokens, Popularity: o.PrefixPopularity, ZipfS: o.ZipfS},
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
	})
}

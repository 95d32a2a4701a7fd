package cli

// STUB: replaced by the workload owner. Turns workload flags into a Source.

import (
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/workload"
)

type workloadOptions struct {
	PromptTokens int
	MaxTokens    int
}

func addWorkloadFlags(fs *pflag.FlagSet, o *workloadOptions) {
	fs.IntVar(&o.PromptTokens, "prompt-tokens", 128, "prompt length in tokens (exact, under the tokenizer)")
	fs.IntVar(&o.MaxTokens, "max-tokens", 128, "maximum output tokens per request")
}

// build returns the run's request source, its scenario (nil when none was
// chosen) and the tokenizer used to count output tokens.
func (o *workloadOptions) build(env *Env) (workload.Source, *workload.Scenario, workload.Tokenizer, error) {
	return nil, nil, nil, usageErr("workloads: not available in this build")
}

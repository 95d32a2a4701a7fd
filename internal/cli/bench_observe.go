package cli

// STUB: replaced by the telemetry owner. Adds bench's observability flags
// (--metrics-addr, server-side scraping, tracing) and builds the observers.

import (
	"context"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/bench"
)

type observeOptions struct{}

func addObserveFlags(fs *pflag.FlagSet, o *observeOptions) {}

// start builds the observers for a run against target; stop is called after
// the run with the run's context still alive, and may add to the summary's
// warnings or print a report to env.Stdout.
func (o *observeOptions) start(ctx context.Context, env *Env, target string) (obs []bench.Observer, stop func(ctx context.Context) []string, err error) {
	return nil, func(context.Context) []string { return nil }, nil
}

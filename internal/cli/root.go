package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	ExitOK    = 0
	ExitFail  = 1 // the run completed but a gate failed (error rate, SLO)
	ExitUsage = 2 // wrong flags, bad input files, unreachable target at start
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3".
var Version = "dev"

// Env is the process state a command may touch.
type Env struct {
	Args   []string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// IsTerminal reports whether Stderr is a terminal (live progress).
	IsTerminal bool
	// Executable is this program's path, for commands that run a helper
	// process of their own (bench --self-check's server); empty means run
	// such helpers in-process.
	Executable string
}

func (e *Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr marks an error as the user's (exit 2).
func usageErr(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

// failErr marks a completed run whose gate failed (exit 1).
func failErr(format string, a ...any) error {
	return &exitError{code: ExitFail, err: fmt.Errorf(format, a...)}
}

// Main runs the CLI and returns the process exit code.
func Main(ctx context.Context, env Env) int {
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	root := newRootCmd(&env)
	root.SetArgs(env.Args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetIn(env.Stdin)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(env.Stderr, "ttft:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Cobra's own flag and argument errors are usage errors.
	return ExitUsage
}

func newRootCmd(env *Env) *cobra.Command {
	root := &cobra.Command{
		Version: version(),
		Use:     "ttft",
		Short:   "Measure, simulate, route and analyse LLM time to first token",
		Long: `ttft measures the time to the first token of streaming LLM endpoints
(bench), simulates a vLLM-like serving engine (sim, plan), routes requests
to the backend most likely to meet a TTFT SLO (gateway), and analyses
results (runs, compare, report, fit, pareto, rdd).

With no --target, "ttft bench" benchmarks the built-in simulator over real
HTTP on a loopback port: no GPU, keys or network needed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// Errors print as "ttft: ..."; name the subcommand, not ttft twice.
		return usageErr("%s: %v (see '%s --help')", strings.TrimPrefix(c.CommandPath(), "ttft "), err, c.CommandPath())
	})
	root.AddCommand(newVersionCmd(env), newTimingServerCmd(env))
	for _, add := range commandConstructors {
		root.AddCommand(add(env))
	}
	nameArgErrors(root)
	return root
}

// nameArgErrors makes cobra's argument-count errors ("requires at least 1
// arg(s)") say which command they are about and where its help is.
func nameArgErrors(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageErr("%s: %v; usage: %s (see '%s --help')", strings.TrimPrefix(cmd.CommandPath(), "ttft "), err, cmd.UseLine(), cmd.CommandPath())
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		nameArgErrors(sub)
	}
}

// commandConstructors lists every top-level command but version; each lives
// in its own file so that capabilities stay apart.
var commandConstructors = []func(*Env) *cobra.Command{
	newBenchCmd,
	newSweepCmd,
	newSimCmd,
	newPlanCmd,
	newGatewayCmd,
	newRunsCmd,
	newCompareCmd,
	newReportCmd,
	newFitCmd,
	newParetoCmd,
	newRDDCmd,
	newModelCmd,
}

func newVersionCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := Version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			fmt.Fprintf(env.Stdout, "ttft %s\n", v)
			return nil
		},
	}
}

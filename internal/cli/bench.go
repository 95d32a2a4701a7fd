package cli

import "github.com/spf13/cobra"

func newBenchCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "bench", RunE: func(*cobra.Command, []string) error { return usageErr("bench: not built yet") }}
}

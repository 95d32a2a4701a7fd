package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newRunsCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "runs", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("runs: not available in this build") }}
}

func newCompareCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "compare", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("compare: not available in this build") }}
}

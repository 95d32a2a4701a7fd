package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newSweepCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "sweep", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("sweep: not available in this build") }}
}

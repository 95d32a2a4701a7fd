package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newSimCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "sim", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("sim: not available in this build") }}
}

func newPlanCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "plan", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("plan: not available in this build") }}
}

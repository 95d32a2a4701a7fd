package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newModelCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "model", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("model: not available in this build") }}
}

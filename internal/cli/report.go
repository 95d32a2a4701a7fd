package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newReportCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "report", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("report: not available in this build") }}
}

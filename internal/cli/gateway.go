package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newGatewayCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "gateway", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("gateway: not available in this build") }}
}

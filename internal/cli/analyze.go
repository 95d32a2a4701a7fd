package cli

// STUB: replaced by the owner of this capability.

import "github.com/spf13/cobra"

func newFitCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "fit", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("fit: not available in this build") }}
}

func newParetoCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "pareto", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("pareto: not available in this build") }}
}

func newRDDCmd(env *Env) *cobra.Command {
	return &cobra.Command{Use: "rdd", Hidden: true, RunE: func(*cobra.Command, []string) error { return usageErr("rdd: not available in this build") }}
}

package cli

// ttft sim session: one multi-turn conversation served back to back on an
// otherwise idle replica under a KV retention policy (the isolated-session
// model, sim.Deployment.SimulateSession) — the article's §3.3 table without
// writing Go. Load effects come from 'ttft sim run' with --sessions.

import (
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/stats"
)

// simSessionTurn is one row of the table and of --json.
type simSessionTurn struct {
	Turn      int     `json:"turn"`
	History   int     `json:"history_tokens"`
	Attended  int     `json:"attended_tokens"`
	Prefilled int     `json:"prefilled_tokens"`
	TTFTMs    float64 `json:"ttft_ms"`
	Held      float64 `json:"held_tokens"`
	// KV bytes of the session after the turn, over the whole tensor-parallel
	// group and per GPU.
	SessionKVBytes       float64 `json:"session_kv_bytes"`
	SessionKVBytesPerGPU float64 `json:"session_kv_bytes_per_gpu"`
}

// simSessionReport is --json's document.
type simSessionReport struct {
	Deployment string           `json:"deployment"`
	Model      string           `json:"model"`
	GPU        string           `json:"gpu"`
	TP         int              `json:"tensor_parallel_size"`
	Policy     string           `json:"kv_retention"`
	Turns      []simSessionTurn `json:"turns"`
	// P95TTFTMs is the 95th percentile over the turns' TTFTs (stats.Quantile,
	// as every P95 ttft prints);
	// DriftPct turn N's TTFT against turn 1's.
	P95TTFTMs float64 `json:"p95_ttft_ms"`
	DriftPct  float64 `json:"drift_pct"`
}

func newSimSessionCmd(env *Env) *cobra.Command {
	var (
		dep           simDeployFlags
		turns, system int
		user, output  []int
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "session",
		Short: "One multi-turn conversation on an idle replica under a KV retention policy (per-turn TTFT and session KV)",
		Long: `Serves one conversation's turns back to back (batch 1, no queueing) under a
KV retention policy and prints, per turn: the history before it, the KV
entries its new tokens attend to, the tokens prefilled, TTFT, and the KV
the session holds afterwards. It reproduces the article's §3.3 table; for
the same policies under load use 'ttft sim run --sessions N --kv-retention'.
The simulator models bytes and FLOPs only: what a policy costs in answer
quality is out of its reach.`,
		Example: `  ttft sim session --model llama-3-70b --gpu a100-80gb --tensor-parallel-size 4 \
      --kv-retention evict:0.3 --turns 10 --user-tokens 400 --output-tokens 240
  ttft sim session --kv-retention sliding:2048 --user-tokens 300,500,200 --output-tokens 240 --turns 3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if turns <= 0 {
				return usageErr("--turns must be at least 1, got %d", turns)
			}
			if system < 0 {
				return usageErr("--system-tokens must not be negative, got %d", system)
			}
			us, err := perTurn("--user-tokens", user, turns, 1)
			if err != nil {
				return err
			}
			outs, err := perTurn("--output-tokens", output, turns, 0)
			if err != nil {
				return err
			}
			cfg, cat, err := dep.build()
			if err != nil {
				return err
			}
			name := cfg.KVRetention
			if name == "" {
				name = "full"
			}
			pol, err := sim.ParseRetention(name)
			if err != nil {
				return usageErr("--kv-retention: %v", err)
			}
			// The session model applies the policy itself; the deployment is
			// resolved without one.
			cfg.KVRetention = ""
			d, err := sim.Resolve(cat, cfg)
			if err != nil {
				return usageErr("%v", err)
			}
			specs := make([]sim.TurnSpec, turns)
			for i := range specs {
				specs[i] = sim.TurnSpec{UserTokens: us[i], OutputTokens: outs[i]}
			}
			specs[0].UserTokens += system
			res, err := d.SimulateSession(pol, specs)
			if err != nil {
				return usageErr("%v", err)
			}
			rep := simSessionReport{Deployment: d.Name(), Model: d.Model.Name, GPU: d.GPU.Name, TP: d.TP, Policy: pol.String()}
			ttfts := make([]float64, len(res))
			for i, r := range res {
				ms := float64(r.TTFT) / float64(time.Millisecond)
				ttfts[i] = ms
				rep.Turns = append(rep.Turns, simSessionTurn{Turn: r.Turn, History: r.History, Attended: r.Attended, Prefilled: r.Prefilled,
					TTFTMs: ms, Held: r.HeldTokens, SessionKVBytes: r.SessionKVBytes * float64(d.TP), SessionKVBytesPerGPU: r.SessionKVBytes})
			}
			rep.DriftPct = 100 * (ttfts[len(ttfts)-1]/ttfts[0] - 1)
			slices.Sort(ttfts)
			rep.P95TTFTMs = stats.Quantile(ttfts, 0.95)
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(env.Stdout, "# %s, kv retention %s, %d turns, one session on an idle replica (batch 1)\n", rep.Deployment, rep.Policy, turns)
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "turn\thistory\tattended\tprefilled\tTTFT ms\theld tokens\tsession KV MB\t")
			for _, t := range rep.Turns {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.0f\t%.1f\t\n", t.Turn, t.History, t.Attended, t.Prefilled, t.TTFTMs, t.Held, t.SessionKVBytes/1e6)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			last := rep.Turns[len(rep.Turns)-1]
			fmt.Fprintf(env.Stdout, "P95 TTFT over the %d turns %.1f ms; turn %d vs turn 1 %+.0f%%; session KV after the last turn %.2f GB (%d GPU(s), %.2f GB each)\n",
				turns, rep.P95TTFTMs, turns, rep.DriftPct, last.SessionKVBytes/1e9, d.TP, last.SessionKVBytesPerGPU/1e9)
			fmt.Fprintln(env.Stdout, "Quality loss of the policy is out of the simulator's reach (it models bytes and FLOPs, not attention outputs).")
			return nil
		},
	}
	fs := cmd.Flags()
	dep.add(fs)
	// The deployment flags' --kv-retention is the session's policy here.
	fs.Lookup("kv-retention").Usage = "the session's KV retention policy: full (default: the whole history cached), none (re-prefill the history every turn), sliding:W (keep and attend to the last W tokens), compress:R (each turn's KV compressed to 1/R of its entries) or evict:F (drop the fraction F of held KV after every turn)"
	fs.IntVar(&turns, "turns", 10, "turns in the conversation")
	fs.IntSliceVar(&user, "user-tokens", []int{400}, "new prompt tokens per turn (the user message and its template): one value for every turn, or one per turn separated by commas")
	fs.IntSliceVar(&output, "output-tokens", []int{240}, "reply tokens per turn: one value for every turn, or one per turn")
	fs.IntVar(&system, "system-tokens", 0, "system prompt tokens, added to the first turn")
	fs.BoolVar(&asJSON, "json", false, "print the turns and summary as JSON")
	return cmd
}

// perTurn expands a one-value-or-one-per-turn flag, checking each value is
// at least least.
func perTurn(flag string, vals []int, turns, least int) ([]int, error) {
	if len(vals) != 1 && len(vals) != turns {
		return nil, usageErr("%s takes one value or one per turn (%d), got %d", flag, turns, len(vals))
	}
	out := make([]int, turns)
	for i := range out {
		v := vals[0]
		if len(vals) > 1 {
			v = vals[i]
		}
		if v < least {
			if least == 0 {
				return nil, usageErr("%s must not be negative, got %d", flag, v)
			}
			return nil, usageErr("%s must be at least %d, got %d", flag, least, v)
		}
		out[i] = v
	}
	return out, nil
}

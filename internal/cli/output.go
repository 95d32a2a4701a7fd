package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// printSummary renders a run in the spirit of the source article's table.
func printSummary(w io.Writer, s *record.Summary, m *record.Manifest, dir string) {
	fmt.Fprintf(w, "\n%s  model %s  api %s\n", s.Target, s.Model, s.API)
	fmt.Fprintf(w, "requests: %d completed, %d failed", s.Requests.Completed, s.Requests.Failed)
	if s.Requests.Warmup > 0 {
		fmt.Fprintf(w, " (+%d warm-up)", s.Requests.Warmup)
	}
	fmt.Fprintf(w, " in %.2f s\n\n", s.DurationS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric (ms)\tmean\tstd\tp50\tp90\tp95\tp99\tp99.9\tmax\tp95 95% CI\t")
	row := func(name string, mt record.Metric) {
		if mt.Count == 0 {
			return
		}
		ci := ""
		if c, ok := mt.CI95["p95"]; ok {
			ci = fmt.Sprintf("%s–%s", num(c[0]), num(c[1]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, num(mt.Mean), num(mt.Std), num(mt.P50), num(mt.P90), num(mt.P95), num(mt.P99), num(mt.P999), num(mt.Max), ci)
	}
	row("TTFT", s.TTFT)
	if s.TTFTIntended.Count > 0 && s.ScheduleLag.Count > 0 && s.ScheduleLag.Max > 0 {
		row("TTFT from schedule", s.TTFTIntended)
	}
	row("time to first byte", s.TTFB)
	row("time to first content", s.TTFC)
	row("ITL", s.ITL)
	row("TPOT", s.TPOT)
	row("end to end", s.E2E)
	if s.ScheduleLag.Max > 0 {
		row("schedule lag", s.ScheduleLag)
	}
	row("connect", s.Connect)
	row("client read delay", s.ReadDelay) // not in TTFT: see the README
	tw.Flush()
	t := s.Throughput
	fmt.Fprintf(w, "\nthroughput: %.2f req/s, %.1f output tok/s, %.1f input tok/s\n", t.RequestsPerS, t.OutputTokensPerS, t.InputTokensPerS)
	tk := s.Tokens
	fmt.Fprintf(w, "tokens: prompt %d (server: %d, cached %d); output %d by usage, %d by tokenizer, %d events\n",
		tk.Prompt, tk.PromptUsage, tk.CachedPrompt, tk.OutputUsage, tk.OutputTokenizer, tk.OutputEvents)
	if len(s.Requests.Errors) > 0 {
		keys := make([]string, 0, len(s.Requests.Errors))
		for k := range s.Requests.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, s.Requests.Errors[k])
		}
		fmt.Fprintf(w, "errors: %s\n", strings.Join(parts, ", "))
		for _, k := range keys {
			if msg := s.Requests.FirstErrors[k]; msg != "" {
				if r := []rune(msg); len(r) > 300 {
					msg = string(r[:300]) + "…"
				}
				fmt.Fprintf(w, "  first %s: %s\n", k, msg)
			}
		}
	}
	printVerdicts(w, s)
	for _, warn := range s.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if dir != "" {
		fmt.Fprintf(w, "\nresults: %s\n", dir)
	}
}

// printVerdicts writes a scenario's SLO verdicts and goodput (nothing
// without SLOs).
func printVerdicts(w io.Writer, s *record.Summary) {
	if len(s.SLO) == 0 {
		if g := s.Goodput; g != nil { // --goodput without a scenario
			fmt.Fprintf(w, "\ngoodput %.2f req/s meeting every --goodput objective (attainment %.1f%%)\n", g.RequestsPerS, 100*g.Attainment)
		}
		return
	}
	fmt.Fprintf(w, "\nSLO verdicts (scenario %s):\n", s.Scenario)
	for _, v := range s.SLO {
		verdict := "PASS"
		if !v.Pass {
			verdict = "FAIL"
		}
		basis := ""
		if v.Basis != "" {
			basis = " " + record.BasisText(v.Basis)
		}
		fmt.Fprintf(w, "  %s  %-10s %s %s ≤ %s ms: measured %s ms%s (95%% CI %s–%s), margin %s ms\n",
			verdict, v.Name, v.Metric, v.Statistic, num(v.LimitMs), num(v.ValueMs), basis, num(v.CI95[0]), num(v.CI95[1]), num(v.MarginMs))
	}
	if g := s.Goodput; g != nil {
		fmt.Fprintf(w, "  goodput %.2f req/s meeting every SLO (attainment %.1f%%)\n", g.RequestsPerS, 100*g.Attainment)
	}
}

// num formats milliseconds like every other ttft table.
func num(x float64) string { return stats.FormatMs(x) }

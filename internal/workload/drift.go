package workload

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// ClockedSource is a source whose At offsets depend on when the run started
// (multi-turn sessions schedule the next turn from the previous reply's end).
// Runners call SetOrigin at the start of each phase with the time on the
// clock that Result.End uses.
type ClockedSource interface {
	Source
	SetOrigin(t time.Time)
}

var _ ClockedSource = (*Sessions)(nil)

// TurnStat is TTFT and prefix-cache evidence at one turn index of multi-turn
// sessions: the drift curve (the article sees 82 ms at turn 1 rising to
// 137 ms at turn 10 as history grows).
type TurnStat struct {
	Turn     int     `json:"turn"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	TTFTP50  float64 `json:"ttft_p50_ms"`
	TTFTP95  float64 `json:"ttft_p95_ms"`
	// PromptTokens is the mean prompt length (history grows with turns);
	// CachedShare the fraction of prompt tokens the server reported as
	// served from its prefix cache, over requests that reported usage
	// (-1 when none did).
	PromptTokens float64 `json:"prompt_tokens_mean"`
	CachedShare  float64 `json:"cached_share"`
}

// TurnDrift groups measured records by turn index. Records without a turn
// (not from sessions) are ignored; it returns nil when there are none.
func TurnDrift(recs []record.Record) []TurnStat {
	type acc struct {
		ttft                   []float64
		n, failed              int
		prompt                 float64
		usagePrompt, usageHits int
	}
	by := map[int]*acc{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.Turn <= 0 {
			continue
		}
		a := by[r.Turn]
		if a == nil {
			a = &acc{}
			by[r.Turn] = a
		}
		a.n++
		if !r.OK() {
			a.failed++
			continue
		}
		if r.TTFTMs > 0 {
			a.ttft = append(a.ttft, r.TTFTMs)
		}
		a.prompt += float64(r.PromptTokens)
		if r.PromptTokensUsage > 0 {
			a.usagePrompt += r.PromptTokensUsage
			a.usageHits += r.CachedPromptTokens
		}
	}
	if len(by) == 0 {
		return nil
	}
	var out []TurnStat
	for turn, a := range by {
		s := TurnStat{Turn: turn, Requests: a.n, Failed: a.failed, CachedShare: -1}
		if ok := a.n - a.failed; ok > 0 {
			s.PromptTokens = a.prompt / float64(ok)
		}
		if len(a.ttft) > 0 {
			slices.Sort(a.ttft)
			s.TTFTP50 = stats.Quantile(a.ttft, 0.5)
			s.TTFTP95 = stats.Quantile(a.ttft, 0.95)
		}
		if a.usagePrompt > 0 {
			s.CachedShare = float64(a.usageHits) / float64(a.usagePrompt)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b TurnStat) int { return a.Turn - b.Turn })
	return out
}

// PrintTurnDrift writes the drift table, with each turn's P50 relative to
// turn 1's.
func PrintTurnDrift(w io.Writer, ts []TurnStat) {
	if len(ts) == 0 {
		return
	}
	base := ts[0].TTFTP50
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "turn\trequests\tfailed\tprompt tokens\tTTFT p50 ms\tvs turn 1\tTTFT p95 ms\tcached prompt")
	for _, s := range ts {
		rel, cached := "", "n/a"
		if base > 0 {
			rel = fmt.Sprintf("%+.0f%%", (s.TTFTP50/base-1)*100)
		}
		if s.CachedShare >= 0 {
			cached = fmt.Sprintf("%.0f%%", 100*s.CachedShare)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%.1f\t%s\t%.1f\t%s\n", s.Turn, s.Requests, s.Failed, s.PromptTokens, s.TTFTP50, rel, s.TTFTP95, cached)
	}
	_ = tw.Flush()
}

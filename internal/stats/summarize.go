package stats

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/ttft-dev/ttft/internal/record"
)

// SummaryOptions labels and tunes Summarize.
type SummaryOptions struct {
	Source, Target, API, Model, Scenario string
	// Seed for the bootstrap; fixed so a summary is reproducible.
	Seed int64
	// NoCI skips confidence intervals (sweeps of many points, quick views).
	NoCI bool
	// MaxITLSamples bounds the raw inter-token gaps kept; beyond it a
	// DDSketch (1% relative accuracy) stands in. Default 5,000,000.
	MaxITLSamples int
	// LagWarnMs is the P99 schedule lag above which the summary warns that
	// the client could not keep the schedule (also at least a fifth of the
	// TTFT P50). Default 10 ms: below it is the timer and scheduler jitter
	// of a busy client, which neither thins the load nor hides from the
	// verdicts.
	LagWarnMs float64
	// OpenLoop says the run was sent on a schedule, so its judged TTFT is
	// from the intended send time (TTFTBasis). A run whose requests were
	// sent after their intended times is taken as one anyway.
	OpenLoop bool
}

// Summarize reduces records to a run summary. Warm-up records are counted
// but excluded from every statistic.
func Summarize(recs []record.Record, opt SummaryOptions) record.Summary {
	if opt.MaxITLSamples <= 0 {
		opt.MaxITLSamples = 5_000_000
	}
	if opt.LagWarnMs <= 0 {
		opt.LagWarnMs = 10
	}
	s := record.Summary{
		Schema: record.SummarySchema, Source: opt.Source, Target: opt.Target,
		API: opt.API, Model: opt.Model, Scenario: opt.Scenario,
	}
	var ttft, ttftInt, ttfb, ttfe, ttfc, tpot, e2e, lag, connect, itl, readDelay []float64
	var itlSketch *ddsketch.DDSketch
	itlCount := 0
	var first, last time.Time
	var inTok, outTok int
	errs := map[string]int{}
	firstErrs := map[string]string{}
	notStreamed := 0
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			s.Requests.Warmup++
			continue
		}
		s.Requests.Total++
		start := r.Sent
		if !r.Intended.IsZero() && r.Intended.Before(start) {
			start = r.Intended
		}
		if !start.IsZero() && (first.IsZero() || start.Before(first)) {
			first = start
		}
		if r.End.After(last) {
			last = r.End
		}
		if r.ScheduleLagMs > 0 || !r.Intended.IsZero() {
			lag = append(lag, r.ScheduleLagMs)
		}
		if r.ArrivalClock == record.ClockKernel && !r.FirstToken.IsZero() {
			readDelay = append(readDelay, r.FirstTokenReadDelayMs)
		}
		if r.ConnectMs > 0 {
			connect = append(connect, r.ConnectMs)
		}
		if !r.OK() {
			s.Requests.Failed++
			errs[r.ErrorClass]++
			if _, seen := firstErrs[r.ErrorClass]; !seen && r.Error != "" {
				firstErrs[r.ErrorClass] = r.Error
			}
			continue
		}
		s.Requests.Completed++
		if r.NotStreamed {
			notStreamed++
		}
		ttft = append(ttft, r.TTFTMs)
		if r.TTFTIntendedMs > 0 {
			ttftInt = append(ttftInt, r.TTFTIntendedMs)
		}
		appendPos(&ttfb, r.TTFBMs)
		appendPos(&ttfe, r.TTFEMs)
		appendPos(&ttfc, r.TTFCMs)
		appendPos(&e2e, r.E2EMs)
		appendPos(&tpot, r.TPOTMs)
		for _, g := range r.ITLMs {
			itlCount++
			if itlSketch == nil && len(itl) < opt.MaxITLSamples {
				itl = append(itl, g)
				continue
			}
			if itlSketch == nil {
				itlSketch, _ = ddsketch.NewDefaultDDSketch(0.01)
				for _, x := range itl {
					_ = itlSketch.Add(math.Max(x, 1e-9))
				}
				itl = nil
			}
			_ = itlSketch.Add(math.Max(g, 1e-9))
		}
		inTok += r.InputTokens()
		outTok += r.OutputTokens()
		tokens(&s.Tokens, r)
	}
	if len(errs) > 0 {
		s.Requests.Errors = errs
	}
	if len(firstErrs) > 0 {
		s.Requests.FirstErrors = firstErrs
	}
	s.Started, s.Ended = first, last
	if !first.IsZero() && last.After(first) {
		s.DurationS = last.Sub(first).Seconds()
		s.Throughput = record.Throughput{
			RequestsPerS:     float64(s.Requests.Completed) / s.DurationS,
			OutputTokensPerS: float64(outTok) / s.DurationS,
			InputTokensPerS:  float64(inTok) / s.DurationS,
			TotalTokensPerS:  float64(inTok+outTok) / s.DurationS,
		}
	}
	d := func(xs []float64, salt int64) record.Metric {
		return Describe(xs, DescribeOptions{CI: !opt.NoCI, Seed: opt.Seed + salt})
	}
	s.TTFT = d(ttft, 1)
	s.TTFTIntended = d(ttftInt, 2)
	s.TTFB = d(ttfb, 3)
	s.TTFE = d(ttfe, 4)
	s.TTFC = d(ttfc, 5)
	s.TPOT = d(tpot, 6)
	s.E2E = d(e2e, 7)
	s.ScheduleLag = d(lag, 8)
	s.TTFTBasis = record.BasisSent
	if opt.OpenLoop || s.ScheduleLag.Max > 0 {
		s.TTFTBasis = record.BasisIntended
	}
	s.Connect = d(connect, 9)
	if len(readDelay) > 0 {
		s.ReadDelay = Describe(readDelay, DescribeOptions{})
	}
	if itlSketch != nil {
		s.ITL = sketchMetric(itlSketch, itlCount)
		s.Warnings = append(s.Warnings, fmt.Sprintf("ITL statistics come from a DDSketch (1%% relative accuracy): %d gaps exceed the raw-sample limit", itlCount))
	} else {
		s.ITL = d(itl, 10)
	}
	s.Warnings = append(s.Warnings, tokenWarnings(s.Tokens, s.Requests.Completed)...)
	if notStreamed > 0 {
		s.Warnings = append(s.Warnings, fmt.Sprintf("%d requests were answered with one JSON body instead of a stream: their TTFT equals their end-to-end latency", notStreamed))
	}
	// Lateness worth a warning is lateness that changes what was measured:
	// above the floor and a fifth of the median TTFT (a few ms of jitter on
	// a 2 s TTFT changes nothing). Verdicts count it either way.
	if lagWarn := max(opt.LagWarnMs, 0.2*s.TTFT.P50); s.ScheduleLag.Count > 0 && s.ScheduleLag.P99 > lagWarn {
		s.Warnings = append(s.Warnings, fmt.Sprintf(
			"schedule lag P99 %.1f ms: the client sent late (CPU-bound or concurrency cap), so the server saw less load than asked; TTFT from the intended send time, which the verdicts judge, counts the lateness", s.ScheduleLag.P99))
	}
	if s.ReadDelay.Count > 0 && s.ReadDelay.P99 > opt.LagWarnMs {
		s.Warnings = append(s.Warnings, fmt.Sprintf(
			"the client read first tokens %.1f ms (P99) after they arrived: it is short of CPU. TTFT and ITL are timed by the kernel's receive timestamps and stay exact, but a busier client will fall behind its schedule", s.ReadDelay.P99))
	}
	return s
}

func appendPos(xs *[]float64, v float64) {
	if v > 0 {
		*xs = append(*xs, v)
	}
}

func tokens(t *record.Tokens, r *record.Record) {
	t.Prompt += r.PromptTokens
	t.PromptUsage += r.PromptTokensUsage
	t.CachedPrompt += r.CachedPromptTokens
	t.OutputUsage += r.OutputTokensUsage
	t.OutputTokenizer += r.OutputTokensTokenizer
	t.OutputEvents += r.OutputEvents
	if r.OutputTokensUsage > 0 {
		t.RequestsWithUsage++
		if r.OutputTokensTokenizer > 0 && absInt(r.OutputTokensUsage-r.OutputTokensTokenizer) > 1 {
			t.UsageMismatches++
		}
		if r.OutputEvents < r.OutputTokensUsage {
			t.EventsBelowUsage++
		}
	}
	// A chat template adds a few tokens to every prompt (the built-in
	// simulator one newline per message, Llama-3's template about ten):
	// only a difference beyond that says the prompts are not the length
	// the run meant, e.g. the server uses another tokenizer.
	if d := absInt(r.PromptTokensUsage - r.PromptTokens); r.PromptTokensUsage > 0 && r.PromptTokens > 0 && d > 2 && float64(d) > 0.1*float64(r.PromptTokens) {
		t.PromptMismatches++
	}
}

func tokenWarnings(t record.Tokens, completed int) []string {
	var w []string
	if completed > 0 && t.RequestsWithUsage == 0 {
		w = append(w, "the server reported no token usage: output tokens are counted with the offline tokenizer")
	}
	if t.UsageMismatches > 0 {
		w = append(w, fmt.Sprintf("%d requests: server usage and the offline tokenizer disagree on output tokens by more than 1 (different tokenizer?)", t.UsageMismatches))
	}
	if t.EventsBelowUsage > 0 {
		w = append(w, fmt.Sprintf("%d requests: fewer stream events than output tokens (the server sends several tokens per event, so ITL is per event)", t.EventsBelowUsage))
	}
	if t.PromptMismatches > 0 {
		w = append(w, fmt.Sprintf("%d requests: the server counted a prompt length more than 10%% off the intended one (another tokenizer? pass the model's tokenizer.json with --tokenizer)", t.PromptMismatches))
	}
	return w
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sketchMetric(sk *ddsketch.DDSketch, n int) record.Metric {
	q := func(p float64) float64 { v, _ := sk.GetValueAtQuantile(p); return v }
	mn, _ := sk.GetMinValue()
	mx, _ := sk.GetMaxValue()
	return record.Metric{
		Count: n, Mean: sk.GetSum() / sk.GetCount(), Min: mn, Max: mx,
		P50: q(.5), P90: q(.9), P95: q(.95), P99: q(.99), P999: q(.999),
	}
}

// sortedCopy returns a sorted copy of xs without NaNs.
func sortedCopy(xs []float64) []float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	slices.Sort(s)
	return s
}

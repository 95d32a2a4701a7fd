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
	a := summaryAcc{maxITL: opt.MaxITLSamples, errs: map[string]int{}, firstErrs: map[string]string{}}
	for i := range recs {
		a.add(&s, &recs[i])
	}
	a.window(&s)
	a.describe(&s, opt)
	s.TTFTBasis = record.BasisSent
	if opt.OpenLoop || s.ScheduleLag.Max > 0 {
		s.TTFTBasis = record.BasisIntended
	}
	s.Warnings = append(s.Warnings, a.warnings(&s, opt)...)
	return s
}

// summaryAcc gathers the measured records' values for Summarize.
type summaryAcc struct {
	ttft, ttftInt, ttfb, ttfe, ttfc, tpot, e2e, lag, connect, itl, readDelay []float64
	itlSketch                                                                *ddsketch.DDSketch
	itlCount, maxITL                                                         int
	first, last                                                              time.Time
	inTok, outTok                                                            int
	errs                                                                     map[string]int
	firstErrs                                                                map[string]string
	notStreamed                                                              int
}

// add counts one record into s's request counts and tokens, and keeps its
// values.
func (a *summaryAcc) add(s *record.Summary, r *record.Record) {
	if r.Warmup {
		s.Requests.Warmup++
		return
	}
	s.Requests.Total++
	start := r.Sent
	if !r.Intended.IsZero() && r.Intended.Before(start) {
		start = r.Intended
	}
	if !start.IsZero() && (a.first.IsZero() || start.Before(a.first)) {
		a.first = start
	}
	if r.End.After(a.last) {
		a.last = r.End
	}
	if r.ScheduleLagMs > 0 || !r.Intended.IsZero() {
		a.lag = append(a.lag, r.ScheduleLagMs)
	}
	if r.ArrivalClock == record.ClockKernel && !r.FirstToken.IsZero() {
		a.readDelay = append(a.readDelay, r.FirstTokenReadDelayMs)
	}
	if r.ConnectMs > 0 {
		a.connect = append(a.connect, r.ConnectMs)
	}
	if !r.OK() {
		s.Requests.Failed++
		a.errs[r.ErrorClass]++
		if _, seen := a.firstErrs[r.ErrorClass]; !seen && r.Error != "" {
			a.firstErrs[r.ErrorClass] = r.Error
		}
		return
	}
	s.Requests.Completed++
	if r.NotStreamed {
		a.notStreamed++
	}
	a.ttft = append(a.ttft, r.TTFTMs)
	if r.TTFTIntendedMs > 0 {
		a.ttftInt = append(a.ttftInt, r.TTFTIntendedMs)
	}
	appendPos(&a.ttfb, r.TTFBMs)
	appendPos(&a.ttfe, r.TTFEMs)
	appendPos(&a.ttfc, r.TTFCMs)
	appendPos(&a.e2e, r.E2EMs)
	appendPos(&a.tpot, r.TPOTMs)
	for _, g := range r.ITLMs {
		a.addGap(g)
	}
	a.inTok += r.InputTokens()
	a.outTok += r.OutputTokens()
	tokens(&s.Tokens, r)
}

// addGap keeps an inter-token gap: raw up to maxITL, then in a DDSketch.
func (a *summaryAcc) addGap(g float64) {
	a.itlCount++
	if a.itlSketch == nil && len(a.itl) < a.maxITL {
		a.itl = append(a.itl, g)
		return
	}
	if a.itlSketch == nil {
		a.itlSketch, _ = ddsketch.NewDefaultDDSketch(0.01)
		for _, x := range a.itl {
			_ = a.itlSketch.Add(math.Max(x, 1e-9))
		}
		a.itl = nil
	}
	_ = a.itlSketch.Add(math.Max(g, 1e-9))
}

// window sets the measured window, the error counts and the throughput.
func (a *summaryAcc) window(s *record.Summary) {
	if len(a.errs) > 0 {
		s.Requests.Errors = a.errs
	}
	if len(a.firstErrs) > 0 {
		s.Requests.FirstErrors = a.firstErrs
	}
	s.Started, s.Ended = a.first, a.last
	if !a.first.IsZero() && a.last.After(a.first) {
		s.DurationS = a.last.Sub(a.first).Seconds()
		s.Throughput = record.Throughput{
			RequestsPerS:     float64(s.Requests.Completed) / s.DurationS,
			OutputTokensPerS: float64(a.outTok) / s.DurationS,
			InputTokensPerS:  float64(a.inTok) / s.DurationS,
			TotalTokensPerS:  float64(a.inTok+a.outTok) / s.DurationS,
		}
	}
}

// describe sets every latency's statistics (the bootstrap seeded per
// metric, so a summary is reproducible).
func (a *summaryAcc) describe(s *record.Summary, opt SummaryOptions) {
	d := func(xs []float64, salt int64) record.Metric {
		return Describe(xs, DescribeOptions{CI: !opt.NoCI, Seed: opt.Seed + salt})
	}
	s.TTFT = d(a.ttft, 1)
	s.TTFTIntended = d(a.ttftInt, 2)
	s.TTFB = d(a.ttfb, 3)
	s.TTFE = d(a.ttfe, 4)
	s.TTFC = d(a.ttfc, 5)
	s.TPOT = d(a.tpot, 6)
	s.E2E = d(a.e2e, 7)
	s.ScheduleLag = d(a.lag, 8)
	s.Connect = d(a.connect, 9)
	if len(a.readDelay) > 0 {
		s.ReadDelay = Describe(a.readDelay, DescribeOptions{})
	}
	if a.itlSketch != nil {
		s.ITL = sketchMetric(a.itlSketch, a.itlCount)
	} else {
		s.ITL = d(a.itl, 10)
	}
}

// warnings say what makes the summary's figures less than they seem.
func (a *summaryAcc) warnings(s *record.Summary, opt SummaryOptions) []string {
	var w []string
	if a.itlSketch != nil {
		w = append(w, fmt.Sprintf("ITL statistics come from a DDSketch (1%% relative accuracy): %d gaps exceed the raw-sample limit", a.itlCount))
	}
	w = append(w, tokenWarnings(s.Tokens, s.Requests.Completed)...)
	if a.notStreamed > 0 {
		w = append(w, fmt.Sprintf("%d requests were answered with one JSON body instead of a stream: their TTFT equals their end-to-end latency", a.notStreamed))
	}
	// Lateness worth a warning is lateness that changes what was measured:
	// above the floor and a fifth of the median TTFT (a few ms of jitter on
	// a 2 s TTFT changes nothing). Verdicts count it either way.
	if lagWarn := max(opt.LagWarnMs, 0.2*s.TTFT.P50); s.ScheduleLag.Count > 0 && s.ScheduleLag.P99 > lagWarn {
		w = append(w, fmt.Sprintf(
			"schedule lag P99 %.1f ms: the client sent late (CPU-bound or concurrency cap), so the server saw less load than asked; TTFT from the intended send time, which the verdicts judge, counts the lateness", s.ScheduleLag.P99))
	}
	if s.ReadDelay.Count > 0 && s.ReadDelay.P99 > opt.LagWarnMs {
		w = append(w, fmt.Sprintf(
			"the client read first tokens %.1f ms (P99) after they arrived: it is short of CPU. TTFT and ITL are timed by the kernel's receive timestamps and stay exact, but a busier client will fall behind its schedule", s.ReadDelay.P99))
	}
	return w
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

package record

import "time"

// SummarySchema versions summary.json. Bump the minor part for added fields,
// the major part for renamed or removed ones.
const SummarySchema = "ttft.summary/v1.2"

// Metric is the distribution of one latency (milliseconds) or count.
type Metric struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Std   float64 `json:"std"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99_9"`
	// CI95 holds bootstrap 95% confidence intervals keyed by statistic
	// ("mean", "p50", "p90", "p95", "p99", "p99_9"): [low, high].
	CI95 map[string][2]float64 `json:"ci95,omitempty"`
}

// Requests counts what happened to the measured requests.
type Requests struct {
	Total     int            `json:"total"`
	Completed int            `json:"completed"`
	Failed    int            `json:"failed"`
	Warmup    int            `json:"warmup"`
	Errors    map[string]int `json:"errors_by_class,omitempty"`
	// FirstErrors is the first failed request's error message per class,
	// so that a failed run says why without opening requests.jsonl.
	FirstErrors map[string]string `json:"first_error_by_class,omitempty"`
}

// Throughput over the measured window (first send to last end).
type Throughput struct {
	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	InputTokensPerS  float64 `json:"input_tokens_per_s"`
	TotalTokensPerS  float64 `json:"total_tokens_per_s"`
}

// Tokens totals token counts and flags disagreements between the three ways
// output is counted.
type Tokens struct {
	Prompt          int `json:"prompt"`
	PromptUsage     int `json:"prompt_usage"`
	CachedPrompt    int `json:"cached_prompt"`
	OutputUsage     int `json:"output_usage"`
	OutputTokenizer int `json:"output_tokenizer"`
	OutputEvents    int `json:"output_events"`
	UsageMismatches int `json:"usage_vs_tokenizer_mismatches"`
	// PromptMismatches counts requests whose server-counted prompt is
	// more than 10% (and 2 tokens) off the intended length: more than a
	// chat template adds.
	PromptMismatches  int `json:"prompt_usage_mismatches"`
	RequestsWithUsage int `json:"requests_with_usage"`
	EventsBelowUsage  int `json:"events_below_usage"`
}

// Output is the best output-token total, in Record.OutputTokens' order
// applied to the totals: usage when any was reported, else the tokenizer's
// count, else the token events.
func (t *Tokens) Output() int { return bestOutput(t.OutputUsage, t.OutputTokenizer, t.OutputEvents) }

// Input is the best prompt-token total, in Record.InputTokens' order applied
// to the totals: usage when any was reported, else the intended count.
func (t *Tokens) Input() int { return bestInput(t.PromptUsage, t.Prompt) }

// Where a judged TTFT starts (Summary.TTFTBasis, SLOVerdict.Basis).
const (
	BasisIntended = "intended" // the schedule's intended send time
	BasisSent     = "sent"     // the request's send
)

// BasisText is a basis in words, for verdict lines and captions.
func BasisText(basis string) string {
	if basis == BasisIntended {
		return "from the intended send time"
	}
	return "from the send"
}

// JudgedTTFT is the TTFT distribution that verdicts, comparisons and
// reports judge: from the intended send time (Record.JudgedTTFTMs), which
// equals TTFT from the send in a closed loop. Summaries without it (older
// files) fall back to TTFT.
func (s *Summary) JudgedTTFT() Metric {
	if s.TTFTIntended.Count > 0 {
		return s.TTFTIntended
	}
	return s.TTFT
}

// SLOVerdict is the outcome of one service-level objective.
type SLOVerdict struct {
	Name      string `json:"name"`      // e.g. "ttft_p95"
	Metric    string `json:"metric"`    // ttft, itl, tpot, e2e
	Statistic string `json:"statistic"` // p95, mean...
	// Basis, for TTFT, says where the judged figure starts (BasisIntended
	// or BasisSent).
	Basis    string     `json:"basis,omitempty"`
	LimitMs  float64    `json:"limit_ms"`
	ValueMs  float64    `json:"value_ms"`
	CI95     [2]float64 `json:"ci95"`
	MarginMs float64    `json:"margin_ms"` // limit - value; negative fails
	Pass     bool       `json:"pass"`
}

// Goodput is the rate of requests that met every per-request SLO.
type Goodput struct {
	RequestsPerS float64 `json:"requests_per_s"`
	Attainment   float64 `json:"attainment"` // fraction of all measured requests (failed count against)
}

// Summary is what a run amounts to. It is written as summary.json.
type Summary struct {
	Schema   string    `json:"schema"`
	Source   string    `json:"source"` // bench | sim
	Target   string    `json:"target,omitempty"`
	API      string    `json:"api,omitempty"`
	Model    string    `json:"model,omitempty"`
	Scenario string    `json:"scenario,omitempty"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	// DurationS is the measured window in seconds.
	DurationS float64 `json:"duration_s"`

	Requests   Requests   `json:"requests"`
	Throughput Throughput `json:"throughput"`
	Tokens     Tokens     `json:"tokens"`

	TTFT         Metric `json:"ttft_ms"`
	TTFTIntended Metric `json:"ttft_intended_ms"`
	// TTFTBasis says where the judged TTFT (JudgedTTFT) starts:
	// BasisIntended for a run sent on a schedule (open loop: --rate, a
	// scenario's arrival process, a trace), BasisSent for a closed loop,
	// whose intended time is its send. Added in v1.2.
	TTFTBasis   string `json:"ttft_basis,omitempty"`
	TTFB        Metric `json:"ttfb_ms"`
	TTFE        Metric `json:"ttfe_ms"`
	TTFC        Metric `json:"ttfc_ms"`
	ITL         Metric `json:"itl_ms"`
	TPOT        Metric `json:"tpot_ms"`
	E2E         Metric `json:"e2e_ms"`
	ScheduleLag Metric `json:"schedule_lag_ms"`
	Connect     Metric `json:"connect_ms"`
	// ReadDelay is how long after the kernel received each first token the
	// client read it (records with kernel receive timestamps only): the
	// client's own scheduling delay, kept out of TTFT. Added in v1.1.
	ReadDelay Metric `json:"first_token_read_delay_ms,omitzero"`

	SLO []SLOVerdict `json:"slo,omitempty"`
	// ServerSide is what the target's own metrics said about the run
	// (bench --scrape-metrics): TTFT split into queueing, prefill and the
	// rest, prefix-cache and preemption deltas. Added in v1.1.
	ServerSide []string `json:"server_side,omitempty"`
	Goodput    *Goodput `json:"goodput,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`
}

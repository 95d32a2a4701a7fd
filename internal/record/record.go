package record

import "time"

// Error classes. They are stable strings: summaries count by them and users
// script against them.
const (
	ErrNone          = ""
	ErrConnect       = "connect"        // dial refused / DNS / TLS before any byte
	ErrTimeout       = "timeout"        // --timeout for the whole request
	ErrTTFTTimeout   = "ttft_timeout"   // --ttft-timeout before the first token
	ErrHTTPStatus    = "http_status"    // non-2xx answer
	ErrMalformed     = "malformed"      // unparseable stream or body
	ErrStreamCut     = "stream_cut"     // connection ended before the stream's end marker
	ErrStreamError   = "stream_error"   // a 200 whose stream carried an error event
	ErrNoTokens      = "no_tokens"      // the stream ended properly without a single token
	ErrCanceled      = "canceled"       // the run was interrupted while the request was in flight
	ErrClientRequest = "client_request" // the request could not be built or sent
)

// Record is one request as measured (or simulated). Times are absolute; the
// *_ms fields are derived durations kept so that files are readable without
// recomputation. A zero time means "did not happen".
type Record struct {
	Index   int    `json:"index"`
	ID      string `json:"id,omitempty"`
	Warmup  bool   `json:"warmup,omitempty"`
	Source  string `json:"source,omitempty"` // "bench", "sim", "gateway"
	Target  string `json:"target,omitempty"`
	Backend string `json:"backend,omitempty"`
	API     string `json:"api,omitempty"`
	Model   string `json:"model,omitempty"`
	// ResponseID and ResponseModel are what the server said of its answer:
	// its completion id (the "id" of OpenAI's chunks, Anthropic's message
	// id) and the model it reports having run, which may differ from the
	// requested Model (an alias resolved, a gateway's degrade). Empty when
	// no answer came (a refused request, a 503). ID above is ttft's own.
	ResponseID    string `json:"response_id,omitempty"`
	ResponseModel string `json:"response_model,omitempty"`

	// Workload labels.
	Scenario string `json:"scenario,omitempty"`
	Session  string `json:"session,omitempty"`
	Turn     int    `json:"turn,omitempty"`
	Group    string `json:"group,omitempty"`

	// Timestamps. Intended is the open-loop schedule's send time (equal to
	// Sent in closed loop); Sent is when the request was written.
	Intended     time.Time `json:"intended"`
	Sent         time.Time `json:"sent"`
	Written      time.Time `json:"written,omitzero"` // request body fully written
	FirstByte    time.Time `json:"first_byte,omitzero"`
	FirstEvent   time.Time `json:"first_event,omitzero"`
	FirstToken   time.Time `json:"first_token,omitzero"`
	FirstContent time.Time `json:"first_content,omitzero"`
	End          time.Time `json:"end"`

	// Derived durations in milliseconds from Sent (0 when absent).
	TTFTMs         float64 `json:"ttft_ms,omitempty"`
	TTFTIntendedMs float64 `json:"ttft_intended_ms,omitempty"`
	TTFBMs         float64 `json:"ttfb_ms,omitempty"`
	TTFEMs         float64 `json:"ttfe_ms,omitempty"`
	TTFCMs         float64 `json:"ttfc_ms,omitempty"`
	E2EMs          float64 `json:"e2e_ms,omitempty"`
	TPOTMs         float64 `json:"tpot_ms,omitempty"`
	ScheduleLagMs  float64 `json:"schedule_lag_ms,omitempty"`
	// ITLMs holds the gaps between consecutive token events.
	ITLMs []float64 `json:"itl_ms,omitempty"`
	// CoalescedEvents counts token events that arrived in the same socket
	// read as the previous one: their gap is a client artefact, not a server one.
	CoalescedEvents int `json:"coalesced_events,omitempty"`

	// ArrivalClock says where event times came from: "kernel" when they
	// are the socket's kernel receive timestamps (the client's own
	// scheduling delay is then not in TTFT or ITL), empty when they were
	// taken as each read returned. FirstTokenReadDelayMs is how long after
	// the kernel received the first token the client read it.
	ArrivalClock          string  `json:"arrival_clock,omitempty"`
	FirstTokenReadDelayMs float64 `json:"first_token_read_delay_ms,omitempty"`

	// Network split from httptrace.
	DNSMs      float64 `json:"dns_ms,omitempty"`
	ConnectMs  float64 `json:"connect_ms,omitempty"`
	TLSMs      float64 `json:"tls_ms,omitempty"`
	ReusedConn bool    `json:"reused_conn,omitempty"`

	// Token counts. Prompt: the intended count (our tokenizer) and the
	// server's usage. Output: usage, our tokenizer on the received text, and
	// the number of token events.
	PromptTokens          int `json:"prompt_tokens,omitempty"`
	PromptTokensUsage     int `json:"prompt_tokens_usage,omitempty"`
	CachedPromptTokens    int `json:"cached_prompt_tokens,omitempty"`
	OutputTokensUsage     int `json:"output_tokens_usage,omitempty"`
	OutputTokensTokenizer int `json:"output_tokens_tokenizer,omitempty"`
	OutputEvents          int `json:"output_events,omitempty"`
	ReasoningEvents       int `json:"reasoning_events,omitempty"`
	MaxTokens             int `json:"max_tokens,omitempty"`
	// Temperature is the sampling temperature sent (nil: none was sent).
	Temperature *float64 `json:"temperature,omitempty"`

	// NotStreamed marks a response that came as one JSON body although a
	// stream was asked for: its first token is its end.
	NotStreamed bool `json:"not_streamed,omitempty"`

	Status       int    `json:"status,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	ErrorClass   string `json:"error_class,omitempty"`
	Error        string `json:"error,omitempty"`

	// ServerTimings are per-request timings an engine reported about itself
	// (llama.cpp "timings", Ollama durations, the simulator's breakdown), in ms.
	ServerTimings map[string]float64 `json:"server_timings,omitempty"`
}

// ClockKernel is Record.ArrivalClock for kernel receive timestamps.
const ClockKernel = "kernel"

// OK reports whether the request completed without error.
func (r *Record) OK() bool { return r.ErrorClass == ErrNone }

// OutputTokens is the best available output-token count: the server's usage
// when reported, else our tokenizer's count, else the number of token events.
// Every count of a request's output tokens goes through it (or, for a
// summary's totals, Tokens.Output), so that they agree.
func (r *Record) OutputTokens() int {
	return bestOutput(r.OutputTokensUsage, r.OutputTokensTokenizer, r.OutputEvents)
}

// InputTokens is the best available prompt-token count: the server's usage
// when reported, else the intended count (our tokenizer on the prompt sent).
// For a summary's totals see Tokens.Input.
func (r *Record) InputTokens() int {
	return bestInput(r.PromptTokensUsage, r.PromptTokens)
}

// bestOutput is the one order of output-token fallbacks.
func bestOutput(usage, tokenizer, events int) int {
	switch {
	case usage > 0:
		return usage
	case tokenizer > 0:
		return tokenizer
	default:
		return events
	}
}

// bestInput is the one order of prompt-token fallbacks.
func bestInput(usage, intended int) int {
	if usage > 0 {
		return usage
	}
	return intended
}

// JudgedTTFTMs is the TTFT that verdicts, goodput, comparisons and reports
// judge: from the intended send time. In an open loop that includes any
// lateness of the client (no coordinated omission); in a closed loop the
// intended time is the send itself, so it equals TTFTMs. Records without an
// intended time (older files) fall back to TTFTMs.
func (r *Record) JudgedTTFTMs() float64 {
	if r.TTFTIntendedMs > 0 {
		return r.TTFTIntendedMs
	}
	return r.TTFTMs
}

// Finalize fills the derived *_ms fields from the timestamps.
func (r *Record) Finalize() {
	ms := func(from, to time.Time) float64 {
		if from.IsZero() || to.IsZero() {
			return 0
		}
		return float64(to.Sub(from)) / float64(time.Millisecond)
	}
	r.TTFBMs = ms(r.Sent, r.FirstByte)
	r.TTFEMs = ms(r.Sent, r.FirstEvent)
	r.TTFTMs = ms(r.Sent, r.FirstToken)
	r.TTFCMs = ms(r.Sent, r.FirstContent)
	r.E2EMs = ms(r.Sent, r.End)
	if !r.Intended.IsZero() {
		r.TTFTIntendedMs = ms(r.Intended, r.FirstToken)
		if r.Sent.After(r.Intended) {
			r.ScheduleLagMs = ms(r.Intended, r.Sent)
		}
	}
	r.TPOTMs = 0
	if n := r.OutputTokens(); n > 1 && !r.FirstToken.IsZero() && !r.End.IsZero() {
		r.TPOTMs = ms(r.FirstToken, r.End) / float64(n-1)
	}
}

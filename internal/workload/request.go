package workload

import (
	"context"
	"time"
)

// Message is one chat turn.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one request a workload wants sent. It is protocol-neutral: the
// wire package turns it into an OpenAI or Anthropic body, the simulator reads
// its token counts directly.
type Request struct {
	Index int
	// Messages is the chat form; Prompt the completions form. A source fills
	// both, or Messages alone (completions then concatenates the contents).
	Messages []Message
	Prompt   string
	// Tokens, when the source knows them, are the prompt's token IDs under the
	// source's tokenizer, in order; the simulator uses them for prefix caching
	// without re-tokenising. PromptTokens is the intended prompt length.
	Tokens       []int
	PromptTokens int
	// MaxTokens caps the output; MinTokens > 0 asks engines that support it
	// (vLLM min_tokens / ignore_eos) to produce exactly that many.
	MaxTokens int
	MinTokens int

	// At is the intended send time as an offset from the run's start, set by
	// sources that own their schedule (traces, sessions). HasAt says it is set;
	// otherwise the runner's arrival process decides.
	At    time.Duration
	HasAt bool

	// Labels for analysis.
	Scenario string
	Session  string
	Turn     int
	Group    string
	Warmup   bool
}

// Result is what the runner tells a source about a finished request, so that
// multi-turn sources can build the next turn from the reply.
type Result struct {
	OK   bool
	Text string // visible output text
	End  time.Time
}

// Source yields the requests of a run. Next blocks (honouring ctx) when the
// next request depends on one still in flight, and returns io.EOF when the
// workload is exhausted.
type Source interface {
	Next(ctx context.Context) (*Request, error)
}

// ScheduledSource is a Source whose requests carry their own send times
// (At) from an arrival process or a trace. Its load is that schedule: a
// runner sends each request at its time however many are then in flight
// (open loop), capped only by a limit the user set, never by a closed
// loop's worker count.
type ScheduledSource interface {
	Source
	OwnsSchedule() bool
}

// OwnsSchedule reports whether src sets every request's send time.
func OwnsSchedule(src Source) bool {
	s, ok := src.(ScheduledSource)
	return ok && s.OwnsSchedule()
}

// FeedbackSource is a Source that wants to hear how each request ended.
type FeedbackSource interface {
	Source
	Done(req *Request, res Result)
}

// PollSource is a Source that can say "nothing until a reply" without
// blocking. Simulators on a virtual clock use it so that a multi-turn run
// does not depend on goroutine timing and repeats exactly.
type PollSource interface {
	Source
	// TryNext returns the next request if one is ready (ok true), ok false
	// when every pending request waits on a reply, or io.EOF at the end.
	TryNext() (req *Request, ok bool, err error)
}

// Skipper is a Source that can pass over its next request without building
// it. A shard of a sharded run walks the whole seeded sequence and keeps
// every N-th item; skipping spares it the prompts of the others' items
// while keeping any schedule it owns in step. Skip returns io.EOF where
// Next would.
type Skipper interface {
	Source
	Skip(ctx context.Context) error
}

// ShardedSource is a Source whose items cannot be striped one by one
// (a session's turns depend on its replies), so it splits itself: after
// SetShard(index, count) it yields only the share of shard index of count,
// whole sessions at a time, the same share whichever machine runs it.
type ShardedSource interface {
	Source
	SetShard(index, count int) error
}

// ShardShare is how many of n items (or workers) numbered 0..n-1 fall to
// shard index of count when item i goes to shard i mod count: the stripes
// of k6's execution segments, so bursts of a seeded schedule stay bursts on
// every shard rather than being smoothed into count independent streams.
func ShardShare(n, index, count int) int {
	if count <= 1 {
		return n
	}
	if n <= index {
		return 0
	}
	return (n-index-1)/count + 1
}

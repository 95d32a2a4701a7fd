package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// RunOptions is the load of an offline run, mirroring bench's load flags.
type RunOptions struct {
	// Concurrency > 0 is a closed loop: that many requests in flight, each
	// replaced the moment it ends. Otherwise the loop is open at Rate
	// requests/s (or NextGap's schedule); sources' Request.At wins over both.
	Concurrency int
	Rate        float64
	// MaxInFlight caps requests in flight in an open loop (0: no cap);
	// requests held back are sent late and show schedule lag.
	MaxInFlight int
	// RampUp starts a closed loop's workers evenly over this long.
	RampUp time.Duration
	// NextGap, when set, draws the next inter-arrival gap (open loop).
	NextGap func() time.Duration
	// Requests caps measured requests (after Warmup); Duration caps the
	// virtual time during which requests are sent. Zero means no cap; the
	// source's io.EOF always ends the run.
	Requests int
	Duration time.Duration
	Warmup   int
	// Start anchors virtual time 0 to a wall-clock instant for the records.
	Start time.Time
	Seed  uint64
	// Tokenizer counts prompts given only as text; may be nil.
	Tokenizer workload.Tokenizer
	// Target labels records (default: the deployment's name).
	Target string
	// NextWait bounds how long (wall time) to wait for a FeedbackSource's
	// Next while requests are in flight before advancing the simulation; it
	// only matters for sources whose next request depends on a reply.
	NextWait time.Duration
	// Engine, when set, is an idle engine of the same deployment to run
	// on instead of a fresh one: its KV cache, and the prompts its prefix
	// cache holds, carry over from an earlier run on the same server (a
	// published sweep whose runs followed each other on one server).
	Engine *Engine
}

// RunStats summarises an offline run's engine side.
type RunStats struct {
	Virtual   time.Duration // simulated time from first send to last token
	Steps     int64
	Engine    EngineStats
	NumBlocks int
}

type offlineReq struct {
	req    *workload.Request
	rec    *record.Record
	last   time.Duration
	sent   time.Duration
	index  int
	seqRef *Seq
}

// Run simulates src against one deployment on a virtual clock and hands
// every finished record to sink in completion order. It is deterministic for
// a deterministic source.
func Run(ctx context.Context, d *Deployment, src workload.Source, opt RunOptions, sink func(*record.Record) error) (RunStats, error) {
	r := newOfflineRun(ctx, d, src, opt.withDefaults(d, src), sink)
	if err := r.loop(); err != nil {
		return RunStats{}, err
	}
	st := r.eng.Stats()
	return RunStats{Virtual: r.lastEnd, Steps: st.Steps, Engine: st, NumBlocks: d.NumBlocks}, nil
}

// withDefaults settles the load: a source's own times, else a closed loop
// of Concurrency, else an open loop at Rate (Poisson, seeded by Seed).
func (opt RunOptions) withDefaults(d *Deployment, src workload.Source) RunOptions {
	if opt.Start.IsZero() {
		opt.Start = time.Unix(0, 0).UTC()
	}
	if opt.Target == "" {
		opt.Target = "sim://" + d.Name()
	}
	if opt.Rate <= 0 && opt.NextGap == nil && workload.OwnsSchedule(src) {
		// The source's times are the load (as in bench): no closed-loop
		// cap, only MaxInFlight; a request without a time is due at once.
		opt.Concurrency = 0
		opt.NextGap = func() time.Duration { return 0 }
	}
	if opt.Concurrency <= 0 && opt.Rate <= 0 && opt.NextGap == nil {
		opt.Concurrency = 1
	}
	if opt.NextWait <= 0 {
		opt.NextWait = 100 * time.Millisecond
	}
	if opt.NextGap == nil && opt.Concurrency <= 0 {
		rng := rand.New(rand.NewPCG(opt.Seed, 0x61727269766c))
		rate := opt.Rate
		opt.NextGap = func() time.Duration { return time.Duration(rng.ExpFloat64() / rate * 1e9) }
	}
	return opt
}

// offlineRun is one Run: the engine on a virtual clock, the source's next
// request, the requests sent but not yet admitted (their API delay still
// running), and the step in progress.
type offlineRun struct {
	ctx  context.Context
	d    *Deployment
	src  workload.Source
	fb   workload.FeedbackSource // src, when its next turns wait on replies
	poll workload.PollSource     // src, when it can say "nothing yet" without blocking
	opt  RunOptions
	sink func(*record.Record) error
	eng  *Engine

	now      time.Duration
	inflight int // sent and not finished
	issued   int
	limit    int // requests to issue, warm-up included
	iter     int

	// The source's next request, due at nextAt (-1: when a closed-loop
	// slot frees); pending is a Next call under way.
	next        *workload.Request
	nextAt      time.Duration
	lastArrival time.Duration
	srcDone     bool
	pending     chan nextResult
	justDone    bool // a reply went back to fb since the last fetch

	admitQ admitQueue
	// busy: a step is in progress, ending at stepEnd with emits.
	busy    bool
	stepEnd time.Duration
	emits   []Emit
	lastEnd time.Duration // the latest request end
}

func newOfflineRun(ctx context.Context, d *Deployment, src workload.Source, opt RunOptions, sink func(*record.Record) error) *offlineRun {
	eng := opt.Engine
	if eng == nil {
		eng = NewEngine(d)
	}
	r := &offlineRun{ctx: ctx, d: d, src: src, opt: opt, sink: sink, eng: eng, limit: math.MaxInt}
	r.fb, _ = src.(workload.FeedbackSource)
	r.poll, _ = src.(workload.PollSource)
	if opt.Tokenizer != nil {
		// Replies are re-tokenised as the session source will send them
		// back, so that the blocks they fill hash as the next turn's.
		r.eng.SetOutputTokenizer(opt.Tokenizer)
	}
	if opt.Requests > 0 {
		r.limit = opt.Requests + opt.Warmup
	}
	return r
}

// loop advances the virtual clock event by event: a request's send, its
// admission after the API delay, a step's end, until nothing is left.
func (r *offlineRun) loop() error {
	for {
		if r.iter++; r.iter&1023 == 0 && r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		// Next request, if the run still issues.
		if r.wantsNext() {
			if err := r.fetch(); err != nil {
				return err
			}
		}
		ta := r.sendTime()
		if ta <= r.now {
			if err := r.send(ta); err != nil {
				return err
			}
			continue
		}
		// Admissions (after the API overhead) due now.
		if t, ok := r.admitQ.peek(); ok && t <= r.now {
			o := r.admitQ.pop()
			r.eng.Add(o.rec2seq(), t)
			continue
		}
		tn := ta
		if t, ok := r.admitQ.peek(); ok && t < tn {
			tn = t
		}
		if r.busy {
			if r.stepEnd <= tn {
				if err := r.endStep(); err != nil {
					return err
				}
				continue
			}
			r.now = tn
			continue
		}
		if r.eng.HasWork() {
			if err := r.step(); err != nil {
				return err
			}
			continue
		}
		if tn == time.Duration(math.MaxInt64) {
			return nil
		}
		r.now = tn
	}
}

// wantsNext says whether the run still issues and has room for a request
// it has not fetched yet.
func (r *offlineRun) wantsNext() bool {
	opt := &r.opt
	return r.next == nil && !r.srcDone && r.issued < r.limit &&
		(opt.Concurrency <= 0 || r.inflight < opt.Concurrency) &&
		(opt.MaxInFlight <= 0 || r.inflight < opt.MaxInFlight || opt.Concurrency > 0)
}

// sendTime is when the next request may be sent (never: MaxInt64). A
// request due after Duration ends the source.
func (r *offlineRun) sendTime() time.Duration {
	if r.next == nil {
		return time.Duration(math.MaxInt64)
	}
	at := r.nextAt
	if at < 0 {
		at = r.now
	}
	opt := &r.opt
	if opt.Duration > 0 && at > opt.Duration {
		r.srcDone, r.next = true, nil
		return time.Duration(math.MaxInt64)
	}
	if (opt.Concurrency <= 0 || r.inflight < opt.Concurrency) && (opt.MaxInFlight <= 0 || r.inflight < opt.MaxInFlight) {
		return at
	}
	return time.Duration(math.MaxInt64)
}

// send issues the next request now, intended at ta, and queues it for the
// engine after the API delay; one refused outright finishes at once.
func (r *offlineRun) send(ta time.Duration) error {
	// A request fetched late (its source waited on a reply) is sent now;
	// its intended time stays ta, as bench records lag.
	o, err := issue(r.eng, r.next, r.issued, ta, r.now, r.opt, r.d)
	if err != nil {
		return err
	}
	r.issued++
	r.inflight++
	r.next = nil
	if o.rec.ErrorClass != "" {
		return r.finish(o, r.now, false, "")
	}
	// inflight already counts o: the others are inflight−1.
	r.admitQ.push(r.now+r.d.APIDelay(r.inflight-1), o)
	return nil
}

// step starts an engine step now.
func (r *offlineRun) step() error {
	res := r.eng.Step(r.now)
	if res.Tokens == 0 && len(res.Emits) == 0 {
		eng := r.eng
		return fmt.Errorf("simulator stalled at %v: %d waiting, %d running, %d/%d KV blocks free", r.now, eng.NumWaiting(), eng.NumRunning(), eng.kv.numFree(), eng.kv.numBlocks())
	}
	r.busy, r.stepEnd, r.emits = true, res.End, res.Emits
	return nil
}

// endStep moves the clock to the step's end and delivers its tokens,
// finishing the requests it completed.
func (r *offlineRun) endStep() error {
	r.now, r.busy = r.stepEnd, false
	for _, em := range r.emits {
		o := em.Seq.Tag.(*offlineReq)
		o.deliver(em, r.now, r.opt.Start)
		if em.Finished {
			text := ""
			if r.fb != nil {
				text = OutputText(em.Seq.ID, em.Seq.Output)
			}
			if err := r.finish(o, r.now, true, text); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish ends a request at virtual time at: its reply goes back to a
// feedback source and its record to the sink.
func (r *offlineRun) finish(o *offlineReq, at time.Duration, ok bool, text string) error {
	r.inflight--
	if r.fb != nil {
		r.fb.Done(o.req, workload.Result{OK: ok, Text: text, End: r.opt.Start.Add(at)})
		r.justDone = true
	}
	if at > r.lastEnd {
		r.lastEnd = at
	}
	if r.sink != nil {
		return r.sink(o.rec)
	}
	return nil
}

// fetch gets the next request and its intended time, waiting at most
// opt.NextWait while others are in flight (a multi-turn source may be
// waiting for one of them).
func (r *offlineRun) fetch() error {
	res, ok, err := r.receive()
	if err != nil || !ok {
		return err
	}
	if errors.Is(res.err, io.EOF) {
		r.srcDone = true
		return nil
	}
	if res.err != nil {
		return fmt.Errorf("reading the workload: %w", res.err)
	}
	r.next = res.r
	opt := &r.opt
	switch {
	case r.next.HasAt:
		r.nextAt = r.next.At
	case opt.Concurrency > 0 && opt.RampUp > 0 && r.issued < opt.Concurrency:
		r.nextAt = opt.RampUp * time.Duration(r.issued) / time.Duration(opt.Concurrency)
	case opt.Concurrency > 0:
		r.nextAt = -1 // as soon as a slot frees
	default:
		if r.issued > 0 {
			r.lastArrival += opt.NextGap()
		}
		r.nextAt = r.lastArrival
	}
	return nil
}

// receive asks the source for its next request; ok is false when none is
// ready yet because the source waits on a reply still to be produced.
func (r *offlineRun) receive() (res nextResult, ok bool, err error) {
	if r.poll != nil {
		// Deterministic: ask without waiting; nothing ready means the
		// source waits on a reply the engine has yet to produce.
		req, ready, err := r.poll.TryNext()
		if !ready && err == nil {
			return res, false, nil
		}
		ch := make(chan nextResult, 1)
		ch <- nextResult{req, err}
		r.pending = ch
	}
	if r.pending == nil && r.fb == nil {
		req, err := r.src.Next(r.ctx)
		ch := make(chan nextResult, 1)
		ch <- nextResult{req, err}
		r.pending = ch
	}
	if r.pending == nil {
		ch := make(chan nextResult, 1)
		r.pending = ch
		go func() {
			req, err := r.src.Next(r.ctx)
			ch <- nextResult{req, err}
		}()
	}
	switch {
	case r.fb == nil || r.poll != nil:
		// A plain source cannot depend on our replies: no need to guard
		// against it blocking on them.
		res = <-r.pending
	case r.inflight > 0 || r.admitQ.len() > 0:
		// Only a reply can unblock a source waiting on one: give it
		// NextWait right after a Done, and otherwise just look.
		if res, ok, err = r.awaitReply(); !ok {
			return res, false, err
		}
	default:
		select {
		case res = <-r.pending:
		case <-r.ctx.Done():
			return res, false, r.ctx.Err()
		}
	}
	r.pending = nil
	return res, true, nil
}

// awaitReply takes a feedback source's pending answer while requests are
// in flight: waiting up to NextWait right after a reply went back, else
// only if it is already there.
func (r *offlineRun) awaitReply() (res nextResult, ok bool, err error) {
	if !r.justDone {
		select {
		case res = <-r.pending:
			return res, true, nil
		default:
			return res, false, nil
		}
	}
	r.justDone = false
	t := time.NewTimer(r.opt.NextWait)
	defer t.Stop()
	select {
	case res = <-r.pending:
		return res, true, nil
	case <-t.C:
		return res, false, nil
	case <-r.ctx.Done():
		return res, false, r.ctx.Err()
	}
}

type nextResult struct {
	r   *workload.Request
	err error
}

// issue turns a workload request into a record and, when valid, a sequence.
func issue(eng *Engine, r *workload.Request, index int, intended, at time.Duration, opt RunOptions, d *Deployment) (*offlineReq, error) {
	sent := opt.Start.Add(at)
	rec := &record.Record{
		Index: index, Source: "sim", Target: opt.Target, Backend: d.Name(), API: "sim", Model: d.Model.Name,
		Scenario: r.Scenario, Session: r.Session, Turn: r.Turn, Group: r.Group,
		Warmup:   r.Warmup || index < opt.Warmup,
		Intended: opt.Start.Add(intended), Sent: sent,
		MaxTokens: r.MaxTokens,
	}
	o := &offlineReq{req: r, rec: rec, sent: at, index: index}
	n := promptLength(r, opt.Tokenizer)
	rec.PromptTokens = n
	if n <= 0 {
		return nil, fmt.Errorf("request %d has no prompt length: set PromptTokens, Tokens or text with a tokenizer", index)
	}
	maxTok := r.MaxTokens
	if r.MinTokens > maxTok {
		maxTok = r.MinTokens
	}
	if maxTok <= 0 {
		maxTok = 256
	}
	s, err := eng.NewSeq(n, maxTok, r.Tokens)
	if err != nil {
		var le *LengthError
		if errors.As(err, &le) {
			rec.Status, rec.ErrorClass, rec.Error = 400, record.ErrHTTPStatus, err.Error()
			rec.End = sent
			rec.Finalize()
			return o, nil
		}
		return nil, fmt.Errorf("request %d: %w", index, err)
	}
	s.Tag = o
	// Only a conversation's turn keeps its history for a next turn, so
	// only a turn's blocks are evicted under evict:F.
	s.noEvict = r.Session == ""
	o.seqRef = s
	rec.PromptTokensUsage = n
	return o, nil
}

func (o *offlineReq) rec2seq() *Seq { return o.seqRef }

// deliver records one token event at virtual time now.
func (o *offlineReq) deliver(em Emit, now time.Duration, start time.Time) {
	r := o.rec
	t := start.Add(now)
	if em.First {
		r.FirstByte, r.FirstEvent, r.FirstToken, r.FirstContent = t, t, t, t
	} else {
		if r.ITLMs == nil {
			r.ITLMs = make([]float64, 0, max(1, em.Seq.MaxTokens-1))
		}
		r.ITLMs = append(r.ITLMs, float64(now-o.last)/1e6)
	}
	o.last = now
	r.OutputEvents++
	if em.Finished {
		s := em.Seq
		r.End = t
		r.OutputTokensUsage = s.Output
		r.OutputTokensTokenizer = s.Output
		r.CachedPromptTokens = s.CachedTokens
		r.FinishReason = s.FinishReason
		r.Status = 200
		r.ServerTimings = map[string]float64{
			"queue_ms":    float64(s.FirstScheduled-s.Arrival) / 1e6,
			"prefill_ms":  float64(s.FirstTokenAt-s.FirstScheduled) / 1e6,
			"decode_ms":   float64(now-s.FirstTokenAt) / 1e6,
			"api_ms":      float64(s.Arrival-o.sent) / 1e6,
			"preemptions": float64(s.Preemptions),
		}
		if o.req.Session != "" {
			// Multi-turn: the prompt tokens skipped because eviction had
			// dropped their blocks, and the session's KV (tokens' worth)
			// left cached for its next turn (article §3.3's memory per
			// session, under the retention policy).
			r.ServerTimings["kv_skipped_tokens"] = float64(s.SkippedTokens)
			r.ServerTimings["kv_retained_tokens"] = float64(s.RetainedTokens)
		}
		r.Finalize()
	}
}

// admitQueue holds requests between their send time and the moment the
// engine sees them (after the API delay), ordered by that moment. The delay
// grows with the requests in flight, so a later send can be admitted
// earlier; push inserts in order (from the back: almost always an append).
type admitQueue struct {
	t    []time.Duration
	o    []*offlineReq
	head int
}

func (q *admitQueue) len() int { return len(q.t) - q.head }
func (q *admitQueue) push(t time.Duration, o *offlineReq) {
	i := len(q.t)
	for i > q.head && q.t[i-1] > t {
		i--
	}
	q.t = append(q.t, 0)
	q.o = append(q.o, nil)
	copy(q.t[i+1:], q.t[i:])
	copy(q.o[i+1:], q.o[i:])
	q.t[i], q.o[i] = t, o
}
func (q *admitQueue) peek() (time.Duration, bool) {
	if q.head == len(q.t) {
		return 0, false
	}
	return q.t[q.head], true
}
func (q *admitQueue) pop() *offlineReq {
	o := q.o[q.head]
	q.o[q.head] = nil
	q.head++
	if q.head == len(q.t) {
		q.t, q.o, q.head = q.t[:0], q.o[:0], 0
	}
	return o
}

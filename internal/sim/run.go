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
	rng := rand.New(rand.NewPCG(opt.Seed, 0x61727269766c))
	if opt.NextGap == nil && opt.Concurrency <= 0 {
		rate := opt.Rate
		opt.NextGap = func() time.Duration { return time.Duration(rng.ExpFloat64() / rate * 1e9) }
	}
	fb, _ := src.(workload.FeedbackSource)
	eng := NewEngine(d)
	if opt.Tokenizer != nil {
		// Replies are re-tokenised as the session source will send them
		// back, so that the blocks they fill hash as the next turn's.
		eng.SetOutputTokenizer(opt.Tokenizer)
	}

	var (
		now, stepEnd time.Duration
		busy         bool
		inflight     int
		issued       int
		srcDone      bool
		next         *workload.Request
		nextAt       time.Duration
		lastArrival  time.Duration
		pending      chan nextResult
		admitQ       admitQueue
		lastEnd      time.Duration
		iter         int
		justDone     bool
	)
	limit := math.MaxInt
	if opt.Requests > 0 {
		limit = opt.Requests + opt.Warmup
	}
	// fetch gets the next request, waiting at most opt.NextWait while others
	// are in flight (a multi-turn source may be waiting for one of them).
	poll, _ := src.(workload.PollSource)
	fetch := func() error {
		if poll != nil {
			// Deterministic: ask without waiting; nothing ready means the
			// source waits on a reply the engine has yet to produce.
			r, ok, err := poll.TryNext()
			if !ok && err == nil {
				return nil
			}
			ch := make(chan nextResult, 1)
			ch <- nextResult{r, err}
			pending = ch
		}
		if pending == nil && fb == nil {
			r, err := src.Next(ctx)
			ch := make(chan nextResult, 1)
			ch <- nextResult{r, err}
			pending = ch
		}
		if pending == nil {
			ch := make(chan nextResult, 1)
			pending = ch
			go func() {
				r, err := src.Next(ctx)
				ch <- nextResult{r, err}
			}()
		}
		var res nextResult
		if fb == nil || poll != nil {
			// A plain source cannot depend on our replies: no need to guard
			// against it blocking on them.
			res = <-pending
		} else if inflight > 0 || admitQ.len() > 0 {
			// Only a reply can unblock a source waiting on one: give it
			// NextWait right after a Done, and otherwise just look.
			if justDone {
				justDone = false
				t := time.NewTimer(opt.NextWait)
				select {
				case res = <-pending:
					t.Stop()
				case <-t.C:
					return nil
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			} else {
				select {
				case res = <-pending:
				default:
					return nil
				}
			}
		} else {
			select {
			case res = <-pending:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = nil
		if errors.Is(res.err, io.EOF) {
			srcDone = true
			return nil
		}
		if res.err != nil {
			return fmt.Errorf("reading the workload: %w", res.err)
		}
		next = res.r
		switch {
		case next.HasAt:
			nextAt = next.At
		case opt.Concurrency > 0 && opt.RampUp > 0 && issued < opt.Concurrency:
			nextAt = opt.RampUp * time.Duration(issued) / time.Duration(opt.Concurrency)
		case opt.Concurrency > 0:
			nextAt = -1 // as soon as a slot frees
		default:
			if issued > 0 {
				lastArrival += opt.NextGap()
			}
			nextAt = lastArrival
		}
		return nil
	}

	finish := func(o *offlineReq, at time.Duration, ok bool, text string) error {
		inflight--
		if fb != nil {
			fb.Done(o.req, workload.Result{OK: ok, Text: text, End: opt.Start.Add(at)})
			justDone = true
		}
		if at > lastEnd {
			lastEnd = at
		}
		if sink != nil {
			return sink(o.rec)
		}
		return nil
	}

	for {
		if iter++; iter&1023 == 0 && ctx.Err() != nil {
			return RunStats{}, ctx.Err()
		}
		// Next request, if the run still issues.
		if next == nil && !srcDone && issued < limit && (opt.Concurrency <= 0 || inflight < opt.Concurrency) && (opt.MaxInFlight <= 0 || inflight < opt.MaxInFlight || opt.Concurrency > 0) {
			if err := fetch(); err != nil {
				return RunStats{}, err
			}
		}
		ta := time.Duration(math.MaxInt64)
		if next != nil {
			at := nextAt
			if at < 0 {
				at = now
			}
			if opt.Duration > 0 && at > opt.Duration {
				srcDone, next = true, nil
			} else if (opt.Concurrency <= 0 || inflight < opt.Concurrency) && (opt.MaxInFlight <= 0 || inflight < opt.MaxInFlight) {
				ta = at
			}
		}
		if ta <= now {
			// A request fetched late (its source waited on a reply) is sent
			// now; its intended time stays ta, as bench records lag.
			o, err := issue(eng, next, issued, ta, now, opt, d)
			if err != nil {
				return RunStats{}, err
			}
			issued++
			inflight++
			next = nil
			if o.rec.ErrorClass != "" {
				if err := finish(o, now, false, ""); err != nil {
					return RunStats{}, err
				}
				continue
			}
			// inflight already counts o: the others are inflight−1.
			admitQ.push(now+d.APIDelay(inflight-1), o)
			continue
		}
		// Admissions (after the API overhead) due now.
		if t, ok := admitQ.peek(); ok && t <= now {
			o := admitQ.pop()
			eng.Add(o.rec2seq(), t)
			continue
		}
		tn := ta
		if t, ok := admitQ.peek(); ok && t < tn {
			tn = t
		}
		if busy {
			if stepEnd <= tn {
				now = stepEnd
				busy = false
				for _, em := range lastEmits(eng) {
					o := em.Seq.Tag.(*offlineReq)
					o.deliver(em, now, opt.Start)
					if em.Finished {
						text := ""
						if fb != nil {
							text = outputText(em.Seq.ID, em.Seq.Output)
						}
						if err := finish(o, now, true, text); err != nil {
							return RunStats{}, err
						}
					}
				}
				continue
			}
			now = tn
			continue
		}
		if eng.HasWork() {
			res := eng.Step(now)
			if res.Tokens == 0 && len(res.Emits) == 0 {
				return RunStats{}, fmt.Errorf("simulator stalled at %v: %d waiting, %d running, %d/%d KV blocks free", now, eng.NumWaiting(), eng.NumRunning(), eng.kv.numFree, eng.kv.numBlocks())
			}
			busy, stepEnd = true, res.End
			continue
		}
		if tn == time.Duration(math.MaxInt64) {
			break
		}
		now = tn
	}
	st := eng.Stats()
	return RunStats{Virtual: lastEnd, Steps: st.Steps, Engine: st, NumBlocks: d.NumBlocks}, nil
}

// lastEmits returns the emits of the step that just ended. The engine keeps
// them until the next Step.
func lastEmits(e *Engine) []Emit { return e.emits }

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

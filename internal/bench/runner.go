package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Sink receives each finished record; JSONL files, stores and live views
// are sinks. Write is called from request goroutines, concurrently.
type Sink interface {
	Write(*record.Record) error
}

// Options configure a run.
type Options struct {
	API     wire.API
	BaseURL string // see wire.BaseURL
	Request wire.RequestOptions

	// Closed loop: Concurrency workers each send the next request when their
	// previous one ends. Open loop: Rate > 0 requests per second from the
	// Arrival process, or the times of a source that owns its schedule
	// (workload.ScheduledSource), at most MaxConcurrency in flight
	// (0 = unbounded).
	Concurrency    int
	Rate           float64
	Arrival        string
	Burstiness     float64
	MaxConcurrency int
	// RampUp spreads the closed-loop workers' first requests over this long.
	RampUp time.Duration

	// Requests is the number of measured requests (0 = until Duration or the
	// source ends); Duration bounds the measured phase's dispatching.
	Requests int
	Duration time.Duration
	// Warmup requests are sent first, recorded with Warmup set, and left out
	// of statistics.
	Warmup int

	Timeout     time.Duration // whole request
	TTFTTimeout time.Duration // until the first token

	MaxEventBytes int
	Seed          int64
	// RunID prefixes each request's X-Request-Id.
	RunID  string
	Target string // label for records

	// Tokenizer counts output tokens offline (nil: skip).
	Tokenizer workload.Tokenizer
	Sinks     []Sink
	Observers []Observer
	// Text, when set, receives each request's generated text (all
	// channels) before its record goes to the sinks; from request
	// goroutines, concurrently.
	Text func(rec *record.Record, text string)
	// Client overrides the HTTP client (tests); by default a pooled client
	// sized to the concurrency is built.
	Client *http.Client
	// Now is the clock (default time.Now). An injected clock also turns
	// off kernel receive timestamps, which are on the wall clock.
	Now func() time.Time
	// ReadClock times events when the read returns, never by the
	// kernel's receive timestamp (for comparing the two).
	ReadClock bool
	// Shard, with Count > 1, makes this runner one shard of a run spread
	// over several load generators (see Shard). Requests, Warmup,
	// Concurrency and MaxConcurrency stay the whole run's figures.
	Shard Shard
}

// Result is what a run produced.
type Result struct {
	Records     []record.Record // measured and warm-up records, canceled ones excluded
	Canceled    int
	SinkErrors  []error
	Started     time.Time
	Ended       time.Time
	Interrupted bool
	// Origin is the measured phase's start, from which intended times
	// count: the shards' common start when Shard.Start set it.
	Origin time.Time
	// StartLate is how long after Origin this runner woke to start it
	// (sharded runs: this shard's part of the start skew).
	StartLate time.Duration
}

// Runner executes runs. It is safe to use one Runner per run.
type Runner struct {
	opt    Options
	client *http.Client
	now    func() time.Time
	// requester builds each request from what the run prepared once.
	requester *wire.Requester
	// readers are SSE readers kept between requests (their buffers were
	// a request's largest allocation).
	readers sync.Pool
	// kernelClock: event times come from the socket's kernel receive
	// timestamps where the connection has them (see rxstamp.go).
	kernelClock bool

	mu       sync.Mutex
	recs     []record.Record
	canceled int
	sinkErrs []error

	inflight atomic.Int64
	done     atomic.Int64
	failed   atomic.Int64
	progress *Progress
	feedback workload.FeedbackSource

	// origin, once set, is the measured phase's start (a shard barrier's);
	// startLate how late this runner woke for it.
	origin    time.Time
	startLate time.Duration
	// selfSharded: the source split itself (workload.ShardedSource), so
	// the runner takes every item it yields.
	selfSharded bool
}

// New validates options and builds a runner.
func New(opt Options) (*Runner, error) {
	if opt.BaseURL == "" {
		return nil, errors.New("bench: no target URL")
	}
	if opt.Rate <= 0 && opt.Concurrency <= 0 {
		opt.Concurrency = 1
	}
	if err := opt.Shard.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	kernelClock := opt.Now == nil && !opt.ReadClock
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Arrival == "" {
		opt.Arrival = "poisson"
	}
	if opt.Burstiness == 0 {
		opt.Burstiness = 1
	}
	r := &Runner{opt: opt, now: opt.Now, kernelClock: kernelClock, progress: newProgress()}
	r.requester = wire.NewRequester(opt.API, opt.BaseURL, &r.opt.Request)
	if n := opt.Requests + opt.Warmup; opt.Requests > 0 && n <= 1<<17 {
		// Growing the slice copies every record so far while other
		// requests wait on the lock: at thousands of streams that copy
		// showed up in the self-check's latency tail.
		r.recs = make([]record.Record, 0, n)
	}
	r.client = opt.Client
	return r, nil
}

// isOpenLoop reports whether a run of src is sent on a schedule: --rate, or a
// source that owns its schedule (a scenario's arrival process, a trace).
func (r *Runner) isOpenLoop(src workload.Source) bool {
	return r.opt.Rate > 0 || workload.OwnsSchedule(src)
}

// NewTransport is an HTTP transport that keeps a pooled keep-alive connection
// per concurrent stream (Go's default of 2 idle per host would redial), and
// never asks for compression, which would hold events back.
func NewTransport(conns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = stampingDialer(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = conns + 16
	t.MaxConnsPerHost = 0
	t.IdleConnTimeout = 5 * time.Minute
	t.DisableCompression = true
	t.ResponseHeaderTimeout = 0
	return t
}

// ClosedLoop caps t at one connection per worker of a closed loop. A
// worker's next request is often ready before the transport has put the
// previous response's connection back in the pool; uncapped, it dials a new
// one (an extra connection the server sees, and set-up time in that
// request's TTFT), capped it waits the few microseconds for the old one,
// outside TTFT (a request is sent when its first write begins).
func ClosedLoop(t *http.Transport, workers int) {
	if workers > 0 {
		t.MaxConnsPerHost = workers
	}
}

// Progress exposes live counters of a running run.
func (r *Runner) Progress() *Progress { return r.progress }

// Run sends the workload and returns when it is exhausted, the limits are
// reached, or ctx is canceled (Interrupted is then set; the records of
// completed requests are returned and were already written to the sinks).
func (r *Runner) Run(ctx context.Context, src workload.Source) (Result, error) {
	start := r.now()
	r.feedback, _ = src.(workload.FeedbackSource)
	open := r.isOpenLoop(src)
	if sh := r.opt.Shard; sh.active() {
		if ss, ok := src.(workload.ShardedSource); ok {
			if err := ss.SetShard(sh.Index, sh.Count); err != nil {
				return r.result(start, false), fmt.Errorf("workload: %w", err)
			}
			r.selfSharded = true
		}
	}
	if r.client == nil {
		t := NewTransport(max(r.opt.Concurrency, r.opt.MaxConcurrency, 64))
		if !open {
			ClosedLoop(t, r.opt.Concurrency)
		}
		r.client = &http.Client{Transport: t}
	}
	if r.opt.Warmup > 0 {
		wctx, cancel := context.WithCancel(ctx)
		err := r.closedLoop(wctx, src, min(max(r.opt.Concurrency, 1), r.opt.Warmup), r.opt.Warmup, 0, true)
		cancel()
		if err != nil && ctx.Err() == nil {
			return r.result(start, false), err
		}
	}
	var err error
	if ctx.Err() == nil {
		if err := r.barrier(ctx); err != nil {
			return r.result(start, ctx.Err() != nil), err
		}
	}
	if ctx.Err() == nil {
		r.progress.begin(r.opt.Shard.share(r.opt.Requests), r.now())
		if open {
			err = r.openLoop(ctx, src)
		} else {
			err = r.closedLoop(ctx, src, r.opt.Concurrency, r.opt.Requests, r.opt.Duration, false)
		}
	}
	res := r.result(start, ctx.Err() != nil)
	return res, err
}

func (r *Runner) result(start time.Time, interrupted bool) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Result{Records: r.recs, Canceled: r.canceled, SinkErrors: r.sinkErrs,
		Started: start, Ended: r.now(), Interrupted: interrupted, Origin: r.origin, StartLate: r.startLate}
}

// barrier waits for the shards' common start, when there is one, and makes
// it the measured phase's origin: every shard then counts the same intended
// times from the same instant.
func (r *Runner) barrier(ctx context.Context) error {
	if r.opt.Shard.Start == nil {
		return nil
	}
	t, err := r.opt.Shard.Start(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the other shards: %w", err)
	}
	// Sleep to just before the start, then spin: a timer wakes a
	// goroutine up to milliseconds late on a busy machine, and that
	// lateness would be the shards' start skew.
	if !sleepUntil(ctx, t.Add(-2*time.Millisecond), r.now) {
		return nil // interrupted: Run reports it
	}
	for r.now().Before(t) {
		runtime.Gosched()
	}
	r.origin, r.startLate = t, r.now().Sub(t)
	return nil
}

// phaseStart is the origin of a phase's schedule: the shards' common start
// for the measured phase, else now.
func (r *Runner) phaseStart(warm bool) time.Time {
	if !warm && !r.origin.IsZero() {
		return r.origin
	}
	return r.now()
}

// pull returns the next request this shard sends, passing over the other
// shards' items (global index gi and the running index idx advance for
// each). skipped reports the items passed over, so an open loop can keep its
// arrival process in step.
func (r *Runner) pull(ctx context.Context, src workload.Source, gi *int, idx *int, limit int, warm bool, skipped func()) (*workload.Request, error) {
	sh := r.opt.Shard
	if r.selfSharded {
		// The source yields only this shard's items; number them apart
		// from the other shards' (local item j is global j*Count+Index).
		base := *idx
		req, err := r.next(ctx, src, idx, warm)
		if err != nil {
			return nil, err
		}
		req.Index = base + (*gi)*sh.Count + sh.Index - *gi
		*gi++
		return req, nil
	}
	for sh.active() && !sh.owns(*gi) {
		if limit > 0 && *gi >= limit {
			return nil, io.EOF // the last items are the other shards'
		}
		if err := skip(ctx, src); err != nil {
			return nil, err
		}
		*gi++
		*idx++
		if skipped != nil {
			skipped()
		}
	}
	if limit > 0 && *gi >= limit {
		return nil, io.EOF
	}
	*gi++
	return r.next(ctx, src, idx, warm)
}

// next pulls one request, numbering it and applying warm-up.
func (r *Runner) next(ctx context.Context, src workload.Source, idx *int, warm bool) (*workload.Request, error) {
	req, err := src.Next(ctx)
	if err != nil {
		return nil, err
	}
	req.Index = *idx
	*idx++
	req.Warmup = warm
	return req, nil
}

// closedLoop runs workers that each send the next request when their
// previous one ends. A worker takes the next request from the source under
// a lock, so sources need not be concurrency-safe and requests are taken in
// order, each only when a worker is free for it (a dispatcher goroutine
// handing requests over a channel cost a goroutine switch per request).
func (r *Runner) closedLoop(ctx context.Context, src workload.Source, workers, limit int, dur time.Duration, warm bool) error {
	// Requests run under ctx (a user's interrupt aborts them); --duration
	// only stops dispatching, so requests in flight at the end complete.
	dctx := ctx
	if dur > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	var wg sync.WaitGroup
	start := r.phaseStart(warm)
	if c, ok := src.(workload.ClockedSource); ok {
		c.SetOrigin(start) // session think times and At offsets count from here
	}
	var (
		mu       sync.Mutex // guards the source and what follows
		gi, idx  int
		err      error
		finished bool
	)
	if !warm {
		idx = r.opt.Warmup
	}
	take := func() *workload.Request {
		mu.Lock()
		defer mu.Unlock()
		if finished || dctx.Err() != nil || (limit > 0 && gi >= limit) {
			finished = true
			return nil
		}
		req, nerr := r.pull(dctx, src, &gi, &idx, limit, warm, nil)
		if nerr != nil {
			if !errors.Is(nerr, io.EOF) && dctx.Err() == nil {
				err = fmt.Errorf("workload: %w", nerr)
			}
			finished = true
			return nil
		}
		// A request due later (a session's think time) is waited for
		// with the lock held: the next is not taken before it is due.
		if req.HasAt && !sleepUntil(dctx, start.Add(req.At), r.now) {
			finished = true
			return nil
		}
		return req
	}
	sh := r.opt.Shard
	mine := 0
	for w := range workers {
		if sh.active() && w%sh.Count != sh.Index && !(w == workers-1 && mine == 0) {
			continue // another shard's worker
		}
		mine++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.opt.RampUp > 0 && workers > 1 {
				sleepUntil(dctx, r.now().Add(r.opt.RampUp*time.Duration(w)/time.Duration(workers)), r.now)
			}
			for req := take(); req != nil; req = take() {
				var intended time.Time
				if req.HasAt {
					intended = start.Add(req.At)
				}
				r.do(ctx, req, intended)
			}
		}()
	}
	wg.Wait()
	return err
}

// openLoop sends on a schedule of intended times regardless of responses,
// so slow responses cannot thin the load (no coordinated omission). Each
// record keeps its intended time; lateness shows as schedule lag. The times
// come from the source (At) or else from the Rate's arrival process; a
// request with neither is due at once.
func (r *Runner) openLoop(ctx context.Context, src workload.Source) error {
	var arr *workload.Arrivals
	if r.opt.Rate > 0 {
		var err error
		if arr, err = workload.NewArrivals(r.opt.Arrival, r.opt.Rate, r.opt.Burstiness, r.opt.Seed); err != nil {
			return err
		}
	}
	var err error
	dctx := ctx
	if r.opt.Duration > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, r.opt.Duration)
		defer cancel()
	}
	var sem chan struct{}
	if r.opt.MaxConcurrency > 0 {
		sem = make(chan struct{}, max(1, r.opt.Shard.share(r.opt.MaxConcurrency)))
	}
	var wg sync.WaitGroup
	start := r.phaseStart(false)
	if c, ok := src.(workload.ClockedSource); ok {
		c.SetOrigin(start)
	}
	next := start
	idx := r.opt.Warmup
	// A source that shards itself (sessions) ends at the end of its own
	// share; Requests stays the run's bound.
	limit := r.opt.Requests
	// Another shard's item still takes its gap of the arrival process, so
	// that this shard's intended times are the single run's.
	skipped := func() {}
	if arr != nil && !workload.OwnsSchedule(src) {
		skipped = func() { next = next.Add(arr.Next()) }
	}
	for gi := 0; limit <= 0 || gi < limit; {
		req, nerr := r.pull(dctx, src, &gi, &idx, limit, false, skipped)
		if nerr != nil {
			if !errors.Is(nerr, io.EOF) && dctx.Err() == nil {
				err = fmt.Errorf("workload: %w", nerr)
			}
			break
		}
		intended := next
		switch {
		case req.HasAt:
			intended = start.Add(req.At)
		case arr != nil:
			next = next.Add(arr.Next())
		default:
			intended = r.now()
		}
		if !sleepUntil(dctx, intended, r.now) {
			break
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-dctx.Done():
			}
			if dctx.Err() != nil {
				break
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.do(ctx, req, intended)
			if sem != nil {
				<-sem
			}
		}()
	}
	wg.Wait()
	return err
}

// sleepUntil waits for t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time, now func() time.Time) bool {
	d := t.Sub(now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) finish(rec *record.Record) {
	rec.Finalize()
	if rec.ErrorClass == record.ErrCanceled {
		r.mu.Lock()
		r.canceled++
		r.mu.Unlock()
	}
	// Each sink writes the record before the request counts as done, so
	// every completed measurement is on disk when its request ends;
	// requests.jsonl still coalesces the records of requests that end
	// while another's write(2) is in progress (record.JSONLWriter).
	var errs []error
	for _, s := range r.opt.Sinks {
		if err := s.Write(rec); err != nil {
			errs = append(errs, err)
		}
	}
	r.mu.Lock()
	if rec.ErrorClass != record.ErrCanceled {
		r.recs = append(r.recs, *rec)
	}
	if len(errs) > 0 && len(r.sinkErrs) < 10 {
		r.sinkErrs = append(r.sinkErrs, errs...)
	}
	r.mu.Unlock()
	if !rec.Warmup {
		r.progress.observe(rec)
	}
}

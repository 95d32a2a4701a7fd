package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sse"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

var (
	errTTFTTimeout = errors.New("no first token within --ttft-timeout")
	errTimeout     = errors.New("request exceeded --timeout")
	errDrained     = errors.New("stream still open after its end marker")
)

// drainWait and drainMax bound the read of what follows a stream's end
// marker.
const (
	drainWait = 200 * time.Millisecond
	drainMax  = 64 << 10
)

// do sends one request and records it. It never returns an error: every
// outcome is a record.
func (r *Runner) do(ctx context.Context, req *workload.Request, intended time.Time) {
	rec := &record.Record{
		Index: req.Index, Warmup: req.Warmup, Source: "bench", Target: r.opt.Target,
		API: string(r.opt.API), Model: r.opt.Request.Model,
		Scenario: req.Scenario, Session: req.Session, Turn: req.Turn, Group: req.Group,
		PromptTokens: req.PromptTokens, MaxTokens: req.MaxTokens, Intended: intended,
	}
	if r.opt.RunID != "" {
		rec.ID = r.opt.RunID + "-" + strconv.Itoa(req.Index)
	}
	if !r.opt.Request.NoTemperature {
		rec.Temperature = &r.opt.Request.Temperature // shared and read-only: no allocation per request
	}
	for _, o := range r.opt.Observers {
		ctx = o.Start(ctx, req, rec)
	}
	r.inflight.Add(1)
	text := r.send(ctx, req, rec)
	r.inflight.Add(-1)
	if r.opt.Tokenizer != nil && text != "" {
		rec.OutputTokensTokenizer = r.opt.Tokenizer.Count(text)
	}
	if r.opt.Text != nil {
		r.opt.Text(rec, text)
	}
	r.finish(rec)
	for _, o := range r.opt.Observers {
		o.Done(ctx, rec)
	}
	if r.feedback != nil {
		r.feedback.Done(req, workload.Result{OK: rec.OK(), Text: text, End: rec.End})
	}
}

// send performs the HTTP exchange and fills rec; it returns the generated
// text (all channels) for offline token counting and multi-turn history.
func (r *Runner) send(ctx context.Context, req *workload.Request, rec *record.Record) string {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lim := &limits{cancel: cancel}
	lim.start(r.opt.Timeout, r.opt.TTFTTimeout)
	defer lim.stop()

	nt := &netTrace{base: r.now(), now: r.now, kernel: r.kernelClock}
	defer nt.fill(rec)
	resp := r.exchange(ctx, nt, req, rec)
	if resp == nil {
		return ""
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "json") {
		return r.whole(resp, rec)
	} else if ct != "" && !strings.Contains(ct, "event-stream") {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		rec.End = r.now()
		fail(rec, record.ErrMalformed, fmt.Errorf("expected an event stream, got Content-Type %q: %s", ct, oneLine(body)))
		return ""
	}
	st := streamState{rec: rec, gotToken: &lim.gotToken}
	if req.MaxTokens > 0 {
		rec.ITLMs = make([]float64, 0, min(req.MaxTokens, 4096))
	}
	if st.read(ctx, r, resp, nt) {
		// Read what follows the end marker (the chunked encoding's last
		// chunk) so that the connection goes back to the pool: a body
		// closed before its end makes the transport drop the connection,
		// and the next request would pay a new connect (and TLS handshake)
		// inside its TTFT. A server that keeps the stream open is not
		// waited for long.
		lim.drain(drainWait)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainMax))
		lim.stop()
	}
	if rec.OK() && rec.FirstToken.IsZero() {
		fail(rec, record.ErrNoTokens, errors.New("the stream ended without any token"))
	}
	return st.out.String()
}

// limits is a request's deadlines on one timer: the first-token limit and
// the whole request's while it runs, then the drain's after its end marker.
// (A timer each cost three timers, three closures and their heap entries
// per request; the deadlines are the same.)
type limits struct {
	cancel   context.CancelCauseFunc
	gotToken atomic.Bool // the first token came: the first-token limit no longer applies

	mu                     sync.Mutex
	t                      *time.Timer
	ttftAt, endAt, drainAt time.Time // zero: no such limit (drainAt: not draining)
	stopped                bool
}

// start arms the whole-request and first-token limits (0: none).
func (l *limits) start(timeout, ttftTimeout time.Duration) {
	if timeout <= 0 && ttftTimeout <= 0 {
		return
	}
	now := time.Now()
	if timeout > 0 {
		l.endAt = now.Add(timeout)
	}
	if ttftTimeout > 0 {
		l.ttftAt = now.Add(ttftTimeout)
	}
	l.mu.Lock()
	l.armLocked(now)
	l.mu.Unlock()
}

// drain replaces the limits with the drain's: the stream has ended and only
// the read of what follows its end marker is left.
func (l *limits) drain(wait time.Duration) {
	now := time.Now()
	l.mu.Lock()
	l.ttftAt, l.endAt, l.drainAt = time.Time{}, time.Time{}, now.Add(wait)
	l.armLocked(now)
	l.mu.Unlock()
}

func (l *limits) stop() {
	l.mu.Lock()
	l.stopped = true
	if l.t != nil {
		l.t.Stop()
	}
	l.mu.Unlock()
}

// nextLocked is the earliest limit still to come, or zero.
func (l *limits) nextLocked() time.Time {
	var next time.Time
	for _, at := range [...]time.Time{l.ttftAt, l.endAt, l.drainAt} {
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

func (l *limits) armLocked(now time.Time) {
	next := l.nextLocked()
	if next.IsZero() || l.stopped {
		return
	}
	if l.t == nil {
		l.t = time.AfterFunc(next.Sub(now), l.fire)
	} else {
		l.t.Reset(next.Sub(now))
	}
}

// fire runs on the timer's goroutine: it ends the request for the limit
// that passed, or re-arms for the next one (a first-token limit that
// passed after the first token, or a run that a re-arm overtook).
func (l *limits) fire() {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	switch {
	case !l.drainAt.IsZero() && !now.Before(l.drainAt):
		l.cancel(errDrained)
		return
	case !l.ttftAt.IsZero() && !now.Before(l.ttftAt):
		if !l.gotToken.Load() {
			l.cancel(errTTFTTimeout)
			return
		}
		l.ttftAt = time.Time{}
	}
	if !l.endAt.IsZero() && !now.Before(l.endAt) {
		l.cancel(errTimeout)
		return
	}
	l.armLocked(now)
}

// exchange sends the request, times its send, and returns a successful
// response with its body unread; nil when rec is already complete (the
// request could not be built or sent, or the status was not 2xx).
func (r *Runner) exchange(ctx context.Context, nt *netTrace, req *workload.Request, rec *record.Record) *http.Response {
	hreq, err := r.requester.New(nt.attach(ctx), req)
	if err != nil {
		fail(rec, record.ErrClientRequest, err)
		rec.Sent, rec.End = r.now(), r.now()
		if rec.Intended.IsZero() {
			rec.Intended = rec.Sent
		}
		return nil
	}
	if rec.ID != "" {
		hreq.Header.Set("X-Request-Id", rec.ID)
	}
	rec.Sent = r.now()
	closedLoop := rec.Intended.IsZero() // no schedule to be late for
	if closedLoop {
		rec.Intended = rec.Sent
	}
	resp, err := r.client.Do(hreq)
	if err != nil {
		rec.End = r.now()
		nt.fill(rec)
		classify(ctx, rec, err)
		return nil
	}
	// On a kept-alive connection the request is sent when its first
	// write(2) begins (or, without a stamping connection, when the
	// transport's writer starts formatting it); the hand-off to that
	// goroutine is the client's own delay (milliseconds at a thousand
	// streams on two cores) and stays out of TTFT. A new connection's
	// DNS, connect and TLS stay in, as a user waits for them too; they
	// are reported separately.
	ws := nt.at(&nt.writeStart)
	if st := nt.stamper(); st != nil {
		if tx := st.firstWrite(); !tx.IsZero() {
			ws = tx
		}
	}
	if nt.reused.Load() && ws.After(rec.Sent) {
		rec.Sent = ws
		if closedLoop {
			rec.Intended = ws
		}
	}
	rec.Status = resp.StatusCode
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		rec.End = r.now()
		fail(rec, record.ErrHTTPStatus, fmt.Errorf("HTTP %d: %s", resp.StatusCode, oneLine(body)))
		return nil
	}
	return resp
}

// streamState is one stream being read into its record.
type streamState struct {
	rec      *record.Record
	gotToken *atomic.Bool // for the first-token timeout
	arrival  *arrivalClock
	out      strings.Builder // generated text, all channels
	last     time.Time       // the previous token event
}

// read decodes the event stream into the record until its end marker (true)
// or an error, which it records (false).
func (st *streamState) read(ctx context.Context, r *Runner, resp *http.Response, nt *netTrace) bool {
	clock := r.now
	if s := nt.stamper(); s != nil && resp.ProtoMajor == 1 {
		st.arrival = &arrivalClock{conn: s, now: r.now}
		clock = st.arrival.Now
	}
	opt := sse.Options{MaxEventBytes: r.opt.MaxEventBytes, Now: clock}
	rd, _ := r.readers.Get().(*sse.Reader)
	if rd == nil {
		rd = sse.NewReader(resp.Body, opt)
	} else {
		rd.Reset(resp.Body, opt)
	}
	defer func() {
		rd.Reset(nil, sse.Options{}) // let go of this response
		r.readers.Put(rd)
	}()
	dec := wire.NewDecoder(r.opt.API)
	var chunk wire.Chunk
	rec := st.rec
	for {
		ev, err := rd.Next()
		if err != nil {
			rec.End = r.now()
			st.ended(ctx, err, nt)
			return false
		}
		if rec.FirstEvent.IsZero() {
			rec.FirstEvent = ev.At
		}
		if err := dec.Decode(ev, &chunk); err != nil {
			rec.End = ev.At
			fail(rec, record.ErrMalformed, err)
			return false
		}
		if chunk.Err != "" {
			rec.End = ev.At
			fail(rec, record.ErrStreamError, errors.New(chunk.Err))
			return false
		}
		st.chunk(&chunk, ev)
		if chunk.Done {
			rec.End = ev.At
			return true
		}
	}
}

// ended records why a stream stopped before its end marker.
func (st *streamState) ended(ctx context.Context, err error, nt *netTrace) {
	rec := st.rec
	switch {
	case errors.Is(err, io.EOF):
		// Servers that end without [DONE]/message_stop but with a
		// finish reason ended properly enough.
		if rec.FinishReason == "" {
			fail(rec, record.ErrStreamCut, errors.New("stream ended before its end marker"))
		}
	case errors.Is(err, sse.ErrTooLarge):
		fail(rec, record.ErrMalformed, err)
	default:
		nt.fill(rec)
		classify(ctx, rec, err)
		if rec.ErrorClass == record.ErrConnect {
			rec.ErrorClass = record.ErrStreamCut
		}
	}
}

// chunk records one decoded event: tokens and their times, text, finish
// reason, usage and server timings.
func (st *streamState) chunk(c *wire.Chunk, ev *sse.Event) {
	rec := st.rec
	if c.ID != "" && rec.ResponseID == "" {
		rec.ResponseID = c.ID
	}
	if c.Model != "" && rec.ResponseModel == "" {
		rec.ResponseModel = c.Model
	}
	if c.HasToken() {
		if rec.FirstToken.IsZero() {
			rec.FirstToken = ev.At
			st.gotToken.Store(true)
			if st.arrival != nil && st.arrival.stamped {
				rec.ArrivalClock = record.ClockKernel
				rec.FirstTokenReadDelayMs = float64(st.arrival.lastDelay) / float64(time.Millisecond)
			}
		} else {
			rec.ITLMs = append(rec.ITLMs, msSince(st.last, ev.At))
			if ev.Coalesced {
				rec.CoalescedEvents++
			}
		}
		st.last = ev.At
		rec.OutputEvents++
		if c.Content != "" {
			if rec.FirstContent.IsZero() {
				rec.FirstContent = ev.At
			}
			st.out.WriteString(c.Content)
		}
		if c.Reasoning != "" {
			rec.ReasoningEvents++
			st.out.WriteString(c.Reasoning)
		}
		st.out.WriteString(c.ToolArgs)
	}
	if c.Finish != "" {
		rec.FinishReason = c.Finish
	}
	if u := c.Usage; u != nil {
		rec.PromptTokensUsage = u.PromptTokens
		rec.OutputTokensUsage = u.CompletionTokens
		rec.CachedPromptTokens = u.CachedPromptTokens
	}
	if c.Timings != nil {
		rec.ServerTimings = c.Timings
	}
}

// whole records a server that answered stream: true with one JSON body (a
// server or proxy that does not stream): everything arrives at once, so the
// first token is the end, and the record says so.
func (r *Runner) whole(resp *http.Response, rec *record.Record) string {
	max := r.opt.MaxEventBytes
	if max <= 0 {
		max = sse.DefaultMaxEventBytes
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
	rec.End = r.now()
	if err != nil {
		fail(rec, record.ErrStreamCut, fmt.Errorf("reading the JSON body: %w", err))
		return ""
	}
	if len(body) > max {
		fail(rec, record.ErrMalformed, fmt.Errorf("JSON body over %d bytes", max))
		return ""
	}
	c, err := wire.DecodeWhole(r.opt.API, body)
	if err != nil {
		fail(rec, record.ErrMalformed, err)
		return ""
	}
	if c.Err != "" {
		fail(rec, record.ErrStreamError, errors.New(c.Err))
		return ""
	}
	rec.NotStreamed = true
	rec.ResponseID, rec.ResponseModel = c.ID, c.Model
	rec.FirstEvent = rec.End
	text := c.Content + c.Reasoning + c.ToolArgs
	if text != "" {
		rec.FirstToken, rec.OutputEvents = rec.End, 1
		if c.Content != "" {
			rec.FirstContent = rec.End
		}
	}
	rec.FinishReason = c.Finish
	if u := c.Usage; u != nil {
		rec.PromptTokensUsage, rec.OutputTokensUsage, rec.CachedPromptTokens = u.PromptTokens, u.CompletionTokens, u.CachedPromptTokens
	}
	if text == "" {
		fail(rec, record.ErrNoTokens, errors.New("the response carried no text"))
	}
	return text
}

// netTrace collects httptrace callbacks. The transport calls them from its
// own goroutines (dialer, write loop, read loop), sometimes after Do has
// returned, so they only touch atomics; fill copies them into the record.
type netTrace struct {
	base time.Time
	now  func() time.Time
	// Offsets from base in ns; 0 means "not seen".
	dnsStart, dnsDone, connStart, connDone, tlsStart, tlsDone, written, firstByte atomic.Int64
	writeStart                                                                    atomic.Int64 // first header field written
	reused                                                                        atomic.Bool
	// kernel: take kernel receive timestamps from the connection, kept in
	// conn once the transport hands it over (HTTP/1 only: an HTTP/2
	// connection's reads carry many streams).
	kernel bool
	conn   atomic.Pointer[rxStamper]
	// trace is the hooks given to net/http; own: nobody else's hooks were
	// composed into it, so gotConn may take one out.
	trace *httptrace.ClientTrace
	own   bool
}

// attach returns ctx carrying the trace's hooks.
func (t *netTrace) attach(ctx context.Context) context.Context {
	t.own = httptrace.ContextClientTrace(ctx) == nil
	t.trace = t.clientTrace()
	return httptrace.WithClientTrace(ctx, t.trace)
}

// gotConn runs when the transport hands the request its connection, before
// anything of the request is written (the transport's write loop takes the
// request from the goroutine that runs GotConn, through a channel, after
// it).
func (t *netTrace) gotConn(c net.Conn) {
	if !t.kernel || c == nil {
		return
	}
	if tc, ok := c.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
		return
	}
	st := stamperOf(c)
	if st == nil {
		return
	}
	t.conn.Store(&st)
	// The connection stamps the first write(2) from here on: nothing else
	// writes to an HTTP/1 connection between handing it over and the
	// request. The header-field hook, which only stood in for that stamp
	// (and makes net/http allocate and call per header), can go.
	st.markRequest()
	if t.own {
		t.trace.WroteHeaderField = nil
	}
}

// stamper is the request's timestamping connection, or nil.
func (t *netTrace) stamper() rxStamper {
	if p := t.conn.Load(); p != nil {
		return *p
	}
	return nil
}

// stampFirstByte is stamp with the kernel's arrival time of the read that
// brought the first byte, when the connection has one.
func (t *netTrace) stampFirstByte() {
	if st := t.stamper(); st != nil {
		at := (&arrivalClock{conn: st, now: t.now}).Now()
		t.firstByte.Store(max(int64(at.Sub(t.base)), 1))
		return
	}
	t.stamp(&t.firstByte)
}

func (t *netTrace) stamp(a *atomic.Int64) { a.Store(max(int64(t.now().Sub(t.base)), 1)) }

func (t *netTrace) at(a *atomic.Int64) time.Time {
	if v := a.Load(); v != 0 {
		return t.base.Add(time.Duration(v))
	}
	return time.Time{}
}

func (t *netTrace) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart:          func(httptrace.DNSStartInfo) { t.stamp(&t.dnsStart) },
		DNSDone:           func(httptrace.DNSDoneInfo) { t.stamp(&t.dnsDone) },
		ConnectStart:      func(string, string) { t.stamp(&t.connStart) },
		ConnectDone:       func(string, string, error) { t.stamp(&t.connDone) },
		TLSHandshakeStart: func() { t.stamp(&t.tlsStart) },
		TLSHandshakeDone:  func(tls.ConnectionState, error) { t.stamp(&t.tlsDone) },
		GotConn:           func(i httptrace.GotConnInfo) { t.reused.Store(i.Reused); t.gotConn(i.Conn) },
		// Without a stamping connection (HTTP/2, no kernel clock), the
		// first header field written is when the request went out.
		WroteHeaderField: func(string, []string) {
			if t.writeStart.Load() == 0 {
				t.stamp(&t.writeStart)
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { t.stamp(&t.written) },
		GotFirstResponseByte: t.stampFirstByte,
	}
}

// fill copies what the trace saw into rec.
func (t *netTrace) fill(rec *record.Record) {
	span := func(from, to *atomic.Int64) float64 {
		a, b := from.Load(), to.Load()
		if a == 0 || b == 0 {
			return 0
		}
		return float64(b-a) / float64(time.Millisecond)
	}
	rec.DNSMs = span(&t.dnsStart, &t.dnsDone)
	rec.ConnectMs = span(&t.connStart, &t.connDone)
	rec.TLSMs = span(&t.tlsStart, &t.tlsDone)
	rec.ReusedConn = t.reused.Load()
	rec.Written = t.at(&t.written)
	rec.FirstByte = t.at(&t.firstByte)
}

func fail(rec *record.Record, class string, err error) {
	if rec.ErrorClass != "" {
		return
	}
	rec.ErrorClass = class
	rec.Error = err.Error()
}

// classify maps a transport error to an error class, telling our own
// timeouts and the user's interrupt apart from network failures.
func classify(ctx context.Context, rec *record.Record, err error) {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTTFTTimeout):
		fail(rec, record.ErrTTFTTimeout, cause)
		return
	case errors.Is(cause, errTimeout):
		fail(rec, record.ErrTimeout, cause)
		return
	case errors.Is(cause, context.Canceled):
		fail(rec, record.ErrCanceled, errors.New("run interrupted"))
		return
	case errors.Is(cause, context.DeadlineExceeded):
		fail(rec, record.ErrTimeout, cause)
		return
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		fail(rec, record.ErrConnect, err)
		return
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) || (rec.FirstByte.IsZero() && rec.Written.IsZero()) {
		fail(rec, record.ErrConnect, err)
		return
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || rec.FirstByte.IsZero() {
		fail(rec, record.ErrStreamCut, err)
		return
	}
	fail(rec, record.ErrStreamCut, err)
}

func msSince(from, to time.Time) float64 {
	if from.IsZero() {
		return 0
	}
	return float64(to.Sub(from)) / float64(time.Millisecond)
}

func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

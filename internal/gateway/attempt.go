package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/httpx"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/wire/translate"
)

// maxTranslatedAnswer bounds a non-streamed answer read whole for
// translation across APIs.
const maxTranslatedAnswer = 8 << 20

var errEventTooLarge = errors.New("event too large to translate")

// attempt is one try of a request on one backend (Gateway.attempt), in
// stages: build the backend request (request), send it, await the first
// token (awaitFirstToken) — until then a failure is retried elsewhere —
// then, committed (commit), relay a whole answer (relayWhole,
// translateWhole) or a stream (relayStream, forward, count), and end a
// stream the backend did not finish (endStream).
//
// It lives on Gateway.attempt's stack: the stages take it by pointer and
// keep it nowhere. The request's exchange (x) goes to each stage as an
// argument instead of being kept here: escape analysis does not tell one
// field from another, so with the ticket, writer and context (which do
// escape) it would move every request's exchange to the heap.
type attempt struct {
	g   *Gateway
	ctx context.Context // the client request's (the backend request's is a child)
	w   http.ResponseWriter
	t   *sched.Ticket
	u   *upstream
	bx  backendExchange
	lim Limits
	// crossing: the backend speaks the other API, so its answer is
	// translated; backendAnthropic: its events are Anthropic's.
	crossing, backendAnthropic bool
	// timer bounds the wait for the first byte, then each silence; when it
	// fires it sets stalled and cancels the backend request.
	timer   *time.Timer
	stalled *atomic.Bool
}

// attempt sends the request to one backend and, once the backend's first
// token (or a whole answer's first bytes) arrives, commits to it and
// relays the answer. A non-nil result is a failure the client has not been
// told of (unless committed): route retries it or answers with it.
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, t *sched.Ticket, u *upstream, bx backendExchange, lim Limits) *attemptError {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One timer bounds both the wait for the first byte and each later
	// silence; it cancels the backend request when it fires. A
	// non-streamed answer's first byte comes when all of it is generated,
	// so its wait has a bound of its own.
	stalled := new(atomic.Bool)
	firstWait := lim.FirstByteTimeout.Std()
	if !x.stream {
		firstWait = lim.ResponseTimeout.Std()
	}
	timer := time.AfterFunc(firstWait, func() { stalled.Store(true); cancel() })
	defer timer.Stop()
	a := attempt{g: g, ctx: ctx, w: w, t: t, u: u, bx: bx, lim: lim,
		crossing: bx.api != x.api, backendAnthropic: bx.api == wire.Anthropic, timer: timer, stalled: stalled}
	// sent is set once the whole request is on its way to the backend
	// (non-streamed requests only: only their timeouts ask).
	var sent atomic.Bool
	out, ae := a.request(actx, x, r, &sent)
	if ae != nil {
		return ae
	}
	resp, err := g.roundTrip(out, bx.body)
	if err != nil {
		if stalled.Load() {
			return a.timedOut(x, "first_byte_timeout", sent.Load() && u.sb.Healthy())
		}
		return a.fail(x, http.StatusBadGateway, "connect", fmt.Sprintf("backend %s unreachable", u.cfg.Name))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		// Headers sent before the first token time the backend's round
		// trip and front end (sched.Ticket.HeadersAt).
		t.HeadersAt(time.Now())
	}
	if ae := a.refused(x, resp); ae != nil {
		return ae
	}
	isStream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && resp.StatusCode == http.StatusOK
	continuing := x.splice != nil && x.splice.active
	if continuing && !isStream {
		// The client's stream is under way: only a stream can go on it.
		return a.fail(x, http.StatusBadGateway, "continuation_refused", fmt.Sprintf("backend %s answered the continuation with %d, not a stream", u.cfg.Name, resp.StatusCode))
	}
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	buf := *bp
	n, rerr, arrived, ae := a.awaitFirstToken(x, resp, buf, isStream)
	if ae != nil {
		return ae
	}
	// The first-token timer must not fire once the client has been
	// answered: stop it before committing. If it already fired, the
	// backend request is cancelled, but the client has seen nothing, so a
	// stream is still retriable.
	if !timer.Stop() {
		return a.timedOut(x, "first_token_timeout", true)
	}
	switch {
	case a.crossing && !isStream:
		translated, ae := a.translateWhole(x, resp, buf[:n:n], rerr)
		if ae != nil {
			return ae
		}
		a.commit(x, resp, isStream)
		_, werr := w.Write(translated)
		a.t.End(a.writeOutcome(x, werr))
		return nil
	case !isStream:
		a.commit(x, resp, isStream)
		return a.relayWhole(x, resp.Body, buf[:n], rerr)
	}
	if continuing {
		return a.relayContinued(x, resp.Body, buf, n, rerr, arrived)
	}
	a.commit(x, resp, isStream)
	return a.relayStream(x, resp.Body, buf, n, rerr, arrived)
}

// request builds the backend request: the client's headers but for
// hop-by-hop ones, its credentials and those the gateway sets (length,
// the backend's key, the trace context of ctx, the Anthropic version
// across APIs). sent hears that a non-streamed request was written whole.
func (a *attempt) request(ctx context.Context, x *exchange, r *http.Request, sent *atomic.Bool) (*http.Request, *attemptError) {
	rctx := ctx
	if !x.stream {
		rctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		}})
	}
	body := a.bx.body
	out, err := http.NewRequestWithContext(rctx, http.MethodPost, a.u.cfg.URL+a.bx.path, bytes.NewReader(body))
	if err != nil {
		a.t.End(sched.OutcomeCanceled)
		return nil, &attemptError{status: http.StatusInternalServerError, msg: "building backend request: " + err.Error()}
	}
	out.URL.RawQuery = r.URL.RawQuery
	for k, vs := range r.Header {
		if !notForwarded[k] {
			out.Header[k] = vs
		}
	}
	dropConnectionTokens(out.Header, r.Header)
	out.ContentLength = int64(len(body))
	if a.crossing {
		if a.backendAnthropic {
			if out.Header.Get("Anthropic-Version") == "" {
				// The client, an OpenAI one, named no version.
				out.Header.Set("Anthropic-Version", wire.AnthropicVersion)
			}
		} else {
			out.Header.Del("Anthropic-Version")
			out.Header.Del("Anthropic-Beta")
		}
	}
	a.g.setBackendAuth(out.Header, a.u)
	traceContext.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return out, nil
}

// failAs ends an attempt that failed before anything reached the client,
// as outcome o, unless the client went away (then it is the client's
// doing: no mark against the backend, nothing to retry).
func (a *attempt) failAs(x *exchange, o sched.Outcome, retriable bool, status int, reason, msg string) *attemptError {
	if a.ctx.Err() != nil && !a.stalled.Load() {
		o, retriable = sched.OutcomeCanceled, false
		x.canceled = true
	}
	a.t.End(o)
	return &attemptError{status: status, reason: reason, msg: msg, retriable: retriable}
}

// fail is failAs for the backend's failure, retriable.
func (a *attempt) fail(x *exchange, status int, reason, msg string) *attemptError {
	return a.failAs(x, sched.OutcomeFailed, true, status, reason, msg)
}

// timedOut ends an attempt the first-byte timer cut, with 504 whether or
// not headers had come. A stream's first token is retried elsewhere. A
// non-streamed answer the backend accepted (answer bytes came, or the
// whole request was sent and health checks pass) is not: it is long, and
// would be as long on another backend (three times the work, then the
// same 504); nor is it held against the backend.
func (a *attempt) timedOut(x *exchange, reason string, accepted bool) *attemptError {
	name, lim := a.u.cfg.Name, &a.lim
	if x.stream {
		return a.fail(x, http.StatusGatewayTimeout, reason, fmt.Sprintf("backend %s sent no token within %v (limits.first_byte_timeout)", name, lim.FirstByteTimeout.Std()))
	}
	msg := fmt.Sprintf("backend %s sent no answer within %v; limits.response_timeout bounds a non-streamed answer (or stream it)", name, lim.ResponseTimeout.Std())
	if accepted {
		return a.failAs(x, sched.OutcomeNoVerdict, false, http.StatusGatewayTimeout, "response_timeout", msg)
	}
	return a.fail(x, http.StatusGatewayTimeout, "response_timeout", msg)
}

// refused turns a backend's refusal into a failure retried elsewhere: 429
// (the backend is up, shedding load: not held against it; when every
// backend tried says 429, the client gets 429 and the backend's
// Retry-After) or a 5xx. nil: an answer to relay.
func (a *attempt) refused(x *exchange, resp *http.Response) *attemptError {
	name := a.u.cfg.Name
	if resp.StatusCode == http.StatusTooManyRequests {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		ae := a.failAs(x, sched.OutcomeNoVerdict, true, http.StatusTooManyRequests, "status_429", fmt.Sprintf("backend %s answered 429 (too many requests)", name))
		ae.retryAfter = resp.Header.Get("Retry-After")
		return ae
	}
	if resp.StatusCode >= 500 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return a.fail(x, http.StatusBadGateway, "status_"+strconv.Itoa(resp.StatusCode), fmt.Sprintf("backend %s answered %d", name, resp.StatusCode))
	}
	return nil
}

// awaitFirstToken reads the answer into buf before committing: a stream
// up to its first token event (its end, an error event, or a full
// buffer), a whole answer to its first bytes. A backend that stalls or
// dies before producing a token is retried elsewhere, and the client has
// seen nothing. Events held back here (role announcements, message
// starts) carry no token, so holding them costs the client no TTFT. It
// returns the bytes read (buf[:n]), the error that ended the last read
// (nil: more may follow) and when the last bytes came.
func (a *attempt) awaitFirstToken(x *exchange, resp *http.Response, buf []byte, isStream bool) (n int, rerr error, arrived time.Time, ae *attemptError) {
	for {
		var m int
		m, rerr = resp.Body.Read(buf[n:])
		n += m
		if m > 0 {
			arrived = time.Now()
		}
		if n > 0 && (!isStream || n == len(buf) || readyToCommit(buf[:n], a.backendAnthropic, rerr != nil)) {
			return n, rerr, arrived, nil
		}
		if rerr != nil {
			if !isStream && n == 0 && rerr == io.EOF && resp.StatusCode >= 300 {
				return n, rerr, arrived, nil // an empty error answer is still an answer
			}
			if a.stalled.Load() {
				return n, rerr, arrived, a.timedOut(x, "first_token_timeout", true)
			}
			return n, rerr, arrived, a.fail(x, http.StatusBadGateway, "cut_before_first_token", fmt.Sprintf("backend %s ended before its first token", a.u.cfg.Name))
		}
	}
}

// translateWhole reads the rest of a non-streamed answer in the other API
// (whole: what was read so far; more follows when rerr is nil) and
// translates it before anything is committed: one that cannot be
// translated is a gateway error, not half an answer.
func (a *attempt) translateWhole(x *exchange, resp *http.Response, whole []byte, rerr error) ([]byte, *attemptError) {
	if rerr == nil {
		rest, err := io.ReadAll(io.LimitReader(resp.Body, maxTranslatedAnswer))
		if err != nil {
			return nil, a.fail(x, http.StatusBadGateway, "cut", fmt.Sprintf("backend %s: reading its answer: %v", a.u.cfg.Name, err))
		}
		whole = append(whole, rest...)
	}
	var translated []byte
	var err error
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		translated, err = translate.Response(whole, a.bx.api, x.api)
	} else {
		translated = translate.Error(whole, resp.StatusCode, a.bx.api, x.api)
	}
	if err != nil {
		a.t.End(sched.OutcomeOK)
		return nil, &attemptError{status: http.StatusBadGateway, msg: fmt.Sprintf("backend %s's answer could not be translated to the %s API: %v", a.u.cfg.Name, x.api.Provider(), err)}
	}
	if resp.StatusCode == http.StatusOK {
		a.usageFrom(x, whole)
	}
	return translated, nil
}

// usageFrom reads a whole answer's usage (exchange.usageFrom) and hands
// the scheduler the cached prompt tokens it reports, if it does.
func (a *attempt) usageFrom(x *exchange, body []byte) {
	x.usageFrom(body)
	switch {
	case x.inUsage > 0 && bytes.Contains(body, kCachedTok):
		a.t.ObserveCached(intAfter(body, kCachedTok), x.inUsage)
	case a.backendAnthropic:
		if read, p, ok := anthropicCached(body); ok {
			a.t.ObserveCached(read, p)
		}
	}
}

// commit answers the client with the backend's status and headers (less
// hop-by-hop ones, plus who answered and after how many attempts): from
// here on nothing is retried.
func (a *attempt) commit(x *exchange, resp *http.Response, isStream bool) {
	hdr := a.w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	dropConnectionTokens(hdr, resp.Header)
	for _, k := range hopHeaders {
		hdr.Del(k)
	}
	hdr.Set(HeaderBackend, a.u.cfg.Name)
	hdr.Set(HeaderAttempts, strconv.Itoa(x.attempts))
	if isStream || a.crossing {
		hdr.Del("Content-Length")
	}
	if a.crossing && !isStream {
		hdr.Set("Content-Type", "application/json")
	}
	x.status = resp.StatusCode
	a.w.WriteHeader(resp.StatusCode)
}

// writeOutcome is how a committed whole answer ended: a write that failed
// because the client went away is the client's doing.
func (a *attempt) writeOutcome(x *exchange, werr error) sched.Outcome {
	if werr != nil && a.ctx.Err() != nil {
		x.canceled = true
		return sched.OutcomeCanceled
	}
	return sched.OutcomeOK
}

// relayWhole copies a plain (untranslated) JSON answer with bounded memory:
// first, what awaitFirstToken read, then the rest unless rerr ended it.
func (a *attempt) relayWhole(x *exchange, body io.Reader, first []byte, rerr error) *attemptError {
	a.timer.Reset(a.lim.IdleStreamTimeout.Std())
	_, werr := a.w.Write(first)
	if werr == nil && rerr == nil {
		_, werr = io.Copy(a.w, body)
	}
	o := a.writeOutcome(x, werr)
	if x.status == http.StatusOK {
		a.usageFrom(x, first)
	}
	a.t.End(o)
	return nil
}

// relayStream passes a stream through: each read's complete events are
// written and flushed as they arrive (translated when crossing), then
// counted. pending holds bytes read but not yet written: at most one
// incomplete event. buf[:n] is what awaitFirstToken read, readErr the
// error that ended its last read and arrived that read's time.
func (a *attempt) relayStream(x *exchange, body io.Reader, buf []byte, n int, readErr error, arrived time.Time) *attemptError {
	idle := a.lim.IdleStreamTimeout.Std()
	a.timer.Reset(idle)
	rc := http.NewResponseController(a.w)
	itl := a.g.m.itl.WithLabelValues(a.u.cfg.Name)
	var tr *translate.Stream
	var xout []byte // the client's events, when translating
	cachedSeen := false
	if a.crossing {
		tr = translate.NewStream(a.bx.api, x.api, x.model)
	}
	sp := x.splice
	if sp != nil {
		sp.tr = tr // a continuation goes on with the same translator
	}
	var last time.Time
	done, sawError := false, false
	pending := buf[:n]
	for {
		if len(pending) > 0 {
			// Classify only (byte searches); the bookkeeping waits until
			// the bytes are on their way to the client, so that none of it
			// is in the client's TTFT or ITL.
			tokens := 0
			xout = xout[:0]
			k := splitEventsEnd(pending, readErr != nil, func(ev []byte) {
				si := classify(ev, a.backendAnthropic)
				if !x.respRead { // the first event names the answer
					x.respRead = true
					x.respID, x.respModel = stringAfter(ev, kID), stringAfter(ev, kModel)
				}
				if tr != nil {
					xout = tr.Event(xout, ev)
				}
				if si.token {
					tokens++
				}
				if si.output > 0 {
					x.outTokens = si.output
				}
				if si.input > 0 {
					x.inTokens, x.inUsage = si.input, si.input
				}
				if si.hasCached && !cachedSeen {
					// Once: Anthropic's message_delta may restate the
					// usage of its message_start.
					cachedSeen = true
					a.t.ObserveCached(si.cached, si.prompt)
				}
				done = done || si.done
				sawError = sawError || si.errEv
				if sp != nil {
					sp.observe(ev, si, a.backendAnthropic)
				}
			})
			if k == 0 && len(pending) >= len(buf) {
				if sp != nil {
					sp.blocked = blockEvent // forwarded in pieces, or not at all
				}
				if tr != nil {
					// An event cannot be translated in pieces.
					readErr = errEventTooLarge
					break
				}
				// One event larger than the buffer: forward what we have
				// rather than pin unbounded memory on it.
				k = len(pending)
			}
			out := pending[:k]
			if tr != nil {
				out = xout
			}
			// The backend's last event and its end came together: the
			// event and the end of the response leave in one write, so the
			// client is not woken for the end alone.
			if k > 0 && len(out) > 0 && !a.forward(x, rc, out, arrived, done && readErr == io.EOF && k == len(pending)) {
				return nil
			}
			if k > 0 {
				pending = append(buf[:0], pending[k:]...)
			}
			a.count(x, tokens, arrived, &last, itl)
		}
		if readErr != nil {
			break
		}
		var m int
		m, readErr = body.Read(buf[len(pending):cap(buf)])
		if m > 0 {
			arrived = time.Now()
			a.timer.Reset(idle)
			pending = buf[:len(pending)+m]
		}
	}
	return a.endStream(x, rc, readErr, done || (readErr == io.EOF && len(pending) == 0 && sawError), len(buf))
}

// forward writes whole events to the client and flushes them (final: with
// the end of the response, when the server can). Each write has
// idle_stream_timeout from when its bytes arrived. It reports false when
// the client is gone; the attempt has then ended.
func (a *attempt) forward(x *exchange, rc *http.ResponseController, out []byte, arrived time.Time, final bool) bool {
	rc.SetWriteDeadline(arrived.Add(a.lim.IdleStreamTimeout.Std()))
	if _, err := a.w.Write(out); err != nil {
		x.canceled = true
		a.t.End(sched.OutcomeCanceled)
		return false
	}
	var err error
	if bf, ok := a.w.(httpx.BodyFinisher); ok && final {
		err = bf.FinishBody()
	} else {
		err = rc.Flush()
	}
	if err != nil {
		x.canceled = true
		a.t.End(sched.OutcomeCanceled)
		return false
	}
	return true
}

// count does the bookkeeping of a read's token events once they are on
// their way to the client: output charged to the key, the first token
// (TTFT, the predictor's error) and the gaps between tokens (ITL). Events
// that arrived in one read arrived together: the first token's time is the
// read's, and the gaps between tokens of one read are zero. last is the
// previous token's time (zero before the first).
func (a *attempt) count(x *exchange, tokens int, arrived time.Time, last *time.Time, itl prometheus.Observer) {
	x.events += tokens
	if x.tok != nil && tokens > 0 {
		// Output counts against the key's token limit as it streams (a
		// token per token event; settleOutput adds what the usage reports
		// beyond), so that the key's next request is refused once the
		// budget is spent.
		x.tok.owe(tokens)
		x.charged += tokens
	}
	if tokens > 0 && last.IsZero() {
		tokens--
		ttft := a.t.FirstTokenAt(arrived)
		if x.ttft == 0 { // not again for a continued stream's next backend
			x.ttft = arrived.Sub(x.start)
			if x.span != nil {
				x.span.AddEvent(genaiattr.EventFirstToken, trace.WithTimestamp(arrived))
			}
		}
		if a.t.Prediction.Mean > 0 && ttft > 0 {
			a.g.m.predAPE.WithLabelValues(a.u.cfg.Name).Observe(math.Abs(ttft.Seconds()-a.t.Prediction.Mean.Seconds()) / ttft.Seconds())
		}
		*last = arrived
	}
	for ; tokens > 0; tokens-- {
		gap := arrived.Sub(*last)
		itl.Observe(gap.Seconds())
		if a.g.opts.OnRecord != nil {
			x.itl = append(x.itl, ms(gap))
		}
		*last = arrived
	}
}

// endStream ends a stream's attempt after its last read. A complete stream
// (its end marker, or the backend's own error event at its end) is done; a
// client gone is the client's doing; otherwise the backend cut it, stalled
// or sent an event too large to translate, and the client's stream ends
// with an error event of its API (only whole events were forwarded, so
// nothing is duplicated or half-sent). bufLen is the stream buffer's size.
func (a *attempt) endStream(x *exchange, rc *http.ResponseController, readErr error, complete bool, bufLen int) *attemptError {
	if complete {
		a.t.End(sched.OutcomeOK)
		return nil
	}
	// The backend stopped before its end marker: cut, killed or stalled.
	if a.ctx.Err() != nil && !a.stalled.Load() {
		x.canceled = true
		a.t.End(sched.OutcomeCanceled)
		return nil
	}
	name, idle := a.u.cfg.Name, a.lim.IdleStreamTimeout.Std()
	reason := "cut"
	msg := fmt.Sprintf("backend %s ended the stream before it was complete", name)
	if readErr == errEventTooLarge {
		reason, msg = "untranslatable", fmt.Sprintf("backend %s sent an event larger than %d KiB, which cannot be translated to the %s API", name, bufLen>>10, x.api.Provider())
	}
	if a.stalled.Load() {
		reason = "stall"
		msg = fmt.Sprintf("backend %s sent nothing for %v", name, idle)
	}
	a.g.m.streamErr.WithLabelValues(name, reason).Inc()
	a.t.End(sched.OutcomeFailed)
	if x.splice != nil && readErr != errEventTooLarge {
		// Another backend may finish it (continue.go), which also ends
		// the stream with the error event where none can.
		return &attemptError{status: http.StatusBadGateway, reason: reason, msg: msg, committed: true, continuable: true}
	}
	rc.SetWriteDeadline(time.Now().Add(idle))
	a.w.Write(errorEvent(x.api, msg))
	rc.Flush()
	x.errMsg = msg
	return nil
}

// hopHeaders are never forwarded in either direction; clientSecrets are the
// client's credentials, never passed to a backend.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Proxy-Authenticate"}
var clientSecrets = []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie", "Api-Key"}

// notForwarded are the request headers (canonical keys, as the server
// stores them) never copied to a backend: hop-by-hop ones, the client's
// credentials, and those the gateway sets itself (length, encoding, trace
// context).
var notForwarded = func() map[string]bool {
	m := map[string]bool{"Accept-Encoding": true, "Content-Length": true, "Traceparent": true, "Tracestate": true}
	for _, k := range append(slices.Clone(hopHeaders), clientSecrets...) {
		m[k] = true
	}
	return m
}()

// dropConnectionTokens removes from h the headers that from's Connection
// header names: they are hop-by-hop too (RFC 9110 §7.6.1), e.g. the
// HTTP2-Settings of a client offering an h2c upgrade.
func dropConnectionTokens(h, from http.Header) {
	for _, v := range from["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
}

// setBackendAuth sets the backend's key (api_key_env) as its API expects
// it: x-api-key for Anthropic, Authorization: Bearer for OpenAI, both for
// backends speaking both.
func (g *Gateway) setBackendAuth(h http.Header, u *upstream) {
	if u.cfg.apiKey == "" {
		return
	}
	switch u.cfg.API {
	case "anthropic":
		h.Set("X-Api-Key", u.cfg.apiKey)
	default:
		h.Set("Authorization", "Bearer "+u.cfg.apiKey)
		if u.cfg.API == "both" {
			h.Set("X-Api-Key", u.cfg.apiKey)
		}
	}
}

// roundTrip sends one backend request: plain-http backends through the
// gateway's own HTTP/1.1 client (httpx.Client), others (https, or
// credentials in the URL, which http.Transport turns into basic auth)
// through the http.Client.
func (g *Gateway) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	if g.h1 != nil && req.URL.Scheme == "http" && req.URL.User == nil {
		return g.h1.RoundTrip(req, body)
	}
	return g.client.Do(req)
}

// readyToCommit reports whether the complete events in b include a token,
// the stream's end or an error event; end says that no byte follows b.
func readyToCommit(b []byte, anthropic, end bool) bool {
	ready := false
	splitEventsEnd(b, end, func(ev []byte) {
		if !ready {
			si := classify(ev, anthropic)
			ready = si.token || si.done || si.errEv
		}
	})
	return ready
}

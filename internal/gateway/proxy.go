package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/httpx"
	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/wire/translate"
)

// traceContext is the W3C propagator; a value, not the global one.
var traceContext = propagation.TraceContext{}

// Span attributes for routing decisions.
const (
	attrPolicy       = attribute.Key("ttft.gateway.policy")
	attrReason       = attribute.Key("ttft.gateway.reason")
	attrPredMean     = attribute.Key("ttft.gateway.predicted_ttft")
	attrPredP95      = attribute.Key("ttft.gateway.predicted_ttft_p95")
	attrPredictor    = attribute.Key("ttft.gateway.predictor")
	attrSLO          = attribute.Key("ttft.gateway.slo")
	attrSLOClass     = attribute.Key("ttft.gateway.slo_class")
	attrAttempts     = attribute.Key("ttft.gateway.attempts")
	attrCachedTokens = attribute.Key("ttft.gateway.cached_prompt_tokens")
	attrCandidates   = attribute.Key("ttft.gateway.candidates")
	attrTranslated   = attribute.Key("ttft.gateway.translated")
)

// Headers the gateway reads or sets.
const (
	HeaderSLOMs    = "X-Ttft-Slo-Ms"
	HeaderSLOClass = "X-Slo-Class"
	HeaderBackend  = "X-Ttft-Backend"
	HeaderAttempts = "X-Ttft-Attempts"
)

// exchange is one client request's bookkeeping, for metrics and the log.
type exchange struct {
	start time.Time
	// api is the client's: wire.OpenAIChat, wire.OpenAICompletions or
	// wire.Anthropic, by the endpoint it called.
	api       wire.API
	model     string
	stream    bool
	class     string
	slo       time.Duration
	key       string
	backend   string
	policy    string
	reason    string
	predicted time.Duration
	status    int
	attempts  int
	ttft      time.Duration
	outTokens int
	// inTokens are the prompt's tokens: the backend's usage when it
	// reports them (inUsage), else the gateway's estimate.
	inTokens  int
	inUsage   int
	maxTokens int
	events    int       // token events passed through
	itl       []float64 // gaps between token events, ms (only for OnRecord)
	errMsg    string
	canceled  bool
	admission string
	// tok is the client key's token bucket (nil: no token limit), and
	// charged the output tokens charged to it so far.
	tok     *bucket
	charged int
	// translated is "from->to" when the backend speaks the other API.
	translated string
	span       trace.Span
	// respID and respModel are the answer's id and model as the backend
	// reported them (its first event, or the whole answer), for the
	// spans' gen_ai.response.id and gen_ai.response.model.
	respID, respModel string
	respRead          bool // the first answer event has been looked at
	// splice carries a stream across backends when its route continues
	// streams cut mid-answer (continue.go); nil otherwise.
	splice *splice
}

// inference serves the API endpoints: it reads and checks the request
// (authorize, readBody, resolveSLO), opens its span, and hands it to route,
// which picks backends and tries them. Whatever happens, finish records it.
func (g *Gateway) inference(w http.ResponseWriter, r *http.Request, api wire.API) {
	st := g.st.Load()
	x := &exchange{start: time.Now(), api: api}
	defer g.finish(x)
	kl, ok := g.authorize(w, r, st, x)
	if !ok {
		return
	}
	if x.tok != nil {
		defer x.settleOutput()
	}
	body, ok := g.readBody(w, r, &st.cfg.Limits, x)
	if !ok {
		return
	}
	rb, err := llmreq.Parse(body)
	if err != nil {
		x.status, x.errMsg = http.StatusBadRequest, "invalid JSON body"
		writeError(w, api, x.status, "invalid_request_error", "request body is not valid JSON: "+err.Error())
		return
	}
	x.model, x.stream, x.maxTokens = rb.Model, rb.Stream, max(rb.MaxTokens, rb.MaxCompletionTokens)
	if rb.Model == "" {
		x.status = http.StatusBadRequest
		writeError(w, api, x.status, "invalid_request_error", `"model" is required`)
		return
	}
	h := g.hashers.Get().(*sched.BlockHasher)
	h.Reset()
	defer g.hashers.Put(h)
	rb.Hash(h)
	promptTokens := h.Bytes() / 4
	x.inTokens = promptTokens
	if kl != nil && kl.tok != nil {
		if ok, wait := kl.tok.allow(x.start, float64(promptTokens)); !ok {
			g.rateLimited(w, x, wait, "token rate limit exceeded for key "+x.key)
			return
		}
	}
	route := st.routes[rb.Model]
	slo, class, err := resolveSLO(r.Header, route, st, rb.Model)
	if err != nil {
		x.status, x.errMsg = http.StatusBadRequest, err.Error()
		writeError(w, api, x.status, "invalid_request_error", err.Error())
		return
	}
	x.slo, x.class = slo, class
	ctx, span := g.startSpan(r, x, &rb)
	g.budget.deposit(st.cfg.Retry.Budget)
	sreq := sched.Request{API: api.Provider(), Model: rb.Model, PromptTokens: promptTokens, Blocks: h.Hashes(), SLO: slo, Class: class, MaxTokens: x.maxTokens}
	x.splice = g.newSplice(st, x, route)
	g.route(ctx, w, r, st, x, &sreq, route, body, span)
}

// authorize checks the method, the client's key and the key's request
// rate. It returns the key's limits (nil when keys are off, and x.tok its
// token bucket), or false when the client has been answered.
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, st *state, x *exchange) (*keyLimits, bool) {
	if r.Method != http.MethodPost {
		x.status = http.StatusMethodNotAllowed
		writeError(w, x.api, x.status, "invalid_request_error", "use POST")
		return nil, false
	}
	ck, status, msg := g.authenticate(st, r)
	if status != 0 {
		x.status, x.errMsg = status, msg
		writeError(w, x.api, status, "authentication_error", msg)
		return nil, false
	}
	if ck == nil {
		return nil, true
	}
	x.key = ck.Name
	kl := g.limits.get(ck, x.start)
	if kl.req != nil {
		if ok, wait := kl.req.allow(x.start, 1); !ok {
			g.rateLimited(w, x, wait, "request rate limit exceeded for key "+ck.Name)
			return nil, false
		}
	}
	x.tok = kl.tok
	return kl, true
}

// readBody reads the request body within limits.max_body_bytes and
// limits.header_timeout. On failure the client has been answered (or has
// gone away) and ok is false.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, lim *Limits, x *exchange) (body []byte, ok bool) {
	if r.ContentLength > lim.MaxBodyBytes {
		// Refused on its declared length, before a byte of it is read
		// (or, to a client waiting for 100 Continue, asked for).
		x.status, x.errMsg = http.StatusRequestEntityTooLarge, "body too large"
		writeError(w, x.api, x.status, "invalid_request_error", fmt.Sprintf("request body exceeds %d bytes", lim.MaxBodyBytes))
		return nil, false
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(lim.HeaderTimeout.Std()))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, lim.MaxBodyBytes))
	rc.SetReadDeadline(time.Time{})
	if err == nil {
		return body, true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		x.status, x.errMsg = http.StatusRequestEntityTooLarge, "body too large"
		writeError(w, x.api, x.status, "invalid_request_error", fmt.Sprintf("request body exceeds %d bytes", lim.MaxBodyBytes))
		return nil, false
	}
	// A body whose framing the server found malformed is the client's
	// error, not a client that went away.
	if httpx.MalformedRequest(r, err) {
		x.status, x.errMsg = http.StatusBadRequest, "malformed request body: "+err.Error()
		w.Header().Set("Connection", "close")
		writeError(w, x.api, x.status, "invalid_request_error", x.errMsg)
		return nil, false
	}
	x.status, x.errMsg, x.canceled = 499, "reading body: "+err.Error(), true
	return nil, false
}

// startSpan continues the client's trace: a server span named per the
// GenAI conventions when tracing is on (finish ends it), else just the
// client's trace context, which still goes to the backend.
func (g *Gateway) startSpan(r *http.Request, x *exchange, rb *llmreq.Request) (context.Context, trace.Span) {
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	if !g.tracing {
		return ctx, trace.SpanFromContext(ctx)
	}
	op := "chat"
	if x.api == wire.OpenAICompletions {
		op = "text_completion"
	}
	ctx, span := g.tracer.Start(ctx, op+" "+rb.Model, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		genaiattr.AttrOperationName.String(op), genaiattr.AttrProviderName.String(x.api.Provider()), genaiattr.AttrRequestModel.String(rb.Model),
		genaiattr.AttrRequestMaxTokens.Int(max(rb.MaxTokens, rb.MaxCompletionTokens)), genaiattr.AttrRequestStream.Bool(rb.Stream),
		attrSLOClass.String(x.class), attrSLO.Float64(x.slo.Seconds())))
	x.span = span // ended by finish, after the outcome is known
	serverSpanHTTP(span, r)
	return ctx, span
}

// route picks a backend for the request and tries it, retrying on others
// while nothing has reached the client (within retry.attempts and the
// retry budget), and answers the client whatever happens.
func (g *Gateway) route(ctx context.Context, w http.ResponseWriter, r *http.Request, st *state, x *exchange, sreq *sched.Request, route *Route, body []byte, span trace.Span) {
	degraded := false
	var lastErr *attemptError
	// retryFrom is the backend whose failure the next attempt retries: the
	// retry is counted once that attempt is sent, not when it is decided
	// (there may be no other backend to retry on).
	retryFrom, retryReason := "", ""
	for {
		// Under admission reject or degrade Pick decides admission itself
		// (sched.Request.Admit), before it dispatches anything; under
		// best-effort the routing prediction's verdict is only counted.
		sreq.Admit = route != nil && route.Admission != AdmitBestEffort && !degraded
		t, err := g.pick(st, sreq, x, lastErr == nil)
		var refused *sched.Refused
		if errors.As(err, &refused) {
			if retryFrom != "" {
				g.budget.deposit(1) // the retry withdrawn for did not happen
				retryFrom = ""
			}
			x.backend, x.predicted = refused.Backend, refused.Estimate.Bound
			switch g.admission(w, x, route, refused.RetryAfter) {
			case admitDone:
				return
			case admitDegrade:
				if nb, err := setModel(body, route.DegradeTo); err == nil {
					degraded, body = true, nb
					x.admission = "degrade"
					g.m.admission.WithLabelValues("degrade").Inc()
					sreq.Model, x.model = route.DegradeTo, route.DegradeTo
					continue
				}
				// A body that cannot be given another model is tried
				// where the profile picked, as best-effort.
				sreq.Admit = false
				t, err = g.pick(st, sreq, x, lastErr == nil)
			}
		}
		if err != nil {
			if retryFrom != "" {
				g.budget.deposit(1) // the retry withdrawn for did not happen
			}
			unrouted(w, x, span, lastErr, err)
			return
		}
		x.attempts++
		g.decided(x, t, span)
		if !t.MeetsSLO && !sreq.Admit && !degraded {
			x.admission = "best-effort"
			g.m.admission.WithLabelValues("best-effort").Inc()
		}
		u := st.ups[t.Backend.Name()]
		bx, ok := forBackend(w, r, x, t, u, body)
		if !ok {
			return
		}
		if retryFrom != "" {
			g.m.retries.WithLabelValues(retryFrom, retryReason).Inc()
			retryFrom = ""
		}
		if sp := x.splice; sp != nil {
			sp.api, sp.path, sp.body = bx.api, bx.path, bx.body // what a continuation starts from
		}
		ae := g.tracedAttempt(ctx, w, r, x, t, u, bx, st.cfg.Limits) // a CLIENT span per attempt (tracing.go)
		if ae == nil {
			return
		}
		if ae.continuable {
			g.continueStream(ctx, w, r, st, x, sreq, t.Backend.Name(), ae)
			return
		}
		if !ae.retriable || ae.committed {
			x.status, x.errMsg = ae.status, ae.msg
			if !ae.committed {
				writeAttemptError(w, x.api, ae, ae.msg)
			}
			return
		}
		lastErr = reportable(lastErr, ae)
		if x.attempts >= st.cfg.Retry.Attempts || !g.budget.withdraw() {
			x.status, x.errMsg = lastErr.status, lastErr.msg
			span.SetStatus(codes.Error, x.errMsg)
			writeAttemptError(w, x.api, lastErr, fmt.Sprintf("backend failed after %d attempt(s): %s", x.attempts, x.errMsg))
			return
		}
		retryFrom, retryReason = t.Backend.Name(), ae.reason
		sreq.Exclude = append(sreq.Exclude, t.Backend.Name())
	}
}

// pick asks the scheduler for a backend. When none serves the model over
// the client's API, a chat request's first pick (first: no attempt failed
// yet) goes to one speaking the other API, through translation.
func (g *Gateway) pick(st *state, sreq *sched.Request, x *exchange, first bool) (*sched.Ticket, error) {
	t0 := time.Now()
	t, err := st.sched.Pick(sreq)
	if errors.Is(err, sched.ErrNoBackend) && sreq.API == x.api.Provider() && first && *st.cfg.Translate && x.api != wire.OpenAICompletions {
		sreq.API = otherAPI(x.api).Provider()
		t, err = st.sched.Pick(sreq)
	}
	g.m.schedTime.Observe(time.Since(t0).Seconds())
	return t, err
}

// unrouted answers a request for which pick found no backend (err): with
// the last failed attempt's status when there was one.
func unrouted(w http.ResponseWriter, x *exchange, span trace.Span, lastErr *attemptError, err error) {
	switch {
	case lastErr != nil:
		x.status, x.errMsg = lastErr.status, lastErr.msg
		span.SetStatus(codes.Error, x.errMsg)
		writeAttemptError(w, x.api, lastErr, x.errMsg)
		return
	case errors.Is(err, sched.ErrNoBackend):
		x.status, x.errMsg = http.StatusNotFound, err.Error()
	default:
		x.status, x.errMsg = http.StatusServiceUnavailable, err.Error()
	}
	span.SetStatus(codes.Error, x.errMsg)
	writeError(w, x.api, x.status, "api_error", x.errMsg)
}

// decided records the scheduler's decision: in the exchange, the decisions
// metric and the span.
func (g *Gateway) decided(x *exchange, t *sched.Ticket, span trace.Span) {
	x.backend, x.policy, x.reason, x.predicted = t.Backend.Name(), t.Policy, t.Reason, t.Prediction.P95
	g.m.decisions.WithLabelValues(t.Policy, t.Reason, t.Backend.Name()).Inc()
	if span.IsRecording() {
		span.SetAttributes(genaiattr.AttrBackend.String(t.Backend.Name()), attrPolicy.String(t.Policy), attrReason.String(t.Reason),
			attrPredMean.Float64(t.Prediction.Mean.Seconds()), attrPredP95.Float64(t.Prediction.P95.Seconds()),
			attrPredictor.String(t.Prediction.Predictor), attrCachedTokens.Int(t.CachedTokens), attrCandidates.Int(t.Candidates))
	}
}

// What admission decides for a request no backend is predicted to serve
// within its SLO.
type admitVerdict int

const (
	admitDegrade admitVerdict = iota // re-route to the route's degrade_to
	admitDone                        // refused: the client has its 429
)

// admission applies the route's admission policy to a request Pick
// refused (no backend predicted to meet its SLO): reject answers 429 with
// Retry-After (retry, at least a second), degrade re-routes it to the
// route's lighter model.
func (g *Gateway) admission(w http.ResponseWriter, x *exchange, route *Route, retry time.Duration) admitVerdict {
	if route.Admission == AdmitReject {
		x.admission = "reject"
		g.m.admission.WithLabelValues("reject").Inc()
		retry = max(time.Second, retry)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
		x.status, x.errMsg = http.StatusTooManyRequests, "no backend can meet the TTFT SLO"
		writeError(w, x.api, x.status, "rate_limit_error", fmt.Sprintf("no backend is predicted to meet the %v TTFT SLO; retry later", x.slo))
		return admitDone
	}
	return admitDegrade
}

// forBackend is the request as backend u takes it: in its own API,
// translated when that is not the client's. ok is false when the request
// cannot be translated (the client has been answered 400).
func forBackend(w http.ResponseWriter, r *http.Request, x *exchange, t *sched.Ticket, u *upstream, body []byte) (bx backendExchange, ok bool) {
	bx = backendExchange{api: x.api, path: r.URL.Path, body: body}
	if u.speaks(x.api) {
		return bx, true
	}
	bx.api = otherAPI(x.api)
	bx.path = bx.api.Path()
	var err error
	if bx.body, err = translate.Request(body, x.api, bx.api); err != nil {
		t.End(sched.OutcomeCanceled)
		x.status, x.errMsg = http.StatusBadRequest, err.Error()
		writeError(w, x.api, x.status, "invalid_request_error", fmt.Sprintf("backend %s speaks the %s API and this request cannot be translated to it: %v", u.cfg.Name, bx.api.Provider(), err))
		return bx, false
	}
	x.translated = x.api.Provider() + "->" + bx.api.Provider()
	return bx, true
}

// reportable is the failure a request's client hears of, given the one
// reported so far (prev, nil for none) and a new one: 429, with the
// soonest Retry-After, only when every backend tried answered 429 (waiting
// is then the remedy); otherwise the latest other failure.
func reportable(prev, ae *attemptError) *attemptError {
	if prev == nil {
		return ae
	}
	busy := http.StatusTooManyRequests
	switch {
	case prev.status == busy && ae.status == busy:
		if ae.retryAfter == "" {
			ae.retryAfter = prev.retryAfter
		} else if p, err := strconv.Atoi(prev.retryAfter); err == nil {
			if a, err := strconv.Atoi(ae.retryAfter); err == nil && p < a {
				ae.retryAfter = prev.retryAfter
			}
		}
		return ae
	case ae.status == busy:
		return prev
	}
	return ae
}

// writeAttemptError answers with a failed attempt's status; a 429 carries
// the backend's Retry-After.
func writeAttemptError(w http.ResponseWriter, api wire.API, ae *attemptError, msg string) {
	typ := "api_error"
	if ae.status == http.StatusTooManyRequests {
		typ = "rate_limit_error"
		if ae.retryAfter != "" {
			w.Header().Set("Retry-After", ae.retryAfter)
		}
	}
	writeError(w, api, ae.status, typ, msg)
}

func (g *Gateway) rateLimited(w http.ResponseWriter, x *exchange, wait time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	x.status, x.errMsg = http.StatusTooManyRequests, msg
	writeError(w, x.api, x.status, "rate_limit_error", msg)
}

// resolveSLO picks the request's TTFT target: x-ttft-slo-ms, then
// x-slo-class, then the model's route, then the gateway default class, then
// the class of a backend serving the model.
func resolveSLO(h http.Header, route *Route, st *state, model string) (time.Duration, string, error) {
	if v := h.Get(HeaderSLOMs); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		// Written so that NaN (which ParseFloat accepts) fails it, as does
		// a value that rounds to no time at all.
		if err != nil || !(ms > 0 && ms <= 3_600_000) || time.Duration(ms*float64(time.Millisecond)) <= 0 {
			return 0, "", fmt.Errorf("header %s: %q is not a positive number of milliseconds", HeaderSLOMs, v)
		}
		class := "custom"
		if c := h.Get(HeaderSLOClass); c != "" {
			if _, ok := sched.ClassSLO(c); ok {
				class = strings.ToLower(c)
			}
		}
		return time.Duration(ms * float64(time.Millisecond)), class, nil
	}
	if v := h.Get(HeaderSLOClass); v != "" {
		c, err := sched.ParseClass(v)
		if err != nil {
			return 0, "", fmt.Errorf("header %s: %w", HeaderSLOClass, err)
		}
		d, _ := sched.ClassSLO(c)
		return d, c, nil
	}
	if route != nil {
		if route.SLOMs > 0 {
			return time.Duration(route.SLOMs) * time.Millisecond, "route", nil
		}
		if route.SLOClass != "" {
			d, _ := sched.ClassSLO(route.SLOClass)
			return d, route.SLOClass, nil
		}
	}
	c := st.cfg.SLOClass
	if c == "" {
		c = st.modelClass[model]
	}
	if c != "" {
		d, _ := sched.ClassSLO(c)
		return d, c, nil
	}
	return 0, "none", nil
}

// setModel rewrites the body's "model" (degrading to a lighter model).
func setModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	mb, _ := json.Marshal(model)
	m["model"] = mb
	return json.Marshal(m)
}

// attemptError is a failed attempt: retriable ones happened before any byte
// reached the client.
type attemptError struct {
	status    int
	msg       string
	reason    string
	retriable bool
	committed bool
	// continuable: a stream cut after tokens reached the client, which
	// may go on on another backend (continue.go).
	continuable bool
	// retryAfter is a backend's 429 Retry-After header.
	retryAfter string
}

// backendExchange is the request as the chosen backend gets it: in its own
// API (translated when that is not the client's).
type backendExchange struct {
	api  wire.API
	path string
	body []byte
}

// otherAPI is the API a chat request in api is translated to.
func otherAPI(api wire.API) wire.API {
	if api == wire.Anthropic {
		return wire.OpenAIChat
	}
	return wire.Anthropic
}

// speaks reports whether the backend takes requests in api.
func (u *upstream) speaks(api wire.API) bool {
	return u.cfg.API == api.Provider() || u.cfg.API == "both" || u.cfg.API == ""
}

// usageFrom reads the token usage of a whole (not streamed) answer in
// either API.
func (x *exchange) usageFrom(body []byte) {
	if !x.respRead {
		x.respRead = true
		x.respID, x.respModel = stringAfter(body, kID), stringAfter(body, kModel)
	}
	if !bytes.Contains(body, []byte(`"usage"`)) {
		return
	}
	x.outTokens = max(intAfter(body, kCompTok), intAfter(body, kOutTok))
	if in := max(intAfter(body, kPromptTok), intAfter(body, kInTok)); in > 0 {
		x.inTokens, x.inUsage = in, in
	}
}

// settleOutput charges the key's token bucket for the output tokens the
// backend's usage reports beyond those charged as they streamed: all of a
// whole answer's.
func (x *exchange) settleOutput() {
	if n := x.outTokens - x.charged; n > 0 {
		x.tok.charge(time.Now(), float64(n))
		x.charged += n
	}
}

// writeError answers in the API's own error shape.
func writeError(w http.ResponseWriter, api wire.API, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b := make([]byte, 0, len(msg)+96)
	if api == wire.Anthropic {
		b = append(b, `{"type":"error","error":{"type":"`...)
		b = append(b, typ...)
		b = append(b, `","message":`...)
		b = jsonscan.AppendString(b, msg)
		b = append(b, "}}\n"...)
	} else {
		b = append(b, `{"error":{"message":`...)
		b = jsonscan.AppendString(b, msg)
		b = append(b, `,"type":"`...)
		b = append(b, typ...)
		b = append(b, `","code":`...)
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, "}}\n"...)
	}
	w.Write(b)
}

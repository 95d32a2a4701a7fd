package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
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

// contentText flattens a message content that is either a string or an
// array of parts ({"type":"text","text":...}): OpenAI and Anthropic both
// allow both shapes, and the same text must hash alike in all four.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &parts) == nil {
			var b strings.Builder
			for _, p := range parts {
				b.WriteString(p.Text)
			}
			return b.String()
		}
		// A completions prompt may be an array of strings.
		var ss []string
		if json.Unmarshal(raw, &ss) == nil {
			return strings.Join(ss, "")
		}
	}
	return ""
}

// hashPrompt canonicalises the prompt into h: a system prompt (OpenAI system
// message or Anthropic "system") first, then each message as (role, text).
func hashPrompt(h *sched.BlockHasher, rb *parsedRequest) {
	if rb.System != "" {
		h.Segment("system", rb.System)
	}
	for _, m := range rb.Messages {
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		h.Segment(role, m.Text)
	}
	h.Text(rb.Prompt)
}

// exchange is one client request's bookkeeping, for metrics and the log.
type exchange struct {
	start     time.Time
	api       string
	anthropic bool
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
}

func (g *Gateway) inference(w http.ResponseWriter, r *http.Request, anthropic bool) {
	st := g.st.Load()
	x := &exchange{start: time.Now(), anthropic: anthropic, api: "openai"}
	if anthropic {
		x.api = "anthropic"
	}
	defer g.finish(x)
	if r.Method != http.MethodPost {
		x.status = http.StatusMethodNotAllowed
		writeError(w, anthropic, x.status, "invalid_request_error", "use POST")
		return
	}
	ck, status, msg := g.authenticate(st, r)
	if status != 0 {
		x.status, x.errMsg = status, msg
		writeError(w, anthropic, status, "authentication_error", msg)
		return
	}
	var kl *keyLimits
	if ck != nil {
		x.key = ck.Name
		kl = g.limits.get(ck, x.start)
		if kl.req != nil {
			if ok, wait := kl.req.allow(x.start, 1); !ok {
				g.rateLimited(w, x, wait, "request rate limit exceeded for key "+ck.Name)
				return
			}
		}
		if kl.tok != nil {
			x.tok = kl.tok
			defer x.settleOutput()
		}
	}
	lim := st.cfg.Limits
	if r.ContentLength > lim.MaxBodyBytes {
		// Refused on its declared length, before a byte of it is read
		// (or, to a client waiting for 100 Continue, asked for).
		x.status, x.errMsg = http.StatusRequestEntityTooLarge, "body too large"
		writeError(w, anthropic, x.status, "invalid_request_error", fmt.Sprintf("request body exceeds %d bytes", lim.MaxBodyBytes))
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(lim.HeaderTimeout.Std()))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, lim.MaxBodyBytes))
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			x.status, x.errMsg = http.StatusRequestEntityTooLarge, "body too large"
			writeError(w, anthropic, x.status, "invalid_request_error", fmt.Sprintf("request body exceeds %d bytes", lim.MaxBodyBytes))
			return
		}
		// A body whose framing the server found malformed (h1server.go;
		// nethttp.go behind Go's server) is the client's error, not a
		// client that went away.
		var he *httpError
		if errors.As(err, &he) || framingBroken(r) {
			x.status, x.errMsg = http.StatusBadRequest, "malformed request body: "+err.Error()
			w.Header().Set("Connection", "close")
			writeError(w, anthropic, x.status, "invalid_request_error", x.errMsg)
			return
		}
		x.status, x.errMsg, x.canceled = 499, "reading body: "+err.Error(), true
		return
	}
	rb, err := parseRequest(body)
	if err != nil {
		x.status, x.errMsg = http.StatusBadRequest, "invalid JSON body"
		writeError(w, anthropic, x.status, "invalid_request_error", "request body is not valid JSON: "+err.Error())
		return
	}
	x.model, x.stream, x.maxTokens = rb.Model, rb.Stream, max(rb.MaxTokens, rb.MaxCompletionTokens)
	if rb.Model == "" {
		x.status = http.StatusBadRequest
		writeError(w, anthropic, x.status, "invalid_request_error", `"model" is required`)
		return
	}
	h := g.hashers.Get().(*sched.BlockHasher)
	h.Reset()
	defer g.hashers.Put(h)
	hashPrompt(h, &rb)
	promptTokens := h.Bytes() / 4
	x.inTokens = promptTokens
	if kl != nil && kl.tok != nil {
		if ok, wait := kl.tok.allow(x.start, float64(promptTokens)); !ok {
			g.rateLimited(w, x, wait, "token rate limit exceeded for key "+ck.Name)
			return
		}
	}
	route := st.routes[rb.Model]
	slo, class, err := resolveSLO(r.Header, route, st, rb.Model)
	if err != nil {
		x.status, x.errMsg = http.StatusBadRequest, err.Error()
		writeError(w, anthropic, x.status, "invalid_request_error", err.Error())
		return
	}
	x.slo, x.class = slo, class

	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	op := "chat"
	if r.URL.Path == "/v1/completions" {
		op = "text_completion"
	}
	var span trace.Span
	if g.tracing {
		ctx, span = g.tracer.Start(ctx, op+" "+rb.Model, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			genaiattr.AttrOperationName.String(op), genaiattr.AttrProviderName.String(x.api), genaiattr.AttrRequestModel.String(rb.Model),
			genaiattr.AttrRequestMaxTokens.Int(max(rb.MaxTokens, rb.MaxCompletionTokens)), genaiattr.AttrRequestStream.Bool(rb.Stream),
			attrSLOClass.String(class), attrSLO.Float64(slo.Seconds())))
		x.span = span // ended by finish, after the outcome is known
	} else {
		// Tracing off: no span to build, but the client's trace context
		// (extracted above) still goes to the backend.
		span = trace.SpanFromContext(ctx)
	}

	g.budget.deposit(st.cfg.Retry.Budget)
	sreq := sched.Request{API: x.api, Model: rb.Model, PromptTokens: promptTokens, Blocks: h.Hashes(), SLO: slo, Class: class}
	degraded := false
	var lastErr *attemptError
	// retryFrom is the backend whose failure the next attempt retries: the
	// retry is counted once that attempt is sent, not when it is decided
	// (there may be no other backend to retry on).
	retryFrom, retryReason := "", ""
	for {
		t0 := time.Now()
		t, err := st.sched.Pick(&sreq)
		if errors.Is(err, sched.ErrNoBackend) && sreq.API == x.api && lastErr == nil && *st.cfg.Translate && r.URL.Path != "/v1/completions" {
			// No backend serves the model over the client's API: one
			// speaking the other API will, through translation.
			sreq.API = otherAPI(x.api)
			t, err = st.sched.Pick(&sreq)
		}
		g.m.schedTime.Observe(time.Since(t0).Seconds())
		if err != nil {
			if retryFrom != "" {
				g.budget.deposit(1) // the retry withdrawn for did not happen
			}
			switch {
			case lastErr != nil:
				x.status, x.errMsg = lastErr.status, lastErr.msg
				span.SetStatus(codes.Error, x.errMsg)
				writeAttemptError(w, anthropic, lastErr, x.errMsg)
				return
			case errors.Is(err, sched.ErrNoBackend):
				x.status, x.errMsg = http.StatusNotFound, err.Error()
			default:
				x.status, x.errMsg = http.StatusServiceUnavailable, err.Error()
			}
			span.SetStatus(codes.Error, x.errMsg)
			writeError(w, anthropic, x.status, "api_error", x.errMsg)
			return
		}
		x.attempts++
		x.backend, x.policy, x.reason, x.predicted = t.Backend.Name(), t.Policy, t.Reason, t.Prediction.P95
		g.m.decisions.WithLabelValues(t.Policy, t.Reason, t.Backend.Name()).Inc()
		if span.IsRecording() {
			span.SetAttributes(genaiattr.AttrBackend.String(t.Backend.Name()), attrPolicy.String(t.Policy), attrReason.String(t.Reason),
				attrPredMean.Float64(t.Prediction.Mean.Seconds()), attrPredP95.Float64(t.Prediction.P95.Seconds()),
				attrPredictor.String(t.Prediction.Predictor), attrCachedTokens.Int(t.CachedTokens), attrCandidates.Int(t.Candidates))
		}
		if !t.MeetsSLO && route != nil && route.Admission != AdmitBestEffort {
			if route.Admission == AdmitReject {
				t.End(sched.OutcomeCanceled)
				x.admission = "reject"
				g.m.admission.WithLabelValues("reject").Inc()
				retry := max(time.Second, t.Prediction.P95-slo)
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
				x.status, x.errMsg = http.StatusTooManyRequests, "no backend can meet the TTFT SLO"
				writeError(w, anthropic, x.status, "rate_limit_error", fmt.Sprintf("no backend is predicted to meet the %v TTFT SLO; retry later", slo))
				return
			}
			if !degraded {
				t.End(sched.OutcomeCanceled)
				nb, err := setModel(body, route.DegradeTo)
				if err == nil {
					degraded, body = true, nb
					x.admission = "degrade"
					g.m.admission.WithLabelValues("degrade").Inc()
					sreq.Model, x.model = route.DegradeTo, route.DegradeTo
					x.attempts--
					continue
				}
			}
		} else if !t.MeetsSLO {
			x.admission = "best-effort"
			g.m.admission.WithLabelValues("best-effort").Inc()
		}
		u := st.ups[t.Backend.Name()]
		bx := backendExchange{api: x.api, path: r.URL.Path, body: body}
		if !u.speaks(x.api) {
			bx.api = otherAPI(x.api)
			bx.path = apiPath(bx.api)
			if bx.body, err = translateRequest(body, x.api, bx.api); err != nil {
				t.End(sched.OutcomeCanceled)
				x.status, x.errMsg = http.StatusBadRequest, err.Error()
				writeError(w, anthropic, x.status, "invalid_request_error", fmt.Sprintf("backend %s speaks the %s API and this request cannot be translated to it: %v", u.cfg.Name, bx.api, err))
				return
			}
			x.translated = x.api + "->" + bx.api
		}
		if retryFrom != "" {
			g.m.retries.WithLabelValues(retryFrom, retryReason).Inc()
			retryFrom = ""
		}
		ae := g.attempt(ctx, w, r, x, t, u, bx, lim)
		if ae == nil {
			return
		}
		if !ae.retriable || ae.committed {
			x.status, x.errMsg = ae.status, ae.msg
			if !ae.committed {
				writeAttemptError(w, anthropic, ae, ae.msg)
			}
			return
		}
		lastErr = reportable(lastErr, ae)
		if x.attempts >= st.cfg.Retry.Attempts || !g.budget.withdraw() {
			x.status, x.errMsg = lastErr.status, lastErr.msg
			span.SetStatus(codes.Error, x.errMsg)
			writeAttemptError(w, anthropic, lastErr, fmt.Sprintf("backend failed after %d attempt(s): %s", x.attempts, x.errMsg))
			return
		}
		retryFrom, retryReason = t.Backend.Name(), ae.reason
		sreq.Exclude = append(sreq.Exclude, t.Backend.Name())
	}
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
func writeAttemptError(w http.ResponseWriter, anthropic bool, ae *attemptError, msg string) {
	typ := "api_error"
	if ae.status == http.StatusTooManyRequests {
		typ = "rate_limit_error"
		if ae.retryAfter != "" {
			w.Header().Set("Retry-After", ae.retryAfter)
		}
	}
	writeError(w, anthropic, ae.status, typ, msg)
}

func (g *Gateway) rateLimited(w http.ResponseWriter, x *exchange, wait time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	x.status, x.errMsg = http.StatusTooManyRequests, msg
	writeError(w, x.anthropic, x.status, "rate_limit_error", msg)
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
	// retryAfter is a backend's 429 Retry-After header.
	retryAfter string
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

// attempt sends the request to one backend and, once the backend's first
// body byte arrives, commits to it and streams the answer through.
// Translation across APIs.
const (
	// anthropicVersion is sent to Anthropic backends when the client (an
	// OpenAI one) did not name a version.
	anthropicVersion = "2023-06-01"
	// maxTranslatedAnswer bounds a non-streamed answer read whole for
	// translation.
	maxTranslatedAnswer = 8 << 20
)

var errEventTooLarge = errors.New("event too large to translate")

// backendExchange is the request as the chosen backend gets it: in its own
// API (translated when that is not the client's).
type backendExchange struct {
	api  string // "openai" or "anthropic"
	path string
	body []byte
}

func otherAPI(api string) string {
	if api == apiAnthropic {
		return apiOpenAI
	}
	return apiAnthropic
}

// apiPath is the chat endpoint of api.
func apiPath(api string) string {
	if api == apiAnthropic {
		return "/v1/messages"
	}
	return "/v1/chat/completions"
}

// speaks reports whether the backend takes requests in api.
func (u *upstream) speaks(api string) bool {
	return u.cfg.API == api || u.cfg.API == "both" || u.cfg.API == ""
}

func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, t *sched.Ticket, u *upstream, bx backendExchange, lim Limits) *attemptError {
	body := bx.body
	crossing := bx.api != x.api
	backendAnthropic := bx.api == apiAnthropic
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One timer bounds both the wait for the first byte and each later
	// silence; it cancels the backend request when it fires. A
	// non-streamed answer's first byte comes when all of it is generated,
	// so its wait has a bound of its own.
	var stalled atomic.Bool
	firstWait := lim.FirstByteTimeout.Std()
	if !x.stream {
		firstWait = lim.ResponseTimeout.Std()
	}
	timer := time.AfterFunc(firstWait, func() { stalled.Store(true); cancel() })
	defer timer.Stop()
	// sent is set once the whole request is on its way to the backend
	// (non-streamed requests only: only their timeouts ask).
	var sent atomic.Bool
	rctx := actx
	if !x.stream {
		rctx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				sent.Store(true)
			}
		}})
	}

	out, err := http.NewRequestWithContext(rctx, http.MethodPost, u.cfg.URL+bx.path, bytes.NewReader(body))
	if err != nil {
		t.End(sched.OutcomeCanceled)
		return &attemptError{status: http.StatusInternalServerError, msg: "building backend request: " + err.Error()}
	}
	out.URL.RawQuery = r.URL.RawQuery
	for k, vs := range r.Header {
		if !notForwarded[k] {
			out.Header[k] = vs
		}
	}
	dropConnectionTokens(out.Header, r.Header)
	out.ContentLength = int64(len(body))
	if crossing {
		if backendAnthropic {
			if out.Header.Get("Anthropic-Version") == "" {
				out.Header.Set("Anthropic-Version", anthropicVersion)
			}
		} else {
			out.Header.Del("Anthropic-Version")
			out.Header.Del("Anthropic-Beta")
		}
	}
	g.setBackendAuth(out.Header, u)
	traceContext.Inject(actx, propagation.HeaderCarrier(out.Header))

	// failAs ends an attempt that failed before anything reached the
	// client, as outcome o, unless the client went away (then it is the
	// client's doing: no mark against the backend, nothing to retry).
	failAs := func(o sched.Outcome, retriable bool, status int, reason, msg string) *attemptError {
		if ctx.Err() != nil && !stalled.Load() {
			o, retriable = sched.OutcomeCanceled, false
			x.canceled = true
		}
		t.End(o)
		return &attemptError{status: status, reason: reason, msg: msg, retriable: retriable}
	}
	fail := func(status int, reason, msg string) *attemptError {
		return failAs(sched.OutcomeFailed, true, status, reason, msg)
	}
	// timedOut ends an attempt the first-byte timer cut, with 504 whether
	// or not headers had come. A stream's first token is retried elsewhere.
	// A non-streamed answer the backend accepted (answer bytes came, or
	// the whole request was sent and health checks pass) is not: it is
	// long, and would be as long on another backend (three times the work,
	// then the same 504); nor is it held against the backend.
	timedOut := func(reason string, accepted bool) *attemptError {
		if x.stream {
			return fail(http.StatusGatewayTimeout, reason, fmt.Sprintf("backend %s sent no token within %v (limits.first_byte_timeout)", u.cfg.Name, lim.FirstByteTimeout.Std()))
		}
		msg := fmt.Sprintf("backend %s sent no answer within %v; limits.response_timeout bounds a non-streamed answer (or stream it)", u.cfg.Name, lim.ResponseTimeout.Std())
		if accepted {
			return failAs(sched.OutcomeNoVerdict, false, http.StatusGatewayTimeout, "response_timeout", msg)
		}
		return fail(http.StatusGatewayTimeout, "response_timeout", msg)
	}
	resp, err := g.roundTrip(out, body)
	if err != nil {
		if stalled.Load() {
			return timedOut("first_byte_timeout", sent.Load() && u.sb.Healthy())
		}
		return fail(http.StatusBadGateway, "connect", fmt.Sprintf("backend %s unreachable", u.cfg.Name))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		// The backend is up and shedding load: retried elsewhere, not
		// held against it; when every backend tried says 429, the client
		// gets 429 and the backend's Retry-After.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		ae := failAs(sched.OutcomeNoVerdict, true, http.StatusTooManyRequests, "status_429", fmt.Sprintf("backend %s answered 429 (too many requests)", u.cfg.Name))
		ae.retryAfter = resp.Header.Get("Retry-After")
		return ae
	}
	if resp.StatusCode >= 500 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fail(http.StatusBadGateway, "status_"+strconv.Itoa(resp.StatusCode), fmt.Sprintf("backend %s answered %d", u.cfg.Name, resp.StatusCode))
	}

	isStream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && resp.StatusCode == http.StatusOK
	// Before committing, a stream is read up to its first token event (its
	// end, an error event, or a full buffer): a backend that stalls or dies
	// before producing a token is retried elsewhere, and the client has
	// seen nothing. Events held back here (role announcements, message
	// starts) carry no token, so holding them costs the client no TTFT.
	bp := g.bufs.Get().(*[]byte)
	defer g.bufs.Put(bp)
	buf := *bp
	n := 0
	var rerr error
	var arrived time.Time // when the last bytes were read
	for {
		var m int
		m, rerr = resp.Body.Read(buf[n:])
		n += m
		if m > 0 {
			arrived = time.Now()
		}
		if n > 0 && (!isStream || n == len(buf) || readyToCommit(buf[:n], backendAnthropic, rerr != nil)) {
			break
		}
		if rerr != nil {
			if !isStream && n == 0 && rerr == io.EOF && resp.StatusCode >= 300 {
				break // an empty error answer is still an answer
			}
			if stalled.Load() {
				return timedOut("first_token_timeout", true)
			}
			return fail(http.StatusBadGateway, "cut_before_first_token", fmt.Sprintf("backend %s ended before its first token", u.cfg.Name))
		}
	}
	// The first-token timer must not fire once the client has been
	// answered: stop it before committing. If it already fired, the
	// backend request is cancelled, but the client has seen nothing, so a
	// stream is still retriable.
	if !timer.Stop() {
		return timedOut("first_token_timeout", true)
	}
	// A whole answer in the other API is read and translated before
	// anything is committed: one that cannot be translated is a gateway
	// error, not half an answer.
	var translated []byte
	if crossing && !isStream {
		whole := buf[:n:n]
		if rerr == nil {
			rest, err := io.ReadAll(io.LimitReader(resp.Body, maxTranslatedAnswer))
			if err != nil {
				return fail(http.StatusBadGateway, "cut", fmt.Sprintf("backend %s: reading its answer: %v", u.cfg.Name, err))
			}
			whole = append(whole, rest...)
		}
		var err error
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			translated, err = translateResponse(whole, bx.api, x.api)
		} else {
			translated = translateError(whole, resp.StatusCode, bx.api, x.api)
		}
		if err != nil {
			t.End(sched.OutcomeOK)
			return &attemptError{status: http.StatusBadGateway, msg: fmt.Sprintf("backend %s's answer could not be translated to the %s API: %v", u.cfg.Name, x.api, err)}
		}
		if resp.StatusCode == http.StatusOK {
			x.usageFrom(whole)
		}
	}

	// Committed: from here on nothing is retried.
	hdr := w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	dropConnectionTokens(hdr, resp.Header)
	for _, k := range hopHeaders {
		hdr.Del(k)
	}
	hdr.Set(HeaderBackend, u.cfg.Name)
	hdr.Set(HeaderAttempts, strconv.Itoa(x.attempts))
	if isStream || crossing {
		hdr.Del("Content-Length")
	}
	if crossing && !isStream {
		hdr.Set("Content-Type", "application/json")
	}
	x.status = resp.StatusCode
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)

	if crossing && !isStream {
		_, werr := w.Write(translated)
		o := sched.OutcomeOK
		if werr != nil && ctx.Err() != nil {
			o, x.canceled = sched.OutcomeCanceled, true
		}
		t.End(o)
		return nil
	}
	if !isStream {
		// Plain JSON answer: copy it with bounded memory.
		timer.Reset(lim.IdleStreamTimeout.Std())
		_, werr := w.Write(buf[:n])
		if werr == nil && rerr == nil {
			_, werr = io.Copy(w, resp.Body)
		}
		o := sched.OutcomeOK
		if werr != nil && ctx.Err() != nil {
			o, x.canceled = sched.OutcomeCanceled, true
		}
		if x.status == http.StatusOK {
			x.usageFrom(buf[:n])
		}
		t.End(o)
		return nil
	}

	// Streaming pass-through. pending holds bytes read but not yet written:
	// at most one incomplete event.
	timer.Reset(lim.IdleStreamTimeout.Std())
	itl := g.m.itl.WithLabelValues(u.cfg.Name)
	var tr *streamTranslator
	var xout []byte // the client's events, when translating
	if crossing {
		tr = newStreamTranslator(bx.api, x.api, x.model)
	}
	var last time.Time
	done, sawError := false, false
	pending := buf[:n]
	readErr := rerr
	for {
		if len(pending) > 0 {
			// Classify only (byte searches); the bookkeeping waits until
			// the bytes are on their way to the client, so that none of it
			// is in the client's TTFT or ITL.
			tokens := 0
			xout = xout[:0]
			k := splitEventsEnd(pending, readErr != nil, func(ev []byte) {
				si := classify(ev, backendAnthropic)
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
				done = done || si.done
				sawError = sawError || si.errEv
			})
			if k == 0 && len(pending) >= len(buf) {
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
			if k > 0 && len(out) > 0 {
				rc.SetWriteDeadline(arrived.Add(lim.IdleStreamTimeout.Std()))
				if _, err := w.Write(out); err != nil {
					x.canceled = true
					t.End(sched.OutcomeCanceled)
					return nil
				}
				var err error
				if bf, ok := w.(bodyFinisher); ok && done && readErr == io.EOF && k == len(pending) {
					// The backend's last event and its end came together:
					// the event and the end of the response leave in one
					// write, so the client is not woken for the end alone.
					err = bf.FinishBody()
				} else {
					err = rc.Flush()
				}
				if err != nil {
					x.canceled = true
					t.End(sched.OutcomeCanceled)
					return nil
				}
			}
			if k > 0 {
				pending = append(buf[:0], pending[k:]...)
			}
			// Events that arrived in one read arrived together: the first
			// token's time is the read's, and the gaps between tokens of
			// one read are zero.
			x.events += tokens
			if x.tok != nil && tokens > 0 {
				// Output counts against the key's token limit as it
				// streams (a token per token event; settleOutput adds
				// what the usage reports beyond), so that the key's next
				// request is refused once the budget is spent.
				x.tok.owe(tokens)
				x.charged += tokens
			}
			if tokens > 0 && last.IsZero() {
				tokens--
				ttft := t.FirstTokenAt(arrived)
				x.ttft = arrived.Sub(x.start)
				if x.span != nil {
					x.span.AddEvent(genaiattr.EventFirstToken, trace.WithTimestamp(arrived))
				}
				if t.Prediction.Mean > 0 && ttft > 0 {
					g.m.predAPE.WithLabelValues(u.cfg.Name).Observe(math.Abs(ttft.Seconds()-t.Prediction.Mean.Seconds()) / ttft.Seconds())
				}
				last = arrived
			}
			for ; tokens > 0; tokens-- {
				gap := arrived.Sub(last)
				itl.Observe(gap.Seconds())
				if g.opts.OnRecord != nil {
					x.itl = append(x.itl, ms(gap))
				}
				last = arrived
			}
		}
		if readErr != nil {
			break
		}
		var m int
		m, readErr = resp.Body.Read(buf[len(pending):cap(buf)])
		if m > 0 {
			arrived = time.Now()
			timer.Reset(lim.IdleStreamTimeout.Std())
			pending = buf[:len(pending)+m]
		}
	}
	if done || (readErr == io.EOF && len(pending) == 0 && sawError) {
		t.End(sched.OutcomeOK)
		return nil
	}
	// The backend stopped before its end marker: cut, killed or stalled.
	if ctx.Err() != nil && !stalled.Load() {
		x.canceled = true
		t.End(sched.OutcomeCanceled)
		return nil
	}
	reason := "cut"
	msg := fmt.Sprintf("backend %s ended the stream before it was complete", u.cfg.Name)
	if readErr == errEventTooLarge {
		reason, msg = "untranslatable", fmt.Sprintf("backend %s sent an event larger than %d KiB, which cannot be translated to the %s API", u.cfg.Name, len(buf)>>10, x.api)
	}
	if stalled.Load() {
		reason = "stall"
		msg = fmt.Sprintf("backend %s sent nothing for %v", u.cfg.Name, lim.IdleStreamTimeout.Std())
	}
	g.m.streamErr.WithLabelValues(u.cfg.Name, reason).Inc()
	t.End(sched.OutcomeFailed)
	rc.SetWriteDeadline(time.Now().Add(lim.IdleStreamTimeout.Std()))
	w.Write(errorEvent(x.anthropic, msg))
	rc.Flush()
	x.errMsg = msg
	return nil
}

// usageFrom reads the token usage of a whole (not streamed) answer in
// either API.
func (x *exchange) usageFrom(body []byte) {
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

// bodyFinisher is a ResponseWriter that can end its response before the
// handler returns (the gateway's own server, h1server.go).
type bodyFinisher interface{ FinishBody() error }

// roundTrip sends one backend request: plain-http backends through the
// gateway's own HTTP/1.1 client, others (https, or credentials in the URL,
// which http.Transport turns into basic auth) through the http.Client.
func (g *Gateway) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	if g.h1 != nil && req.URL.Scheme == "http" && req.URL.User == nil {
		return g.h1.roundTrip(req, body)
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

// finish records metrics and the access log line for one request.
func (g *Gateway) finish(x *exchange) {
	backend := x.backend
	if backend == "" {
		backend = "none"
	}
	class := x.class
	if class == "" {
		class = "none"
	}
	e2e := time.Since(x.start)
	code := strconv.Itoa(x.status)
	if x.canceled {
		code = "canceled"
	}
	g.m.requests.WithLabelValues(backend, class, code).Inc()
	if g.opts.OnFinish != nil && !x.canceled {
		g.opts.OnFinish(x.ttft, x.status >= 500 || x.status == 0 || x.errMsg != "")
	}
	if x.status != 0 && x.status < 400 {
		g.m.e2e.WithLabelValues(backend, class).Observe(e2e.Seconds())
		g.m.tokens.WithLabelValues(backend, "input").Add(float64(x.inTokens))
		g.m.tokens.WithLabelValues(backend, "output").Add(float64(x.outTokens))
		if u := g.st.Load().ups[x.backend]; u != nil && (u.cfg.Cost.InputPerMillion > 0 || u.cfg.Cost.OutputPerMillion > 0) {
			g.m.cost.WithLabelValues(backend).Add((float64(x.inTokens)*u.cfg.Cost.InputPerMillion + float64(x.outTokens)*u.cfg.Cost.OutputPerMillion) / 1e6)
		}
	}
	if x.ttft > 0 {
		g.m.ttft.WithLabelValues(backend, class).Observe(x.ttft.Seconds())
		if x.slo > 0 && x.ttft > x.slo {
			g.m.sloViol.WithLabelValues(backend, class).Inc()
		}
	}
	if x.span != nil {
		x.span.SetAttributes(genaiattr.AttrHTTPStatus.Int(x.status), attrAttempts.Int(x.attempts), genaiattr.AttrUsageOutputTokens.Int(x.outTokens))
		if x.translated != "" {
			x.span.SetAttributes(attrTranslated.String(x.translated))
		}
		if x.ttft > 0 {
			x.span.SetAttributes(genaiattr.AttrTimeToFirstChunk.Float64(x.ttft.Seconds()))
		}
		if x.slo > 0 && x.ttft > 0 {
			x.span.SetAttributes(genaiattr.AttrSLOViolated.Bool(x.ttft > x.slo))
		}
		if x.errMsg != "" && !x.canceled {
			x.span.SetStatus(codes.Error, x.errMsg)
		}
		x.span.End()
	}
	if g.opts.OnRecord != nil {
		g.opts.OnRecord(g.record(x, e2e))
	}
	if !*g.st.Load().cfg.AccessLog {
		return
	}
	if g.opts.AccessLog != nil {
		lp := g.lines.Get().(*[]byte)
		*lp = accessLine((*lp)[:0], time.Now(), x, e2e)
		g.opts.AccessLog.Write(*lp)
		g.lines.Put(lp)
		return
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "request", accessAttrs(x, e2e)...)
}

// record is the request as ttft's one record type (Options.OnRecord):
// times as the gateway saw them, from the request's arrival.
func (g *Gateway) record(x *exchange, e2e time.Duration) *record.Record {
	r := &record.Record{
		Index: int(g.recIndex.Add(1) - 1), Source: "gateway", Backend: x.backend, API: x.api, Model: x.model, Scenario: x.class,
		Intended: x.start, Sent: x.start, End: x.start.Add(e2e), ITLMs: x.itl,
		PromptTokens: x.inTokens, PromptTokensUsage: x.inUsage, OutputTokensUsage: x.outTokens, OutputEvents: x.events,
		MaxTokens: x.maxTokens, NotStreamed: !x.stream, Status: x.status, Error: x.errMsg,
	}
	if x.ttft > 0 {
		r.FirstToken = x.start.Add(x.ttft)
		r.FirstContent = r.FirstToken
	}
	if x.slo > 0 || x.predicted > 0 {
		r.ServerTimings = map[string]float64{}
		if x.slo > 0 {
			r.ServerTimings["gateway_slo"] = ms(x.slo)
		}
		if x.predicted > 0 {
			r.ServerTimings["gateway_predicted_ttft_p95"] = ms(x.predicted)
		}
	}
	switch {
	case x.canceled:
		r.ErrorClass = record.ErrCanceled
	case x.status == 0 || x.status >= 400:
		r.ErrorClass = record.ErrHTTPStatus
	case x.errMsg != "":
		r.ErrorClass = record.ErrStreamCut
	case x.stream && x.ttft == 0:
		r.ErrorClass = record.ErrNoTokens
	}
	if !x.stream && r.ErrorClass == record.ErrNone {
		r.FirstToken, r.FirstContent = r.End, r.End // a whole answer's first token is its end
	}
	r.Finalize()
	return r
}

// accessAttrs are the access log's fields when it goes through Logger
// (accessLine writes the same fields itself).
func accessAttrs(x *exchange, e2e time.Duration) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("api", x.api), slog.String("model", x.model), slog.Bool("stream", x.stream),
		slog.Int("status", x.status), slog.String("backend", x.backend), slog.String("policy", x.policy),
		slog.String("reason", x.reason), slog.String("slo_class", x.class),
		slog.Float64("slo_ms", ms(x.slo)), slog.Float64("predicted_p95_ms", ms(x.predicted)),
		slog.Float64("ttft_ms", ms(x.ttft)), slog.Float64("e2e_ms", ms(e2e)),
		slog.Int("attempts", x.attempts), slog.Int("output_tokens", x.outTokens),
	}
	if x.key != "" {
		attrs = append(attrs, slog.String("key", x.key))
	}
	if x.admission != "" {
		attrs = append(attrs, slog.String("admission", x.admission))
	}
	if x.translated != "" {
		attrs = append(attrs, slog.String("translated", x.translated))
	}
	if x.canceled {
		attrs = append(attrs, slog.Bool("client_canceled", true))
	}
	if x.errMsg != "" {
		attrs = append(attrs, slog.String("error", x.errMsg))
	}
	return attrs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeError answers in the API's own error shape.
func writeError(w http.ResponseWriter, anthropic bool, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	m := jsonString(msg)
	if anthropic {
		io.WriteString(w, `{"type":"error","error":{"type":"`+typ+`","message":`+m+"}}\n")
		return
	}
	io.WriteString(w, `{"error":{"message":`+m+`,"type":"`+typ+`","code":`+strconv.Itoa(status)+"}}\n")
}

var _ prometheus.Collector = (*stateCollector)(nil)

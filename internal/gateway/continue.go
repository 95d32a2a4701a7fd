package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/wire/translate"
)

// Mid-stream continuation: a backend that dies or stalls after tokens
// reached the client costs the client nothing. The gateway sends the
// request to another backend with the text already delivered as the start
// of the assistant's answer (OpenAI chat: a final assistant message with
// vLLM's continue_final_message; completions: the prompt followed by the
// text; Anthropic: an assistant prefill), drops what the new backend
// repeats, and splices its stream onto the old one: one stream, no text
// lost or twice, one usage block that adds up.
//
// The splice works on the backends' events (their API), before any
// translation to the client's: the same translator goes on across
// backends, so a translated stream continues as seamlessly.

// Why a stream cannot be continued (ttft_gateway_continuations_total's
// outcome "skipped_<reason>").
const (
	blockToolCall  = "tool_call"  // tool-call arguments were streamed: never continued mid-argument
	blockReasoning = "reasoning"  // reasoning text, which no continuation API carries
	blockEvent     = "event"      // an event the gateway could not read, or forwarded in pieces
	blockBody      = "body"       // the request cannot carry the text so far (n > 1, token-ID prompt, echo)
	blockMaxTokens = "max_tokens" // the answer had all its max_tokens
	blockExhausted = "exhausted"  // continuation.max continuations made
	blockDeadline  = "deadline"   // the request's time (limits.response_timeout from its arrival) is up
	blockNoBackend = "no_backend" // no other backend serves the model
	blockNoText    = "no_text"    // nothing but an empty answer so far
)

// splice is a streamed request's state across the backends that serve it.
// It lives on the request's exchange; only the request's goroutine uses it.
type splice struct {
	api  wire.API // the backends' (the splice is in their events)
	path string
	body []byte // the request as the first backend got it
	// text is what the client has been sent on the answer's channel (the
	// backends' text, before any translation); tokens the token events
	// that carried it.
	text    []byte
	tokens  int
	blocked string
	left    int // continuations still allowed
	// tr is the translator of a stream crossing APIs, kept across
	// backends.
	tr *translate.Stream
	// prompt is the prompt's tokens by the first backend's usage, when it
	// reported them before failing (Anthropic's message_start does).
	prompt int

	// The continuation in progress: cut is the text so far when it
	// began, base the tokens; holding says the new stream's text is
	// still being compared with cut (match bytes equal so far), held the
	// events kept back meanwhile.
	active      bool
	cut         []byte
	base        int
	holding     bool
	match       int
	held        []byte
	heldTok     int
	repeated    int // bytes of repeated text dropped, for the log
	repeatedTok int // and the token events that carried them
	// path lists the backends that served the stream, for the log.
	backends []string
}

// newSplice starts the splice of a streamed request when its route
// continues streams.
func (g *Gateway) newSplice(st *state, x *exchange, route *Route) *splice {
	c := &st.cfg.Continuation
	on := *c.Chat
	if x.api == wire.OpenAICompletions {
		on = *c.Completions
	}
	if route != nil && route.Continuation != nil {
		on = *route.Continuation
	}
	if !on || c.Max <= 0 || !x.stream {
		return nil
	}
	return &splice{left: c.Max}
}

// observe records one event that goes to the client, si its
// classification: the text it carries, or why the stream can no longer be
// continued.
func (sp *splice) observe(ev []byte, si streamInfo, anthropic bool) {
	if si.input > 0 && !sp.active {
		sp.prompt = si.input
	}
	if !si.token || sp.blocked != "" {
		return
	}
	if !anthropic {
		if bytes.Contains(ev, kToolCalls) {
			sp.blocked = blockToolCall
			return
		}
		// One search for both reasoning fields' common start; the exact
		// test only where it is found.
		if bytes.Contains(ev, kReasoningAny) && (wire.NonEmptyStringAfter(ev, kReasoning) || wire.NonEmptyStringAfter(ev, kReason2)) {
			sp.blocked = blockReasoning
			return
		}
	}
	if anthropic && !bytes.Contains(ev, kTextDelta) {
		sp.blocked = blockReasoning
		if bytes.Contains(ev, kInputJSON) {
			sp.blocked = blockToolCall
		}
		return
	}
	t, _, _, ok := eventText(ev, sp.api)
	if !ok {
		sp.blocked = blockEvent
		return
	}
	sp.text = append(sp.text, t...)
	sp.tokens++
}

var (
	kTextDelta    = []byte(`"text_delta"`)
	kReasoningAny = []byte(`"reasoning`)
	kInputJSON    = []byte(`"input_json_delta"`)
	kRole         = []byte(`"role":"assistant"`)
	kUsage        = []byte(`"usage":{`)
	kMsgStart     = []byte(`message_start`)
	kBlockStart   = []byte(`content_block_start`)
)

// textKey is the key of the answer's text in an event of api.
func textKey(api wire.API) []byte {
	switch api {
	case wire.OpenAIChat:
		return kContent
	default:
		return kText
	}
}

// eventText is the text an event carries on the answer's channel, and the
// span of its JSON string in ev (quotes included), for rewriting it. A
// plain string is a slice of ev (no allocation).
func eventText(ev []byte, api wire.API) (text []byte, start, end int, ok bool) {
	key := textKey(api)
	off := 0
	for {
		i := bytes.Index(ev[off:], key)
		if i < 0 {
			return nil, 0, 0, false
		}
		start = off + i + len(key) - 1 // the opening quote
		s := jsonscan.New(ev[start:])
		if b, ok := s.PlainBytes(); ok {
			if len(b) > 0 {
				return b, start, start + s.Pos(), true
			}
		} else {
			s = jsonscan.New(ev[start:])
			str, ok := s.Str()
			if !ok {
				return nil, 0, 0, false
			}
			if str != "" {
				return []byte(str), start, start + s.Pos(), true
			}
		}
		off = start + 1
	}
}

// withText is ev with its text replaced by text.
func withText(ev []byte, api wire.API, text []byte) []byte {
	_, start, end, ok := eventText(ev, api)
	if !ok {
		return ev
	}
	out := make([]byte, 0, len(ev)+len(text))
	out = append(out, ev[:start]...)
	out = jsonscan.AppendString(out, string(text))
	return append(out, ev[end:]...)
}

// canContinue says whether a stream cut now may be continued, or why not.
func (sp *splice) canContinue(start time.Time, lim *Limits) string {
	switch {
	case sp.blocked != "":
		return sp.blocked
	case len(sp.text) == 0:
		return blockNoText
	case sp.left <= 0:
		return blockExhausted
	case time.Since(start) >= lim.ResponseTimeout.Std():
		return blockDeadline
	}
	return ""
}

// begin readies the splice for the next backend's stream.
func (sp *splice) begin() {
	sp.active = true
	sp.cut = append(sp.cut[:0], sp.text...)
	sp.base = sp.tokens
	sp.holding, sp.match, sp.held, sp.heldTok = true, 0, sp.held[:0], 0
	sp.repeatedTok = 0
}

// continuationBody is the request asking a backend for the rest of the
// answer: the first backend's request (in the backends' API) with the text
// so far as the start of the answer, and max_tokens less what was sent.
func (sp *splice) continuationBody() ([]byte, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(sp.body, &m); err != nil {
		return nil, blockBody
	}
	if n, ok := intField(m, "n"); ok && n > 1 {
		return nil, blockBody
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := intField(m, k); ok {
			if v-sp.tokens < 1 {
				return nil, blockMaxTokens
			}
			m[k] = json.RawMessage(strconv.Itoa(v - sp.tokens))
		}
	}
	if v, ok := intField(m, "min_tokens"); ok {
		m["min_tokens"] = json.RawMessage(strconv.Itoa(max(0, v-sp.tokens)))
	}
	text, _ := json.Marshal(string(sp.text))
	switch sp.api {
	case wire.OpenAICompletions:
		var p string
		if json.Unmarshal(m["prompt"], &p) != nil || string(m["echo"]) == "true" {
			return nil, blockBody
		}
		m["prompt"], _ = json.Marshal(p + string(sp.text))
	default:
		var msgs []map[string]json.RawMessage
		if json.Unmarshal(m["messages"], &msgs) != nil || len(msgs) == 0 {
			return nil, blockBody
		}
		last := msgs[len(msgs)-1]
		var role, prev string
		json.Unmarshal(last["role"], &role)
		prefilled := role == "assistant" && (sp.api == wire.Anthropic || string(m["continue_final_message"]) == "true")
		if prefilled {
			// The client's own prefill: the text so far continues it.
			if json.Unmarshal(last["content"], &prev) != nil {
				return nil, blockBody
			}
			last["content"], _ = json.Marshal(prev + string(sp.text))
		} else {
			msgs = append(msgs, map[string]json.RawMessage{"role": json.RawMessage(`"assistant"`), "content": text})
		}
		m["messages"], _ = json.Marshal(msgs)
		if sp.api == wire.OpenAIChat {
			m["continue_final_message"] = json.RawMessage("true")
			m["add_generation_prompt"] = json.RawMessage("false")
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, blockBody
	}
	return b, ""
}

func intField(m map[string]json.RawMessage, k string) (int, bool) {
	raw, ok := m[k]
	if !ok || string(raw) == "null" {
		return 0, false
	}
	v, err := strconv.Atoi(string(raw))
	return v, err == nil
}

// next passes one event of a continuing backend's stream through the
// splice: emit gets the events the client is to see, in order. It drops
// what the client already has (role announcement, message and text-block
// starts) and the new backend's repeat of the text so far, holding back
// the new stream's text while it still equals the start of the text so
// far; and makes its usage add up.
func (sp *splice) next(ev []byte, si streamInfo, emit func(ev []byte, si streamInfo)) {
	anthropic := sp.api == wire.Anthropic
	if anthropic && (bytes.Contains(ev, kMsgStart) || bytes.Contains(ev, kBlockStart) && bytes.Contains(ev, []byte(`"index":0`))) {
		return
	}
	if !anthropic && !si.token && bytes.Contains(ev, kRole) && !bytes.Contains(ev, []byte(`"finish_reason":"`)) && !bytes.Contains(ev, kUsage) {
		return
	}
	if !si.token {
		sp.release(emit)
		if bytes.Contains(ev, kUsage) {
			ev = sp.addUsage(ev, anthropic)
		}
		emit(ev, si)
		return
	}
	if !sp.holding {
		emit(ev, si)
		return
	}
	t, _, _, ok := eventText(ev, sp.api)
	if !ok {
		sp.release(emit)
		emit(ev, si)
		return
	}
	rest := sp.cut[sp.match:]
	switch {
	case len(t) <= len(rest) && bytes.Equal(rest[:len(t)], t):
		sp.held = append(sp.held, ev...)
		sp.heldTok++
		sp.match += len(t)
		if sp.match == len(sp.cut) {
			// The new backend started over: all it repeated is dropped.
			sp.repeated += sp.match
			sp.repeatedTok += sp.heldTok
			sp.holding, sp.held, sp.heldTok = false, sp.held[:0], 0
		}
	case len(t) > len(rest) && bytes.Equal(t[:len(rest)], rest):
		sp.repeated += len(sp.cut)
		sp.repeatedTok += sp.heldTok + 1
		sp.holding, sp.held, sp.heldTok = false, sp.held[:0], 0
		emit(withText(ev, sp.api, t[len(rest):]), si)
	default:
		sp.release(emit)
		emit(ev, si)
	}
}

// release ends the comparison: the events held back were new text after
// all, and go out.
func (sp *splice) release(emit func(ev []byte, si streamInfo)) {
	if !sp.holding {
		return
	}
	sp.holding = false
	held := sp.held
	splitEvents(held, func(ev []byte) { emit(ev, streamInfo{token: true}) })
	sp.held, sp.heldTok = held[:0], 0
}

// addUsage rewrites a continuing backend's usage as the whole answer's:
// its prompt held the text so far, which is output, not prompt; and what
// it repeated of that text (dropped) is not output twice.
func (sp *splice) addUsage(ev []byte, anthropic bool) []byte {
	outKey, inKey := kCompTok, kPromptTok
	if anthropic {
		outKey, inKey = kOutTok, kInTok
	}
	out := intAfter(ev, outKey) - sp.repeatedTok
	ev = replaceInt(ev, outKey, out+sp.base)
	if in := intAfter(ev, inKey); in > 0 {
		prompt := sp.prompt
		if prompt == 0 {
			prompt = max(0, in-sp.base)
		}
		ev = replaceInt(ev, inKey, prompt)
		if !anthropic {
			ev = replaceInt(ev, []byte(`"total_tokens":`), prompt+out+sp.base)
		}
	}
	return ev
}

// replaceInt rewrites the integer after key (the first occurrence).
func replaceInt(b, key []byte, v int) []byte {
	i := bytes.Index(b, key)
	if i < 0 {
		return b
	}
	i += len(key)
	for i < len(b) && b[i] == ' ' {
		i++
	}
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	out := make([]byte, 0, len(b)+8)
	out = append(out, b[:i]...)
	out = strconv.AppendInt(out, int64(v), 10)
	return append(out, b[j:]...)
}

// continueStream carries on a stream whose backend (from) failed after
// tokens reached the client: on other backends, within continuation.max
// and the request's time, until one finishes it. Where it cannot, the
// client's stream ends with an error event, as it would have without
// continuation. failed is the failure that cut the stream.
func (g *Gateway) continueStream(ctx context.Context, w http.ResponseWriter, r *http.Request, st *state, x *exchange, sreq *sched.Request, from string, failed *attemptError) {
	sp := x.splice
	lim := st.cfg.Limits
	msg := failed.msg
	sp.backends = append(sp.backends, from)
	for {
		sreq.Exclude = append(sreq.Exclude, from)
		why := sp.canContinue(x.start, &lim)
		var body []byte
		if why == "" {
			body, why = sp.continuationBody()
		}
		var t *sched.Ticket
		if why == "" {
			var err error
			if t, err = g.pick(st, sreq, x, false); err != nil {
				why = blockNoBackend
			}
		}
		if why != "" {
			g.m.continuations.WithLabelValues(from, "skipped_"+why).Inc()
			g.endWithError(w, x, lim, fmt.Sprintf("%s (not continued: %s)", msg, why))
			return
		}
		sp.left--
		x.attempts++
		g.decided(x, t, trace.SpanFromContext(ctx))
		name := t.Backend.Name()
		sp.backends = append(sp.backends, name)
		sp.begin()
		// The new backend has the rest of the request's time for its
		// first token, at most first_byte_timeout.
		cl := lim
		cl.FirstByteTimeout = Duration(min(lim.FirstByteTimeout.Std(), lim.ResponseTimeout.Std()-time.Since(x.start)))
		ae := g.tracedAttempt(ctx, w, r, x, t, st.ups[name], backendExchange{api: sp.api, path: sp.path, body: body}, cl)
		switch {
		case x.canceled:
			g.m.continuations.WithLabelValues(name, "client_gone").Inc()
			return
		case ae == nil:
			g.m.continuations.WithLabelValues(name, "completed").Inc()
			return
		case ae.continuable:
			g.m.continuations.WithLabelValues(name, "interrupted").Inc()
			from, msg = name, ae.msg
		default:
			// Nothing of it reached the client: the stream is as it was.
			g.m.continuations.WithLabelValues(name, "failed").Inc()
			from = name
			if ae.msg != "" {
				msg = ae.msg
			}
		}
	}
}

// endWithError ends a stream the gateway could not finish with its API's
// error event (only whole events were forwarded, so nothing is half-sent).
func (g *Gateway) endWithError(w http.ResponseWriter, x *exchange, lim Limits, msg string) {
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(lim.IdleStreamTimeout.Std()))
	w.Write(errorEvent(x.api, msg))
	rc.Flush()
	x.errMsg = msg
}

// relayContinued is relayStream for a continuing backend: its events go
// through the splice (sp.next) before the client's stream (translated
// when crossing, with the translator of the stream's first backend).
func (a *attempt) relayContinued(x *exchange, body io.Reader, buf []byte, n int, readErr error, arrived time.Time) *attemptError {
	sp := x.splice
	idle := a.lim.IdleStreamTimeout.Std()
	a.timer.Reset(idle)
	rc := http.NewResponseController(a.w)
	itl := a.g.m.itl.WithLabelValues(a.u.cfg.Name)
	var out []byte
	tokens := 0
	done, sawError := false, false
	emit := func(ev []byte, si streamInfo) {
		if si.token {
			tokens++
		}
		sp.observe(ev, si, a.backendAnthropic)
		if si.output > 0 {
			x.outTokens = intAfter(ev, kCompTok) + intAfter(ev, kOutTok)
		}
		if si.input > 0 {
			in := intAfter(ev, kPromptTok) + intAfter(ev, kInTok)
			x.inTokens, x.inUsage = in, in
		}
		done = done || si.done
		sawError = sawError || si.errEv
		if sp.tr != nil {
			out = sp.tr.Event(out, ev)
		} else {
			out = append(out, ev...)
		}
	}
	var last time.Time
	pending := buf[:n]
	for {
		out, tokens = out[:0], 0
		k := 0
		if len(pending) > 0 {
			k = splitEventsEnd(pending, readErr != nil, func(ev []byte) {
				sp.next(ev, classify(ev, a.backendAnthropic), emit)
			})
			if k == 0 && len(pending) >= len(buf) {
				readErr = errEventTooLarge
			}
		}
		if readErr != nil {
			sp.release(emit) // the stream ends here: what was held back is new text
		}
		if len(out) > 0 && !a.forward(x, rc, out, arrived, false) {
			return nil
		}
		if k > 0 {
			pending = append(buf[:0], pending[k:]...)
		}
		a.count(x, tokens, arrived, &last, itl)
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

// continuedLog is the access log's note of a stream that was cut: the
// backends that served it in turn ("a>b"), and the bytes of repeated text
// dropped.
func (sp *splice) continuedLog() string {
	if sp == nil || len(sp.backends) == 0 {
		return ""
	}
	s := strings.Join(sp.backends, ">")
	if sp.repeated > 0 {
		s += fmt.Sprintf(" (dropped %d repeated bytes)", sp.repeated)
	}
	return s
}

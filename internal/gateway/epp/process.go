package epp

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/jsonscan"
)

// maxChunk is the largest body chunk the picker streams back: Envoy
// recommends at most 64 KiB per StreamedBodyResponse.
const maxChunk = 62 << 10

// errAnswered ends a stream the picker answered with an immediate response.
var errAnswered = errors.New("answered with an immediate response")

// Process serves one ext_proc stream: one HTTP request and its response.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	x := exchange{s: s, srv: stream, reqDuplex: true, respDuplex: true}
	defer x.close()
	for {
		req, err := stream.Recv()
		if err != nil {
			if err == io.EOF || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		if err := x.handle(req, time.Now()); err != nil {
			if errors.Is(err, errAnswered) {
				return nil
			}
			return err
		}
	}
}

// exchange is one HTTP request's life on its ext_proc stream.
type exchange struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	// reqDuplex, respDuplex: the bodies come in FULL_DUPLEX_STREAMED mode
	// (the default when Envoy does not say); reqBuffered: BUFFERED, the
	// older protocol's mode, where the pick rides on the body response.
	reqDuplex, respDuplex, reqBuffered bool
	observe                            bool // observability mode: never answer

	reqHeaders       *corev3.HeaderMap
	headersAnswered  bool // the request headers' response is sent
	bodyByTrailers   bool // trailers, not end_of_stream, ended the body
	trailersAnswered bool // the request trailers' response is sent
	body             []byte
	subset           []string
	hasSubset        bool
	decided          bool

	t       *sched.Ticket
	primary string
	status  int
	sse     bool
	scan    streamScanner
	ended   bool
}

func (x *exchange) send(r *extprocv3.ProcessingResponse) error {
	if x.observe {
		return nil
	}
	if err := x.srv.Send(r); err != nil {
		return fmt.Errorf("endpoint picker: sending to the data plane: %w", err)
	}
	return nil
}

func (x *exchange) handle(req *extprocv3.ProcessingRequest, now time.Time) error {
	if pc := req.GetProtocolConfig(); pc != nil {
		x.reqDuplex = pc.GetRequestBodyMode() == procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED
		x.reqBuffered = pc.GetRequestBodyMode() == procmodev3.ProcessingMode_BUFFERED
		x.respDuplex = pc.GetResponseBodyMode() == procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED
	}
	x.observe = req.GetObservabilityMode()
	if !x.decided && !x.hasSubset {
		x.subset, x.hasSubset = subsetHint(req.GetMetadataContext(), x.s.opts.SubsetNamespace, x.s.opts.SubsetKey)
	}
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.reqHeaders = v.RequestHeaders.GetHeaders()
		if v.RequestHeaders.GetEndOfStream() {
			return x.decide(now, false)
		}
		if !x.reqDuplex {
			// The body will come, or not, after this answer; the pick
			// rides on the body's (BUFFERED).
			x.headersAnswered = true
			return x.send(x.s.canned.requestHeaders)
		}
	case *extprocv3.ProcessingRequest_RequestBody:
		b := v.RequestBody
		if x.decided {
			return nil // nothing follows a decision but the response
		}
		if len(x.body)+len(b.GetBody()) > x.s.opts.MaxBodyBytes {
			x.decided = true
			x.s.m.decided(resultBadRequest)
			return x.immediate(typev3.StatusCode_PayloadTooLarge, "invalid_request_error", fmt.Sprintf("request body exceeds %d bytes", x.s.opts.MaxBodyBytes))
		}
		if x.body == nil && b.GetEndOfStream() {
			// The whole body in one message, as most requests come: the
			// message is this stream's own and the picker only reads it,
			// so it is kept rather than copied.
			x.body = b.GetBody()
		} else {
			x.body = append(x.body, b.GetBody()...)
		}
		if b.GetEndOfStream() {
			return x.decide(now, true)
		}
		if !x.reqDuplex && !x.reqBuffered {
			return x.send(x.s.canned.requestBody)
		}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if !x.decided {
			// Trailers, not end_of_stream, mark the body's end.
			x.bodyByTrailers = true
			if err := x.decide(now, false); err != nil || x.trailersAnswered {
				return err
			}
		}
		return x.send(x.s.canned.requestTrailers)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		x.responseHeaders(v.ResponseHeaders.GetHeaders(), req.GetMetadataContext())
		if x.t != nil && x.status == 200 {
			// Headers sent before the first token time the endpoint's
			// round trip and front end (sched.Ticket.HeadersAt).
			x.t.HeadersAt(now)
		}
		if err := x.send(x.s.canned.responseHeaders); err != nil {
			return err
		}
		if v.ResponseHeaders.GetEndOfStream() {
			x.end()
		}
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := v.ResponseBody
		// Forward first, count after: the bookkeeping stays out of the
		// client's time to first token.
		r := x.s.canned.responseBody
		if x.respDuplex {
			r = streamedBodyResponse(false, b.GetBody(), b.GetEndOfStream())
		}
		if err := x.send(r); err != nil {
			return err
		}
		if x.sse && x.t != nil && x.scan.feed(b.GetBody()) {
			ttft := x.t.FirstTokenAt(now)
			x.s.m.ttft.Observe(ttft.Seconds())
		}
		if b.GetEndOfStream() {
			x.end()
		}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		x.end()
		return x.send(x.s.canned.responseTrailers)
	}
	return nil
}

// decide picks the endpoint once the request body is complete (bodyEnd:
// when its end arrived; eos: the end came as a body chunk's end_of_stream,
// which the echoed body must carry too) and answers the data plane.
func (x *exchange) decide(bodyEnd time.Time, eos bool) error {
	x.decided = true
	s := x.s
	d := s.pick(x.reqHeaders, x.body, x.subset, x.hasSubset)
	s.m.decided(d.result)
	if d.status != 0 {
		return x.immediate(d.status, d.errType, d.msg)
	}
	x.t, x.primary = d.t, d.t.Backend.Name()
	var dest *destination
	if m := s.pool.get(d.dest); m != nil {
		// The chosen endpoint alone (no fallbacks): its own, built once.
		dest = s.destinationOf(m)
	} else {
		dest = &destination{header: s.destHeader(d.dest), meta: s.destMetadata(d.dest)}
	}
	a := newPickAnswer(dest, len(x.body))
	common, md := &a.common, dest.meta
	if x.headersAnswered {
		// Not full duplex: the pick rides on the body's (or trailers')
		// answer. BUFFERED holds the headers until then, so the header
		// mutation applies; STREAMED does not, and only the metadata can.
		r := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}, DynamicMetadata: md}
		if x.bodyByTrailers {
			// Trailers can carry no request header: the metadata alone.
			r = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}, DynamicMetadata: md}
			x.trailersAnswered = true
		}
		err := x.send(r)
		x.decidedIn(bodyEnd)
		return err
	}
	if err := x.send(&a.r); err != nil {
		return err
	}
	x.decidedIn(bodyEnd)
	if !x.reqDuplex || (len(x.body) == 0 && !eos) {
		return nil
	}
	// A full-duplex processor owns the body it was sent: stream it back,
	// unchanged, in chunks Envoy accepts.
	b := x.body
	for {
		n := min(len(b), maxChunk)
		last := n == len(b)
		if err := x.send(streamedBodyResponse(true, b[:n], last && eos)); err != nil {
			return err
		}
		b = b[n:]
		if last {
			return nil
		}
	}
}

func (x *exchange) decidedIn(bodyEnd time.Time) {
	d := time.Since(bodyEnd)
	x.s.m.overheadSeen(d)
	if x.s.opts.OnDecision != nil {
		x.s.opts.OnDecision(d)
	}
}

// immediate answers the client from the picker and ends the stream.
func (x *exchange) immediate(code typev3.StatusCode, errType, msg string) error {
	body := make([]byte, 0, 64+len(msg))
	body = append(body, `{"error":{"message":`...)
	body = jsonscan.AppendString(body, msg)
	body = append(body, `,"type":`...)
	body = jsonscan.AppendString(body, errType)
	body = append(body, `,"code":`...)
	body = strconv.AppendInt(body, int64(code), 10)
	body = append(body, "}}"...)
	err := x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: code},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}}}},
		Body:    body,
		Details: "ttft_epp_" + strings.ReplaceAll(errType, " ", "_"),
	}}})
	if err != nil {
		return err
	}
	return errAnswered
}

// responseHeaders learns the answer's status, whether it streams, and the
// endpoint that served it: when the data plane fell back to another
// endpoint of the list, the chosen one failed.
func (x *exchange) responseHeaders(hm *corev3.HeaderMap, md *corev3.Metadata) {
	x.status, _ = strconv.Atoi(header(hm, ":status"))
	x.sse = strings.HasPrefix(strings.ToLower(header(hm, "content-type")), "text/event-stream")
	if x.t == nil {
		return
	}
	served := metadataString(md, x.s.opts.DestinationNamespace, x.s.opts.ServedKey)
	if served == "" || served == x.primary {
		if served != "" {
			x.s.m.served.WithLabelValues(served, "true").Inc()
		}
		return
	}
	// The data plane moved on from the chosen endpoint: it failed (refused
	// the connection, or answered with a status the retry policy retries).
	m := x.s.pool.get(served)
	if m == nil {
		// An endpoint the picker does not know: nothing to learn about it.
		x.t.End(sched.OutcomeFailed)
		x.t, x.ended = nil, true
		return
	}
	x.s.m.served.WithLabelValues(served, "false").Inc()
	// The answer, its TTFT included, is the fallback's: the rest of the
	// exchange is accounted to it.
	x.t, x.primary = x.s.redirect(x.t, m.b, x.body), served
	x.ended = x.t == nil
}

// redirect moves a ticket to the endpoint that served its request in
// place of the chosen one (sched.Scheduler.Redirect): the chosen one's
// ticket ends as a failure and the one returned learns the fallback's
// TTFT. The body is parsed and hashed again, as it was for the pick, on
// this rare path rather than keeping every request's hashes on the common
// one.
func (s *Server) redirect(t *sched.Ticket, to *sched.Backend, body []byte) *sched.Ticket {
	r, err := parseBody(body)
	if err != nil {
		// The pick parsed it: unreachable, but never leave t dangling.
		t.End(sched.OutcomeFailed)
		return nil
	}
	h := s.hashers.Get().(*sched.BlockHasher)
	h.Reset()
	defer s.hashers.Put(h)
	r.Hash(h)
	req := sched.Request{Model: r.Model, PromptTokens: h.Bytes() / 4, Blocks: h.Hashes()}
	return s.sched.Redirect(t, to, &req)
}

// end finishes the ticket when the response is complete.
func (x *exchange) end() {
	if x.t == nil || x.ended {
		return
	}
	x.ended = true
	o := sched.OutcomeOK
	switch {
	case x.status == 429:
		o = sched.OutcomeNoVerdict
	case x.status >= 500:
		o = sched.OutcomeFailed
	case x.sse && x.status < 300 && !x.scan.done:
		// A stream that ended without its end marker was cut.
		o = sched.OutcomeFailed
	}
	x.t.End(o)
}

// close ends a ticket whose stream went away before the response ended:
// the client (or the data plane) gave up, which says nothing about the
// endpoint.
func (x *exchange) close() {
	if x.t != nil && !x.ended {
		x.ended = true
		x.t.End(sched.OutcomeCanceled)
	}
}

// subsetHint reads the data plane's subset of endpoints to pick from: a
// list of ip:port strings (or one comma-separated string) under key in
// namespace ns of the filter metadata.
func subsetHint(md *corev3.Metadata, ns, key string) ([]string, bool) {
	st := md.GetFilterMetadata()[ns]
	if st == nil {
		return nil, false
	}
	v, ok := st.GetFields()[key]
	if !ok {
		return nil, false
	}
	var out []string
	add := func(s string) {
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		add(k.StringValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	}
	// A present but empty list still restricts the choice: to nothing.
	return out, true
}

// metadataString is a string under key in namespace ns.
func metadataString(md *corev3.Metadata, ns, key string) string {
	return md.GetFilterMetadata()[ns].GetFields()[key].GetStringValue()
}

// decision is a pick, or the status to refuse the request with.
type decision struct {
	t      *sched.Ticket
	dest   string // chosen[,fallback...]
	result string
	// status (non-zero): the request is answered by the picker.
	status       typev3.StatusCode
	errType, msg string
}

func refuse(result string, code typev3.StatusCode, errType, msg string) decision {
	return decision{result: result, status: code, errType: errType, msg: msg}
}

// pick runs the scheduler for one request.
func (s *Server) pick(hm *corev3.HeaderMap, body []byte, subset []string, hasSubset bool) decision {
	r, err := parseBody(body)
	if err != nil {
		return refuse(resultBadRequest, typev3.StatusCode_BadRequest, "invalid_request_error", err.Error())
	}
	slo, class, err := resolveSLO(hm, s.opts.DefaultClass)
	if err != nil {
		return refuse(resultBadRequest, typev3.StatusCode_BadRequest, "invalid_request_error", err.Error())
	}
	members := s.pool.all()
	var exclude []string
	if hasSubset {
		in := 0
		for _, m := range members {
			if slices.Contains(subset, m.ep.Addr) {
				in++
			} else {
				exclude = append(exclude, m.ep.Addr)
			}
		}
		if in == 0 {
			return refuse(resultNoEndpoint, typev3.StatusCode_ServiceUnavailable, "service_unavailable", "no endpoint of the subset hint is known to the picker")
		}
	}
	shed := s.sheddable(class)
	if shed && s.saturated(r.Model, exclude) {
		return refuse(resultShed, typev3.StatusCode_TooManyRequests, "rate_limit_error", "every eligible endpoint is saturated; request of class "+class+" shed")
	}
	h := s.hashers.Get().(*sched.BlockHasher)
	h.Reset()
	defer s.hashers.Put(h)
	r.Hash(h)
	req := sched.Request{Model: r.Model, PromptTokens: h.Bytes() / 4, Blocks: h.Hashes(), SLO: slo, Class: class, Exclude: exclude, MaxTokens: max(r.MaxTokens, r.MaxCompletionTokens)}
	t, err := s.sched.Pick(&req)
	switch {
	case errors.Is(err, sched.ErrNoBackend) && !hasSubset:
		return refuse(resultNoEndpoint, typev3.StatusCode_NotFound, "not_found_error", fmt.Sprintf("no endpoint serves model %q", r.Model))
	case err != nil:
		return refuse(resultNoEndpoint, typev3.StatusCode_ServiceUnavailable, "service_unavailable", "no eligible endpoint: "+err.Error())
	}
	if shed && !t.MeetsSLO {
		t.End(sched.OutcomeCanceled)
		return refuse(resultShed, typev3.StatusCode_TooManyRequests, "rate_limit_error", "no endpoint is predicted to meet the SLO of class "+class+"; request shed")
	}
	s.m.reasons.WithLabelValues(t.Reason).Inc()
	dest := t.Backend.Name()
	if s.opts.Fallbacks > 0 {
		dest = s.withFallbacks(dest, r.Model, exclude)
	}
	return decision{t: t, dest: dest, result: resultPicked}
}

// serves reports whether the member serves model ("" = any).
func (m *member) serves(model string) bool {
	return model == "" || len(m.ep.Models) == 0 || slices.Contains(m.ep.Models, model)
}

// saturated reports whether every eligible endpoint for model (less
// exclude) is saturated, as the reference picker's saturation detector
// judges it: a queue of QueueThreshold, or a KV cache KVThreshold full.
// With no eligible endpoint it is false: that is a 503, not shedding.
func (s *Server) saturated(model string, exclude []string) bool {
	found := false
	for _, m := range s.pool.all() {
		if !m.eligible() || !m.serves(model) || slices.Contains(exclude, m.ep.Addr) {
			continue
		}
		found = true
		w, kv := m.b.EngineMetrics()
		if w < s.opts.QueueThreshold && kv < s.opts.KVThreshold {
			return false
		}
	}
	return found
}

// withFallbacks appends up to Fallbacks other eligible endpoints to the
// chosen one, least loaded first (requests in flight through this picker
// plus the engine's own queue).
func (s *Server) withFallbacks(chosen, model string, exclude []string) string {
	type cand struct {
		addr string
		load float64
	}
	now := time.Now()
	var cs []cand
	for _, m := range s.pool.all() {
		if m.ep.Addr == chosen || !m.eligible() || !m.serves(model) || slices.Contains(exclude, m.ep.Addr) ||
			m.b.BreakerState(now) == sched.BreakerOpen {
			continue
		}
		w, _ := m.b.EngineMetrics()
		cs = append(cs, cand{m.ep.Addr, float64(m.b.InFlight()) + w})
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		switch {
		case a.load < b.load:
			return -1
		case a.load > b.load:
			return 1
		}
		return 0
	})
	var sb strings.Builder
	sb.WriteString(chosen)
	for i := 0; i < len(cs) && i < s.opts.Fallbacks; i++ {
		sb.WriteByte(',')
		sb.WriteString(cs[i].addr)
	}
	return sb.String()
}

package epp

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The picker's answers, built with as few allocations as the protocol's
// nesting allows: an ext_proc answer is up to eight nested messages, and a
// streamed response's body chunks (one per token event) pass through the
// picker one answer each.
//
// gRPC documents that a message must not be modified after SendMsg
// (stats handlers may read it later), so nothing here is reused once
// sent: each answer is one allocation holding all its messages, and what
// is shared between answers (the empty answers, an endpoint's destination
// header and metadata) is built once and never modified. Concurrent
// marshalling only reads a message (its size cache is atomic).

// cannedResponses are the answers with nothing in them, shared by every
// stream.
type cannedResponses struct {
	requestHeaders, requestBody, requestTrailers, responseHeaders, responseBody, responseTrailers *extprocv3.ProcessingResponse
}

func newCannedResponses() cannedResponses {
	return cannedResponses{
		requestHeaders:   &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}},
		requestBody:      &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}},
		requestTrailers:  &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}},
		responseHeaders:  &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
		responseBody:     &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}},
		responseTrailers: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}},
	}
}

// streamedBody is a full-duplex body chunk's answer, in one allocation.
type streamedBody struct {
	r    extprocv3.ProcessingResponse
	req  extprocv3.ProcessingResponse_RequestBody
	resp extprocv3.ProcessingResponse_ResponseBody
	br   extprocv3.BodyResponse
	cr   extprocv3.CommonResponse
	bm   extprocv3.BodyMutation
	sr   extprocv3.BodyMutation_StreamedResponse
	s    extprocv3.StreamedBodyResponse
}

// streamedBodyResponse answers a request (request: true) or response body
// chunk in FULL_DUPLEX_STREAMED mode with body, passed on.
func streamedBodyResponse(request bool, body []byte, eos bool) *extprocv3.ProcessingResponse {
	m := new(streamedBody)
	m.s.Body, m.s.EndOfStream = body, eos
	m.sr.StreamedResponse = &m.s
	m.bm.Mutation = &m.sr
	m.cr.BodyMutation = &m.bm
	m.br.Response = &m.cr
	if request {
		m.req.RequestBody = &m.br
		m.r.Response = &m.req
	} else {
		m.resp.ResponseBody = &m.br
		m.r.Response = &m.resp
	}
	return &m.r
}

// destination is an endpoint's destination header and metadata when it is
// sent alone (no fallbacks): built once per endpoint.
type destination struct {
	header *corev3.HeaderValueOption
	meta   *structpb.Struct
}

// destinationOf is m's destination, built on first use.
func (s *Server) destinationOf(m *member) *destination {
	if d := m.dest.Load(); d != nil {
		return d
	}
	d := &destination{header: s.destHeader(m.ep.Addr), meta: s.destMetadata(m.ep.Addr)}
	m.dest.Store(d) // a racing builder stores an equal one
	return d
}

// pickAnswer is the decision's answer, in one allocation: the request
// headers' response (full duplex; in the other modes the common response
// rides on another answer) with the destination header, the body's
// content-length and the destination metadata.
type pickAnswer struct {
	r      extprocv3.ProcessingResponse
	rh     extprocv3.ProcessingResponse_RequestHeaders
	hr     extprocv3.HeadersResponse
	common extprocv3.CommonResponse
	hm     extprocv3.HeaderMutation
	set    [2]*corev3.HeaderValueOption
	cl     corev3.HeaderValueOption
	clv    corev3.HeaderValue
	clBuf  [20]byte
}

// newPickAnswer builds the answer naming dest (its header and metadata
// are the destination's) for a body of bodyLen bytes. Envoy drops
// Content-Length in full-duplex mode unless it is set again.
func newPickAnswer(dest *destination, bodyLen int) *pickAnswer {
	a := new(pickAnswer)
	a.set[0] = dest.header
	hs := a.set[:1]
	if bodyLen > 0 {
		a.clv.Key = "content-length"
		a.clv.RawValue = strconv.AppendInt(a.clBuf[:0], int64(bodyLen), 10)
		a.cl.Header = &a.clv
		a.cl.AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.set[1] = &a.cl
		hs = a.set[:2]
	}
	a.hm.SetHeaders = hs
	// The destination header selects the route's upstream host: the
	// route must be recomputed with it.
	a.common.ClearRouteCache = true
	a.common.HeaderMutation = &a.hm
	a.hr.Response = &a.common
	a.rh.RequestHeaders = &a.hr
	a.r.Response = &a.rh
	a.r.DynamicMetadata = dest.meta
	return a
}

// destHeader is the request header naming the destination.
func (s *Server) destHeader(dest string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: s.opts.DestinationKey, RawValue: []byte(dest)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// destMetadata is the dynamic metadata naming the destination: the same
// value as the header, as the protocol requires.
func (s *Server) destMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		s.opts.DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			s.opts.DestinationKey: structpb.NewStringValue(dest)}}),
	}}
}

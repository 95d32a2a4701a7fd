// Package dataplane plays Envoy's side of the Endpoint Picker protocol: a
// test and evaluation data plane standing in for Envoy where no Envoy
// binary can be had. It is NOT a production proxy — no TLS, no retries
// beyond trying the picker's endpoint list in order on connection
// failures, no limits beyond a request body bound, no header hygiene
// beyond dropping hop-by-hop headers.
//
// Per request it does what Envoy's ext_proc filter does with request and
// response bodies in FULL_DUPLEX_STREAMED mode (envoy.filters.http.
// ext_proc; Endpoint Picker protocol v1.0.0): it opens one ext_proc stream
// to the picker, sends the request headers (pseudo-headers included, the
// protocol configuration on the first message, an optional subset hint in
// metadata), then the request body in chunks, the last with
// end_of_stream (or trailers after it); it waits for the picker's answer
// to the request headers — the chosen endpoint in header
// x-gateway-destination-endpoint and in dynamic metadata envoy.lb, or an
// immediate response for the client — and collects the body the picker
// streams back. It forwards that body to the endpoint named (as an
// ORIGINAL_DST cluster reading the header would; on a connection failure
// the next endpoint of the list), then sends the picker the response
// headers with the endpoint that served in metadata envoy.lb
// (x-gateway-destination-endpoint-served), and the response body chunk by
// chunk as the endpoint wrote it, while relaying what the picker streams
// back to the client.
//
// The picker package's tests drive DataPlane.Do directly to check the
// protocol exchange; package liveeval serves it over HTTP (ServeHTTP) in
// front of a picker to compare the picker's routing with the gateway's.
//
// It does not import the picker: the exchange is checked against the
// protocol, not against the implementation it is testing.
package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names are the protocol's header and metadata names.
type Names struct {
	DestinationKey, DestinationNamespace string
	ServedKey                            string
	SubsetKey, SubsetNamespace           string
}

// DefaultNames are the Endpoint Picker protocol v1.0.0's names.
func DefaultNames() Names {
	return Names{
		DestinationKey: "x-gateway-destination-endpoint", DestinationNamespace: "envoy.lb",
		ServedKey: "x-gateway-destination-endpoint-served",
		SubsetKey: "x-gateway-destination-endpoint-subset", SubsetNamespace: "envoy.lb.subset_hint",
	}
}

// Options configure a DataPlane.
type Options struct {
	// Names default to DefaultNames' (each empty one).
	Names Names
	// HTTPClient forwards requests to the endpoints (nil: a client of its
	// own, without a timeout: the request's context bounds it).
	HTTPClient *http.Client
	// RequestHeaders are set on every request before the picker sees it,
	// as an Envoy header_mutation filter placed ahead of ext_proc would
	// (liveeval sets the fleet's SLO this way).
	RequestHeaders map[string]string
	// ChunkBytes is the largest request body chunk sent to the picker
	// (default 16 KiB; Envoy sends what arrived from the client, in
	// buffers of this order). Request.Chunks overrides it.
	ChunkBytes int
	// MaxBodyBytes bounds a client's request body over HTTP (default
	// 64 MiB): a larger one is refused with 413 before the picker sees it.
	MaxBodyBytes int64
}

// DataPlane is the Envoy stand-in over one gRPC connection to a picker.
type DataPlane struct {
	proc extprocv3.ExternalProcessorClient
	opts Options
}

// New returns a data plane talking to the picker over conn.
func New(conn grpc.ClientConnInterface, opts Options) *DataPlane {
	def := DefaultNames()
	set := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	set(&opts.Names.DestinationKey, def.DestinationKey)
	set(&opts.Names.DestinationNamespace, def.DestinationNamespace)
	set(&opts.Names.ServedKey, def.ServedKey)
	set(&opts.Names.SubsetKey, def.SubsetKey)
	set(&opts.Names.SubsetNamespace, def.SubsetNamespace)
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = 16 << 10
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	return &DataPlane{proc: extprocv3.NewExternalProcessorClient(conn), opts: opts}
}

// Request is one HTTP request through the data plane.
type Request struct {
	// Method (default POST) and Path (default /v1/chat/completions).
	Method, Path string
	// Header: the client's headers (names as sent; lower-cased for the
	// picker, as HTTP/2 and Envoy carry them).
	Header http.Header
	Body   []byte
	// Chunks: the request body is sent to the picker in this many pieces
	// (0: in pieces of Options.ChunkBytes).
	Chunks int
	// Trailers: the body's end is marked by request trailers, not by the
	// last chunk's end_of_stream.
	Trailers bool
	// Subset is the subset hint in metadata envoy.lb.subset_hint
	// (HasSubset: sent even when empty, which restricts to nothing).
	Subset    []string
	HasSubset bool
	// Served, when set, is reported to the picker as the endpoint that
	// served, whichever did: tests of the picker's fallback bookkeeping.
	Served string
	// NoForward stops after the pick: no endpoint is called and the
	// stream is closed without a response.
	NoForward bool
	// OnResponse, when set, hears the response status and headers once
	// the picker has passed them on (or its immediate response's), before
	// any body; Out, when set, gets the body as the picker streams it
	// back (flushed after each chunk when it is an http.Flusher), which
	// Outcome.Body then does not keep.
	OnResponse func(status int, h http.Header)
	Out        io.Writer
}

// Outcome is what the data plane saw of one request.
type Outcome struct {
	// Dest is the destination header's value (the chosen endpoint, then
	// any fallbacks, comma-separated), Meta the metadata's.
	Dest, Meta string
	// Immediate: the picker answered the client itself.
	Immediate *extprocv3.ImmediateResponse
	// Status and Body: the answer the client got (Body empty when
	// Request.Out took it).
	Status int
	Body   []byte
	// Served is the endpoint that answered.
	Served string
	// PickLatency is from the last request body message sent to the
	// picker's header mutation received.
	PickLatency time.Duration
	// ClearRouteCache: the header response asked for the route to be
	// recomputed. ContentLength: the content-length the picker set.
	ClearRouteCache bool
	ContentLength   string
}

// Primary is the first endpoint of the destination list.
func (o *Outcome) Primary() string {
	p, _, _ := strings.Cut(o.Dest, ",")
	return p
}

// HeaderMap builds an ext_proc header map (values in raw_value, as Envoy
// sends them).
func HeaderMap(kv map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

// Metadata is filter metadata holding one value under ns and key.
func Metadata(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

// hopHeaders are not copied from one connection to the next: the
// connection-level ones of RFC 9110 section 7.6.1, and the framing headers,
// which Go's HTTP client and server set for the body they send.
var hopHeaders = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true, "trailer": true,
	"transfer-encoding": true, "upgrade": true, "content-length": true,
}

// Do runs one request through the picker and, unless told not to, the
// endpoint it picked, checking that the picker keeps to the protocol.
func (d *DataPlane) Do(ctx context.Context, c Request) (Outcome, error) {
	var o Outcome
	if c.Method == "" {
		c.Method = http.MethodPost
	}
	if c.Path == "" {
		c.Path = "/v1/chat/completions"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := d.proc.Process(ctx)
	if err != nil {
		return o, fmt.Errorf("opening the ext_proc stream: %w", err)
	}
	hdrs := map[string]string{":method": c.Method, ":path": c.Path, ":authority": "gateway.test", ":scheme": "http"}
	if len(c.Body) > 0 {
		hdrs["content-type"] = "application/json"
		if !c.Trailers {
			// As Envoy passes on a client's Content-Length (a body with
			// trailers is chunked: it has none).
			hdrs["content-length"] = strconv.Itoa(len(c.Body))
		}
	}
	for k, vs := range c.Header {
		if k = strings.ToLower(k); !hopHeaders[k] && len(vs) > 0 {
			hdrs[k] = strings.Join(vs, ",")
		}
	}
	for k, v := range d.opts.RequestHeaders {
		hdrs[strings.ToLower(k)] = v
	}
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: HeaderMap(hdrs), EndOfStream: len(c.Body) == 0 && !c.Trailers}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}
	if c.HasSubset || len(c.Subset) > 0 {
		vals := make([]*structpb.Value, len(c.Subset))
		for i, s := range c.Subset {
			vals[i] = structpb.NewStringValue(s)
		}
		first.MetadataContext = Metadata(d.opts.Names.SubsetNamespace, d.opts.Names.SubsetKey, structpb.NewListValue(&structpb.ListValue{Values: vals}))
	}
	if err := st.Send(first); err != nil {
		return o, fmt.Errorf("sending request headers: %w", err)
	}
	var sentLast time.Time
	if len(c.Body) > 0 {
		size := d.opts.ChunkBytes
		if c.Chunks > 0 {
			size = (len(c.Body) + c.Chunks - 1) / c.Chunks
		}
		for off := 0; off < len(c.Body); off += size {
			end := min(off+size, len(c.Body))
			last := end == len(c.Body)
			if last {
				sentLast = time.Now()
			}
			if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: c.Body[off:end], EndOfStream: last && !c.Trailers}}}); err != nil {
				return o, fmt.Errorf("sending request body: %w", err)
			}
		}
	}
	if c.Trailers {
		sentLast = time.Now()
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: HeaderMap(map[string]string{"x-end": "1"})}}}); err != nil {
			return o, fmt.Errorf("sending request trailers: %w", err)
		}
	}
	if sentLast.IsZero() {
		sentLast = time.Now()
	}
	// The picker's first answer: the headers' response, or an immediate one.
	r, err := st.Recv()
	if err != nil {
		return o, fmt.Errorf("awaiting the request headers' response: %w", err)
	}
	o.PickLatency = time.Since(sentLast)
	if ir := r.GetImmediateResponse(); ir != nil {
		o.Immediate = ir
		o.Status = int(ir.GetStatus().GetCode())
		o.Body = ir.GetBody()
		if _, err := st.Recv(); err != io.EOF {
			return o, fmt.Errorf("after an immediate response the picker must end the stream; got %v", err)
		}
		if c.OnResponse != nil {
			h := http.Header{}
			for _, hv := range ir.GetHeaders().GetSetHeaders() {
				h.Set(hv.GetHeader().GetKey(), headerValue(hv.GetHeader()))
			}
			c.OnResponse(o.Status, h)
		}
		if c.Out != nil {
			if _, err := c.Out.Write(o.Body); err != nil {
				return o, fmt.Errorf("relaying the picker's answer: %w", err)
			}
			o.Body = nil
		}
		return o, nil
	}
	hr := r.GetRequestHeaders()
	if hr == nil {
		return o, fmt.Errorf("first answer is %T, want the request headers' response", r.GetResponse())
	}
	o.ClearRouteCache = hr.GetResponse().GetClearRouteCache()
	mut := hr.GetResponse().GetHeaderMutation()
	for _, h := range mut.GetSetHeaders() {
		switch strings.ToLower(h.GetHeader().GetKey()) {
		case d.opts.Names.DestinationKey:
			o.Dest = headerValue(h.GetHeader())
		case "content-length":
			o.ContentLength = headerValue(h.GetHeader())
		}
	}
	o.Meta = r.GetDynamicMetadata().GetFields()[d.opts.Names.DestinationNamespace].GetStructValue().GetFields()[d.opts.Names.DestinationKey].GetStringValue()
	if o.Dest == "" || o.Dest != o.Meta {
		return o, fmt.Errorf("destination header %q and metadata %q must be set and equal", o.Dest, o.Meta)
	}
	// The request body comes back, in order, before anything else; the
	// last chunk carries end_of_stream unless trailers end the request.
	var back []byte
	lastEOS := false
	for len(back) < len(c.Body) {
		r, err := st.Recv()
		if err != nil {
			return o, fmt.Errorf("awaiting the request body: %w", err)
		}
		sr := r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return o, fmt.Errorf("got %T while the request body was streaming back", r.GetResponse())
		}
		if len(sr.GetBody()) > 64<<10 {
			return o, fmt.Errorf("body chunk of %d bytes exceeds Envoy's recommended 64 KiB", len(sr.GetBody()))
		}
		if lastEOS {
			return o, errors.New("body chunk after end_of_stream")
		}
		back = append(back, sr.GetBody()...)
		lastEOS = sr.GetEndOfStream()
	}
	if len(c.Body) > 0 && lastEOS == c.Trailers {
		return o, fmt.Errorf("echoed body's end_of_stream is %v with trailers %v", lastEOS, c.Trailers)
	}
	if !bytes.Equal(back, c.Body) {
		return o, fmt.Errorf("request body came back changed: %d bytes, want %d", len(back), len(c.Body))
	}
	if c.Trailers {
		r, err := st.Recv()
		if err != nil || r.GetRequestTrailers() == nil {
			return o, fmt.Errorf("want the trailers' response, got %v, %v", r, err)
		}
	}
	if c.NoForward {
		st.CloseSend()
		return o, nil
	}
	resp, served, err := d.forward(ctx, c, o.Dest, back, mut)
	if err != nil {
		return o, err
	}
	defer resp.Body.Close()
	o.Served = served
	if c.Served != "" {
		served = c.Served
	}
	rh := map[string]string{":status": strconv.Itoa(resp.StatusCode)}
	for k, vs := range resp.Header {
		if k = strings.ToLower(k); !hopHeaders[k] && len(vs) > 0 {
			rh[k] = strings.Join(vs, ",")
		}
	}
	if err := st.Send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: HeaderMap(rh)}},
		MetadataContext: Metadata(d.opts.Names.DestinationNamespace, d.opts.Names.ServedKey, structpb.NewStringValue(served)),
	}); err != nil {
		return o, fmt.Errorf("sending response headers: %w", err)
	}
	o.Status = resp.StatusCode
	onHeaders := func() {
		if c.OnResponse == nil {
			return
		}
		h := resp.Header.Clone()
		for k := range h {
			if hopHeaders[strings.ToLower(k)] {
				h.Del(k)
			}
		}
		c.OnResponse(resp.StatusCode, h)
	}
	if err := d.relay(ctx, cancel, st, resp.Body, &o, onHeaders, c.Out); err != nil {
		return o, err
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		return o, fmt.Errorf("picker did not end the stream after the response: %v", err)
	}
	return o, nil
}

// forward sends the request to the first endpoint of dest that accepts a
// connection, with the picker's header mutation applied. It returns the
// response and the endpoint that gave it.
func (d *DataPlane) forward(ctx context.Context, c Request, dest string, body []byte, mut *extprocv3.HeaderMutation) (*http.Response, string, error) {
	var lastErr error
	for ep := range strings.SplitSeq(dest, ",") {
		ep = strings.TrimSpace(ep)
		req, err := http.NewRequestWithContext(ctx, c.Method, "http://"+ep+c.Path, bytes.NewReader(body))
		if err != nil {
			return nil, "", fmt.Errorf("forwarding to %s: %w", ep, err)
		}
		for k, vs := range c.Header {
			if !hopHeaders[strings.ToLower(k)] {
				req.Header[k] = vs
			}
		}
		if len(body) > 0 && req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range d.opts.RequestHeaders {
			req.Header.Set(k, v)
		}
		for _, h := range mut.GetSetHeaders() {
			// Go sets Content-Length from the body itself.
			if k := h.GetHeader().GetKey(); !hopHeaders[strings.ToLower(k)] && !strings.HasPrefix(k, ":") {
				req.Header.Set(k, headerValue(h.GetHeader()))
			}
		}
		for _, k := range mut.GetRemoveHeaders() {
			req.Header.Del(k)
		}
		resp, err := d.opts.HTTPClient.Do(req)
		if err == nil {
			return resp, ep, nil
		}
		lastErr = fmt.Errorf("forwarding to %s: %w", ep, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", lastErr
}

// relay streams the endpoint's answer to the picker, its headers already
// sent, and what the picker streams back to out (or o.Body), as Envoy
// does in full-duplex mode: the chunks go to the picker as the endpoint
// writes them, without waiting for the headers' response or the previous
// chunk to come back. The headers' response comes first (onHeaders
// passes the headers on to the client then), and each chunk that comes
// back must be what was sent, in order, with its end_of_stream.
func (d *DataPlane) relay(ctx context.Context, cancel context.CancelFunc, st extprocv3.ExternalProcessor_ProcessClient, body io.Reader, o *Outcome,
	onHeaders func(), out io.Writer) error {
	type sent struct {
		b   []byte
		eos bool
	}
	pending := make(chan sent, 256)
	recvErr := make(chan error, 1)
	go func() {
		err := func() error {
			if r, err := st.Recv(); err != nil || r.GetResponseHeaders() == nil {
				return fmt.Errorf("want the response headers' response, got %v, %v", r, err)
			}
			onHeaders()
			fl, _ := out.(http.Flusher)
			for want := range pending {
				r, err := st.Recv()
				if err != nil {
					return fmt.Errorf("awaiting the response body: %w", err)
				}
				sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				if sr == nil || !bytes.Equal(sr.GetBody(), want.b) || sr.GetEndOfStream() != want.eos {
					return fmt.Errorf("response chunk not passed through unchanged: %v", r)
				}
				if out == nil {
					o.Body = append(o.Body, sr.GetBody()...)
					continue
				}
				if len(sr.GetBody()) > 0 {
					if _, err := out.Write(sr.GetBody()); err != nil {
						return fmt.Errorf("relaying the response to the client: %w", err)
					}
					if fl != nil {
						fl.Flush()
					}
				}
			}
			return nil
		}()
		if err != nil {
			// The sender may be blocked on a chunk that will not come back.
			cancel()
		}
		recvErr <- err
	}()
	sendErr := func() error {
		defer close(pending)
		buf := make([]byte, 16<<10)
		for {
			n, rerr := body.Read(buf)
			eos := rerr != nil
			if n > 0 || eos {
				chunk := bytes.Clone(buf[:n])
				select {
				case pending <- sent{chunk, eos}:
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
					ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}}}); err != nil {
					if ctx.Err() != nil {
						// gRPC answers a send on a canceled stream with
						// io.EOF; the cause is the cancellation.
						return ctx.Err()
					}
					return fmt.Errorf("sending response body: %w", err)
				}
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return fmt.Errorf("reading the endpoint's answer: %w", rerr)
			}
		}
	}()
	if sendErr != nil && !errors.Is(sendErr, context.Canceled) {
		// The receiver may be waiting for a chunk that was never sent.
		cancel()
		<-recvErr
		return sendErr
	}
	// A canceled sender: the receiver's failure, if any, is the cause.
	if err := <-recvErr; err != nil {
		return err
	}
	return sendErr
}

func headerValue(h *corev3.HeaderValue) string {
	if rv := h.GetRawValue(); len(rv) > 0 {
		return string(rv)
	}
	return h.GetValue()
}

package epp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// This file is the test harness that plays Envoy's side of the ext_proc
// protocol, as Envoy's ext_proc filter does with request and response
// bodies in FULL_DUPLEX_STREAMED mode: the request headers (with the
// protocol configuration on the first message), the request body in
// chunks, the last with end_of_stream (or trailers after it); it waits
// for the picker's header mutation, collects the body streamed back,
// forwards the request to the endpoint the picker named (as an
// ORIGINAL_DST cluster reading the header would), then sends the response
// headers with the served endpoint in metadata envoy.lb and the response
// body chunk by chunk as the engine wrote it, and passes on what the
// picker streams back.

// loopbackAddr returns the i-th "pod IP" (127.0.100.i+1), or 127.0.0.1
// where the extra loopback addresses cannot be bound.
func loopbackAddr(t testing.TB, i int) string {
	ip := fmt.Sprintf("127.0.100.%d", i+1)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Logf("cannot bind %s (%v); using 127.0.0.1 with distinct ports", ip, err)
		return "127.0.0.1"
	}
	ln.Close()
	return ip
}

// startEngines starts n simulated vLLM engines, each on its own loopback
// address.
func startEngines(t testing.TB, n int, mod func(i int, c *serve.Config)) []*serve.Server {
	t.Helper()
	var out []*serve.Server
	for i := range n {
		cfg := serve.DefaultConfig()
		cfg.Addr = loopbackAddr(t, i) + ":0"
		cfg.DefaultMaxTokens = 8
		cfg.Seed = int64(i + 1)
		if mod != nil {
			mod(i, &cfg)
		}
		s, err := serve.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("starting engine %d: %v", i, err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s)
	}
	return out
}

// hostPort is a server URL's ip:port.
func hostPort(url string) string { return strings.TrimPrefix(url, "http://") }

// startPicker serves a picker over eps on a loopback port and returns it
// with a connected Envoy harness.
func startPicker(t testing.TB, opts Options, eps []Endpoint) (*Server, *envoy) {
	t.Helper()
	s, err := New(opts, eps)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("picker: %v", err)
		}
	})
	return s, &envoy{t: t, conn: conn, proc: extprocv3.NewExternalProcessorClient(conn),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}}
}

// waitReady waits for the picker's first scrape of its endpoints.
func waitReady(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("picker not ready after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// envoy plays the data plane.
type envoy struct {
	t    testing.TB
	conn *grpc.ClientConn
	proc extprocv3.ExternalProcessorClient
	http *http.Client
}

// call is one request through the harness.
type call struct {
	path    string
	headers map[string]string
	body    []byte
	// chunks: the request body is sent in this many pieces (default 3).
	chunks int
	// trailers: the body's end is marked by trailers, not end_of_stream.
	trailers bool
	// subset: the subset hint (hasSubset: sent even when empty).
	subset    []string
	hasSubset bool
	// served overrides the served endpoint reported (default: the first
	// of the picker's list, where the harness sent the request).
	served string
	// noForward: stop after the pick (no engine is called).
	noForward bool
}

// outcome is what the harness saw.
type outcome struct {
	// dest is the destination header's value, meta the metadata's.
	dest, meta string
	// immediate: the picker answered the client itself.
	immediate *extprocv3.ImmediateResponse
	// status and body: the engine's answer as streamed through the picker.
	status int
	body   []byte
	// pickLatency: from the last body message sent to the header
	// mutation received, as the data plane sees it.
	pickLatency time.Duration
	// clearRouteCache: the header response asked for a new route.
	clearRouteCache bool
	// contentLength is the content-length the picker set.
	contentLength string
}

// primary is the first endpoint of the destination list.
func (o *outcome) primary() string {
	p, _, _ := strings.Cut(o.dest, ",")
	return p
}

func hdrMap(kv map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

func lbMetadata(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

// do runs one request through the picker and, unless told not to, the
// endpoint it picked.
func (e *envoy) do(ctx context.Context, c call) (outcome, error) {
	var o outcome
	if c.path == "" {
		c.path = "/v1/chat/completions"
	}
	if c.chunks <= 0 {
		c.chunks = 3
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := e.proc.Process(ctx)
	if err != nil {
		return o, err
	}
	hdrs := map[string]string{":method": "POST", ":path": c.path, ":authority": "gateway.test", ":scheme": "http", "content-type": "application/json"}
	for k, v := range c.headers {
		hdrs[k] = v
	}
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(hdrs), EndOfStream: len(c.body) == 0 && !c.trailers}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}
	if c.hasSubset || len(c.subset) > 0 {
		vals := make([]*structpb.Value, len(c.subset))
		for i, s := range c.subset {
			vals[i] = structpb.NewStringValue(s)
		}
		first.MetadataContext = lbMetadata(SubsetNamespace, SubsetKey, structpb.NewListValue(&structpb.ListValue{Values: vals}))
	}
	if err := st.Send(first); err != nil {
		return o, fmt.Errorf("sending request headers: %w", err)
	}
	var sentLast time.Time
	if len(c.body) > 0 {
		size := (len(c.body) + c.chunks - 1) / c.chunks
		for off := 0; off < len(c.body); off += size {
			end := min(off+size, len(c.body))
			last := end == len(c.body)
			if last {
				sentLast = time.Now()
			}
			if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: c.body[off:end], EndOfStream: last && !c.trailers}}}); err != nil {
				return o, fmt.Errorf("sending request body: %w", err)
			}
		}
	}
	if c.trailers {
		sentLast = time.Now()
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: hdrMap(map[string]string{"x-end": "1"})}}}); err != nil {
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
	o.pickLatency = time.Since(sentLast)
	if ir := r.GetImmediateResponse(); ir != nil {
		o.immediate = ir
		o.status = int(ir.GetStatus().GetCode())
		o.body = ir.GetBody()
		if _, err := st.Recv(); err != io.EOF {
			return o, fmt.Errorf("after an immediate response the picker must end the stream; got %v", err)
		}
		return o, nil
	}
	hr := r.GetRequestHeaders()
	if hr == nil {
		return o, fmt.Errorf("first answer is %T, want the request headers' response", r.GetResponse())
	}
	o.clearRouteCache = hr.GetResponse().GetClearRouteCache()
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		switch h.GetHeader().GetKey() {
		case DestinationKey:
			o.dest = string(h.GetHeader().GetRawValue())
		case "content-length":
			o.contentLength = string(h.GetHeader().GetRawValue())
		}
	}
	o.meta = r.GetDynamicMetadata().GetFields()[DestinationNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	if o.dest == "" || o.dest != o.meta {
		return o, fmt.Errorf("destination header %q and metadata %q must be set and equal", o.dest, o.meta)
	}
	// The request body comes back, in order, before anything else; the
	// last chunk carries end_of_stream unless trailers end the request.
	var back []byte
	lastEOS := false
	for len(back) < len(c.body) {
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
	if len(c.body) > 0 && lastEOS == c.trailers {
		return o, fmt.Errorf("echoed body's end_of_stream is %v with trailers %v", lastEOS, c.trailers)
	}
	if !bytes.Equal(back, c.body) {
		return o, fmt.Errorf("request body came back changed: %d bytes, want %d", len(back), len(c.body))
	}
	if c.trailers {
		r, err := st.Recv()
		if err != nil || r.GetRequestTrailers() == nil {
			return o, fmt.Errorf("want the trailers' response, got %v, %v", r, err)
		}
	}
	if c.noForward {
		st.CloseSend()
		return o, nil
	}
	// Forward to the endpoint, as the ORIGINAL_DST cluster would.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+o.primary()+c.path, bytes.NewReader(back))
	if err != nil {
		return o, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return o, fmt.Errorf("forwarding to %s: %w", o.primary(), err)
	}
	defer resp.Body.Close()
	served := c.served
	if served == "" {
		served = o.primary()
	}
	if err := st.Send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(map[string]string{
			":status": fmt.Sprint(resp.StatusCode), "content-type": resp.Header.Get("Content-Type")})}},
		MetadataContext: lbMetadata(DestinationNamespace, ServedKey, structpb.NewStringValue(served)),
	}); err != nil {
		return o, fmt.Errorf("sending response headers: %w", err)
	}
	if r, err := st.Recv(); err != nil || r.GetResponseHeaders() == nil {
		return o, fmt.Errorf("want the response headers' response, got %v, %v", r, err)
	}
	o.status = resp.StatusCode
	buf := make([]byte, 4096)
	for {
		n, rerr := resp.Body.Read(buf)
		eos := rerr != nil
		if n > 0 || eos {
			chunk := bytes.Clone(buf[:n])
			if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}}}); err != nil {
				return o, fmt.Errorf("sending response body: %w", err)
			}
			r, err := st.Recv()
			if err != nil {
				return o, fmt.Errorf("awaiting the response body: %w", err)
			}
			sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil || !bytes.Equal(sr.GetBody(), chunk) || sr.GetEndOfStream() != eos {
				return o, fmt.Errorf("response chunk not passed through unchanged: %v", r)
			}
			o.body = append(o.body, chunk...)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return o, fmt.Errorf("reading the engine's answer: %w", rerr)
		}
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		return o, fmt.Errorf("picker did not end the stream after the response: %v", err)
	}
	return o, nil
}

// mustDo is do that fails the test on a harness error.
func (e *envoy) mustDo(c call) outcome {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := e.do(ctx, c)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

// chatBody is a streaming chat request with a system prompt and a user
// message.
func chatBody(model, system, user string) []byte {
	return fmt.Appendf(nil, `{"model":%q,"stream":true,"max_tokens":8,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, model, system, user)
}

// fakeEngine serves a fixed metrics text (for saturation tests).
func fakeEngine(t testing.TB, ip string, metrics func() string) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, metrics())
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// counter counts destinations, safely.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counter) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
}

package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/ttft-dev/ttft/internal/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// processor is a minimal picker for the data plane's own tests: it names
// dest once the request body has ended and echoes every body chunk,
// except where fault says otherwise. The real picker is tested through the
// data plane in package epp.
type processor struct {
	extprocv3.UnimplementedExternalProcessorServer
	dest  string
	fault string // "": none; "mangle": a response chunk changed; "nodest": no destination header
	// served is the served endpoint the data plane reported.
	served chan string
}

func streamed(b []byte, eos bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}
}

func (p *processor) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		var r *extprocv3.ProcessingResponse
		switch v := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			continue
		case *extprocv3.ProcessingRequest_RequestBody:
			if !v.RequestBody.GetEndOfStream() {
				continue // held until the body ends, as the picker does
			}
			hdr := &extprocv3.HeaderMutation{}
			if p.fault != "nodest" {
				hdr.SetHeaders = []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(p.dest)}}}
			}
			md := &structpb.Struct{Fields: map[string]*structpb.Value{"envoy.lb": structpb.NewStructValue(&structpb.Struct{
				Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint": structpb.NewStringValue(p.dest)}})}}
			if err := st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: hdr}}}, DynamicMetadata: md}); err != nil {
				return err
			}
			r = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
				Response: streamed(v.RequestBody.GetBody(), true)}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			p.served <- req.GetMetadataContext().GetFilterMetadata()["envoy.lb"].GetFields()["x-gateway-destination-endpoint-served"].GetStringValue()
			r = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			b := v.ResponseBody.GetBody()
			if p.fault == "mangle" && len(b) > 0 {
				b = []byte(strings.ToUpper(string(b)))
			}
			r = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
				Response: streamed(b, v.ResponseBody.GetEndOfStream())}}}
		}
		if err := st.Send(r); err != nil {
			return err
		}
	}
}

// serve starts p on a loopback port and returns a data plane talking to it.
func serve(t *testing.T, p *processor) *DataPlane {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return New(conn, Options{})
}

// endpoint is an HTTP server answering "data: hello" and the address
// that served.
func endpoint(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: hello\n\n")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// refused is a loopback address nothing listens on.
func refused(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) }

// TestDo: the data plane forwards to the endpoint named (the next of the
// list when one refuses connections), reports which served, passes the
// answer on, and fails a picker that breaks the protocol.
func TestDo(t *testing.T) {
	live := endpoint(t)
	for _, c := range []struct {
		name, dest, fault, err string
	}{
		{"chosen endpoint", live, "", ""},
		{"fallback on a refused connection", refused(t) + "," + live, "", ""},
		{"every endpoint refuses", refused(t), "", "forwarding to"},
		{"response chunk changed", live, "mangle", "not passed through unchanged"},
		{"no destination header", live, "nodest", "must be set and equal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &processor{dest: c.dest, fault: c.fault, served: make(chan string, 1)}
			dp := serve(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			o, err := dp.Do(ctx, Request{Body: []byte(`{"model":"m","stream":true}`)})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.Status != 200 || string(o.Body) != "data: hello\n\n" || o.Served != live || o.Dest != c.dest {
				t.Errorf("outcome %+v: want live's answer, served by %s", o, live)
			}
			if got := <-p.served; got != live {
				t.Errorf("picker told %q served, want %s", got, live)
			}
		})
	}
}

// TestDoCanceled: a client giving up mid-answer ends the exchange with
// its context's error, not a hang.
func TestDoCanceled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	defer close(stall)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	dp := serve(t, &processor{dest: ln.Addr().String(), served: make(chan string, 1)})
	ctx, cancel := context.WithCancel(context.Background())
	var out strings.Builder
	done := make(chan error, 1)
	go func() {
		_, err := dp.Do(ctx, Request{Body: []byte(`{}`), Out: writerFunc(func(b []byte) (int, error) {
			out.Write(b)
			cancel() // the client goes once the first chunk arrives
			return len(b), nil
		})})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "canceled") {
			t.Errorf("error %v, want the cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return after the client went")
	}
	if out.String() != "data: first\n\n" {
		t.Errorf("client got %q", out.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

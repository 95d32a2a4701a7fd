package epp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ttft-dev/ttft/internal/gateway/epp/dataplane"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// This file is the test harness that plays Envoy's side of the ext_proc
// protocol: package dataplane (one implementation, also what liveeval puts
// in front of a picker) does what Envoy's ext_proc filter does in
// FULL_DUPLEX_STREAMED mode and checks the picker keeps to the protocol;
// envoy adapts it to these tests' call and outcome.

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
	s, addr := servePicker(t, opts, eps)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // before the picker stops: cleanups run last first
	return s, &envoy{t: t, conn: conn, proc: extprocv3.NewExternalProcessorClient(conn),
		dp: dataplane.New(conn, dataplane.Options{HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}})}
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
	dp   *dataplane.DataPlane
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
	// served overrides the served endpoint reported (default: the one
	// that answered, the first of the picker's list that accepted).
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

func hdrMap(kv map[string]string) *corev3.HeaderMap { return dataplane.HeaderMap(kv) }

func lbMetadata(ns, key string, v *structpb.Value) *corev3.Metadata {
	return dataplane.Metadata(ns, key, v)
}

// do runs one request through the picker and, unless told not to, the
// endpoint it picked.
func (e *envoy) do(ctx context.Context, c call) (outcome, error) {
	if c.chunks <= 0 {
		c.chunks = 3
	}
	h := http.Header{}
	for k, v := range c.headers {
		h.Set(k, v)
	}
	d, err := e.dp.Do(ctx, dataplane.Request{Path: c.path, Header: h, Body: c.body, Chunks: c.chunks, Trailers: c.trailers,
		Subset: c.subset, HasSubset: c.hasSubset, Served: c.served, NoForward: c.noForward})
	return outcome{dest: d.Dest, meta: d.Meta, immediate: d.Immediate, status: d.Status, body: d.Body, pickLatency: d.PickLatency,
		clearRouteCache: d.ClearRouteCache, contentLength: d.ContentLength}, err
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

// TestDataPlaneNames: the data plane, which does not import the picker,
// uses the protocol names the picker defaults to.
func TestDataPlaneNames(t *testing.T) {
	got := dataplane.DefaultNames()
	want := dataplane.Names{DestinationKey: DestinationKey, DestinationNamespace: DestinationNamespace, ServedKey: ServedKey,
		SubsetKey: SubsetKey, SubsetNamespace: SubsetNamespace}
	if got != want {
		t.Errorf("data plane names %+v, picker's %+v", got, want)
	}
}

// serveDataPlane serves a data plane over HTTP in front of env's picker
// and returns its URL.
func serveDataPlane(t *testing.T, env *envoy, opts dataplane.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dataplane.New(env.conn, opts).Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("data plane: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// TestDataPlaneOverHTTP: a client talking HTTP to the data plane gets the
// engine's stream as the picker passes it on, the picker's own answers as
// they are, and an answer from the next endpoint of the list when the
// chosen one refuses connections; headers the data plane adds reach the
// picker.
func TestDataPlaneOverHTTP(t *testing.T) {
	engines := startEngines(t, 1, nil)
	live := hostPort(engines[0].URL())
	ln, err := net.Listen("tcp", loopbackAddr(t, 1)+":0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	// Never scraped: the dead endpoint stays eligible, so round-robin
	// picks it every other request and the data plane must fall back.
	model := engines[0].ModelName()
	s, env := startPicker(t, Options{Policy: sched.RoundRobin, Fallbacks: 1, ScrapeInterval: -1},
		[]Endpoint{{Addr: dead, Models: []string{model}}, {Addr: live, Models: []string{model}}})
	waitReady(t, s)
	url := serveDataPlane(t, env, dataplane.Options{})
	post := func(url string, body []byte) (int, string, string) {
		t.Helper()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	for i := range 6 {
		code, ct, body := post(url, chatBody(model, "sys", fmt.Sprint("q", i)))
		if code != 200 || !strings.HasPrefix(ct, "text/event-stream") || !strings.Contains(body, "data: ") || !strings.Contains(body, "[DONE]") {
			t.Fatalf("request %d: %d %q %.300q", i, code, ct, body)
		}
	}
	if got := promtestutil.ToFloat64(s.m.served.WithLabelValues(live, "false")); got < 1 {
		t.Errorf("the live endpoint served %v requests picked for the dead one; want the data plane to fall back", got)
	}
	code, ct, body := post(url, chatBody("no-such-model", "sys", "hi"))
	if code != 404 || ct != "application/json" || !strings.Contains(body, "no endpoint serves") {
		t.Errorf("unknown model: %d %q %q, want the picker's 404", code, ct, body)
	}
	// A header the data plane sets before the picker is read by it: an
	// invalid SLO is refused.
	bad := serveDataPlane(t, env, dataplane.Options{RequestHeaders: map[string]string{"x-ttft-slo-ms": "NaN"}})
	if code, _, body := post(bad, chatBody(model, "sys", "hi")); code != 400 || !strings.Contains(body, "x-ttft-slo-ms") {
		t.Errorf("invalid SLO set by the data plane: %d %q, want the picker's 400", code, body)
	}
}

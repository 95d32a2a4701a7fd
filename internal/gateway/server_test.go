package gateway

// The gateway with its client-facing servers and its backend client
// (internal/httpx).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func readResp(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

// countingServer serves handler on a loopback port and counts the connections
// it accepted.
func countingServer(t *testing.T, handler http.HandlerFunc, idle time.Duration) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	srv := &http.Server{Handler: handler, IdleTimeout: idle, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), &conns
}

// The gateway behind Go's own server (the --http-server net/http fallback)
// still streams.
func TestGatewayOnNetHTTPServer(t *testing.T) {
	backend := quickBackend(t)
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
	_, gw := startGateway(t, cfg, Options{HTTPServer: "net/http"})
	c := benchClient()
	for range 3 {
		if _, err := ttftOnce(c, gw); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(cfg, Options{HTTPServer: "fasthttp"}); err == nil || !strings.Contains(err.Error(), "fasthttp") {
		t.Fatalf("unknown server accepted: %v", err)
	}
}

// A client that hangs up while its request waits for the backend's first
// token has the backend request cancelled (the backend sees its
// connection close), freeing the backend's slot — with the gateway's own
// server as with net/http's.
func TestClientHangUpCancelsBackendRequest(t *testing.T) {
	canceled := make(chan time.Duration, 1)
	backend := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		// Read the body first: Go's server watches for a hang-up only
		// once it has been read (as engines do before they queue).
		io.Copy(io.Discard, r.Body)
		t0 := time.Now()
		select {
		case <-r.Context().Done():
			canceled <- time.Since(t0)
		case <-time.After(10 * time.Second):
			canceled <- -1
		}
	}))
	for _, server := range []string{"ttft", "net/http"} {
		t.Run(server, func(t *testing.T) {
			cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: backend, Models: []string{"m"}}}}
			cfg.Health.Disabled = true
			_, url := startGateway(t, cfg, Options{HTTPServer: server})
			c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := chatBody("m", true, "x")
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			time.Sleep(200 * time.Millisecond)
			c.Close()
			if d := <-canceled; d < 0 {
				t.Fatal("the backend request outlived the client by 10 s")
			}
		})
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// Through the gateway: streamed requests to a plain-http backend reuse one
// pooled connection, and a backend that drops idle connections costs the
// client nothing (the stale connection is retried before any byte).
func TestGatewayBackendConnectionReuse(t *testing.T) {
	url, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}, 300*time.Millisecond)
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: url, Models: []string{"m"}}}}
	cfg.Health.Disabled = true
	_, gw := startGateway(t, cfg, Options{})
	c := benchClient()
	send := func() {
		t.Helper()
		resp, err := c.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	for range 20 {
		send()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential requests opened %d backend connections, want 1", n)
	}
	time.Sleep(600 * time.Millisecond) // the backend closes the idle connection
	send()
	if n := conns.Load(); n != 2 {
		t.Fatalf("after the idle close: %d connections, want 2", n)
	}
}

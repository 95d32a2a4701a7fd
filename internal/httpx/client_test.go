package httpx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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

func h1Get(t *testing.T, c *Client, ctx context.Context, url string, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.RoundTrip(req, []byte(body))
}

func newTestH1() *Client {
	return NewClient(ClientOptions{Dial: (&net.Dialer{Timeout: time.Second}).DialContext, MaxIdlePerHost: 4, IdleTimeout: time.Minute})
}

func TestH1ClientReusesConnections(t *testing.T) {
	url, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Query().Get("mode") {
		case "chunked":
			w.Write(b)
			w.(http.Flusher).Flush()
			w.Write([]byte(" more"))
		default:
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Write(b)
		}
	}, 0)
	c := newTestH1()
	defer c.Close()
	for i := range 10 {
		mode := []string{"chunked", "length"}[i%2]
		resp, err := h1Get(t, c, context.Background(), url+"/echo?mode="+mode, fmt.Sprintf("hello %d", i))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("hello %d", i)
		if mode == "chunked" {
			want += " more"
		}
		if err != nil || string(got) != want || resp.StatusCode != 200 {
			t.Fatalf("request %d (%s): %d %q %v, want %q", i, mode, resp.StatusCode, got, err, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("10 sequential requests used %d connections, want 1", n)
	}
}

// A backend that closes idle keep-alive connections (uvicorn after 5 s):
// the next request on the pooled connection fails before any response byte
// and is sent again on a new one, invisibly.
func TestH1ClientRetriesStaleIdleConnection(t *testing.T) {
	url, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}, 50*time.Millisecond)
	c := newTestH1()
	defer c.Close()
	for i := range 3 {
		resp, err := h1Get(t, c, context.Background(), url, "x")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d: %q", i, b)
		}
		time.Sleep(200 * time.Millisecond) // the server closes the idle connection
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3 (one per request after each idle close)", n)
	}
}

// Cancelling the request's context unblocks a read of a stalled stream, and
// the connection is not reused; closing an unfinished body neither drains
// it (an endless stream would never end) nor pools the connection.
func TestH1ClientCancelAndEarlyClose(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	url, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 100000; i++ { // bounded, but far longer than the test
			if _, err := io.WriteString(w, "data: x\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}, 0)
	c := newTestH1()
	defer c.Close()

	ctx, cancel := context.WithCancel(context.Background())
	resp, err := h1Get(t, c, ctx, url, "x")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(30*time.Millisecond, cancel)
	start := time.Now()
	for err == nil && time.Since(start) < 5*time.Second {
		_, err = resp.Body.Read(buf)
	}
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("read after cancel: err %v after %v", err, time.Since(start))
	}
	resp.Body.Close()

	resp, err = h1Get(t, c, context.Background(), url, "x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(buf)
	done := make(chan struct{})
	go func() { resp.Body.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("closing an unfinished stream blocked (drained it?)")
	}
	if _, err := resp.Body.Read(buf); !errors.Is(err, errBodyClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if n := len(c.idle[hostPort(strings.TrimPrefix(url, "http://"))]); n != 0 {
		t.Fatalf("%d connections pooled after unfinished bodies, want 0", n)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// rawServer answers each connection with fixed bytes, for responses a
// net/http server would not produce.
func rawServer(t *testing.T, answer string) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(nc, answer); err != nil || strings.Contains(answer, "Connection: close") || !strings.Contains(answer, "Content-Length") && !strings.Contains(answer, "chunked") {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String(), &conns
}

func TestH1ClientResponseShapes(t *testing.T) {
	for _, tc := range []struct {
		name, answer, body string
		pooled             bool
	}{
		{"early hints then answer", "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", true},
		{"close-delimited", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a\n\n", "data: a\n\n", false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", false},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n", "ok", true},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := rawServer(t, tc.answer)
			c := newTestH1()
			defer c.Close()
			resp, err := h1Get(t, c, context.Background(), url, "x")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != tc.body || resp.StatusCode != 200 {
				t.Fatalf("got %d %q %v, want 200 %q", resp.StatusCode, b, err, tc.body)
			}
			if pooled := len(c.idle[hostPort(strings.TrimPrefix(url, "http://"))]) == 1; pooled != tc.pooled {
				t.Fatalf("connection pooled: %v, want %v", pooled, tc.pooled)
			}
		})
	}
}

func TestH1ClientErrors(t *testing.T) {
	c := newTestH1()
	defer c.Close()
	// Nothing listens on a port just released.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := h1Get(t, c, context.Background(), "http://"+addr, "x"); err == nil || !strings.Contains(err.Error(), "connecting to "+addr) {
		t.Fatalf("dead backend: %v", err)
	}
	// A header value with a line break (a backend key from a bad
	// environment variable) is refused, never sent as two headers.
	url, conns := rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Authorization", "Bearer k\r\nX-Evil: 1")
	if _, err := c.RoundTrip(req, nil); err == nil || !strings.Contains(err.Error(), "Authorization") {
		t.Fatalf("header injection: %v", err)
	}
	// Garbage instead of HTTP.
	url, _ = rawServer(t, "SSH-2.0-OpenSSH\r\n\r\n")
	if _, err := h1Get(t, c, context.Background(), url, "x"); err == nil || !strings.Contains(err.Error(), "reading response") {
		t.Fatalf("non-HTTP answer: %v", err)
	}
	_ = conns
}

// The request on the wire: request line with path and query, Host, the
// headers given, and an exact Content-Length.
func TestH1ClientRequestOnTheWire(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for !bytes.Contains(b.Bytes(), []byte("\r\n\r\n{}")) {
			n, err := nc.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.String()
		io.WriteString(nc, "HTTP/1.1 204 No Content\r\n\r\n")
	}()
	c := newTestH1()
	defer c.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/base/v1/chat/completions?x=1", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Length", "999") // ignored: the body's length is sent
	resp, err := c.RoundTrip(req, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wire := <-got
	for _, want := range []string{"POST /base/v1/chat/completions?x=1 HTTP/1.1\r\n", "\r\nHost: " + ln.Addr().String() + "\r\n", "\r\nContent-Type: application/json\r\n", "\r\nContent-Length: 2\r\n\r\n{}"} {
		if !strings.Contains(wire, want) {
			t.Fatalf("request lacks %q:\n%s", want, wire)
		}
	}
	if strings.Count(wire, "Content-Length") != 1 {
		t.Fatalf("two Content-Length headers:\n%s", wire)
	}
}

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
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startH1 serves h with Server on a loopback port.
func startH1(t *testing.T, h http.Handler, o ServerOptions, tune func(*Server)) (string, *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 2 * time.Second
	}
	s := NewServer(h, o)
	if tune != nil {
		tune(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String(), s
}

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

// echo answers with the method, path, Host, a header and the body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "body: %v", err)
		return
	}
	fmt.Fprintf(w, "%s %s host=%s x=%s body=%s", r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("X-Test"), b)
})

func TestServerKeepAlivePipeliningAndFraming(t *testing.T) {
	addr, s := startH1(t, echo, ServerOptions{}, nil)
	c, br := dial(t, addr)
	// Three requests in one write: plain, Content-Length body, chunked
	// body with a trailer. All on one connection, answered in order.
	io.WriteString(c, "GET /a?q=1 HTTP/1.1\r\nHost: h\r\nx-test: one\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"+
		"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"+
		"HEAD /d HTTP/1.1\r\nHost: h\r\n\r\n")
	want := []string{"GET /a?q=1 host=h x=one body=", "POST /b host=h x= body=hello", "POST /c host=h x= body=abcde"}
	for i, w := range want {
		resp, body := readResp(t, br, "POST")
		if resp.StatusCode != 200 || body != w {
			t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, w)
		}
		// A small complete answer goes out with its length, not chunked.
		if resp.ContentLength != int64(len(w)) || len(resp.TransferEncoding) != 0 {
			t.Errorf("request %d: content-length %d, transfer-encoding %v", i, resp.ContentLength, resp.TransferEncoding)
		}
		if resp.Header.Get("Date") == "" {
			t.Errorf("request %d: no Date header", i)
		}
	}
	resp, body := readResp(t, br, "HEAD")
	if resp.StatusCode != 200 || body != "" {
		t.Fatalf("HEAD: %d %q", resp.StatusCode, body)
	}
	// The connection is still usable.
	io.WriteString(c, "GET /e HTTP/1.1\r\nHost: h\r\n\r\n")
	if _, body := readResp(t, br, "GET"); body != "GET /e host=h x= body=" {
		t.Fatalf("after HEAD: %q", body)
	}
	// Between requests a kept-alive connection holds no write buffer.
	for end := time.Now().Add(5 * time.Second); s.writers.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d write buffers held by an idle connection", s.writers.Load())
		}
	}
}

func TestServerStreamsChunkedAndFinishesInOneWrite(t *testing.T) {
	step := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		http.NewResponseController(w).Flush()
		<-step
		io.WriteString(w, "data: [DONE]\n\n")
		if err := w.(BodyFinisher).FinishBody(); err != nil {
			t.Errorf("FinishBody: %v", err)
		}
		if _, err := io.WriteString(w, "late"); err == nil {
			t.Error("a write after FinishBody succeeded")
		}
	})
	addr, _ := startH1(t, h, ServerOptions{}, nil)
	c, br := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("a flushed response is not chunked: %v", resp.TransferEncoding)
	}
	// The first event arrives while the handler is still running.
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("first event: %q %v", buf[:n], err)
	}
	close(step)
	// The last event and the terminator come in one segment: the raw
	// bytes after the event are exactly one chunk and "0\r\n\r\n".
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(io.LimitReader(br, int64(len("e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"))))
	if err != nil || string(rest) != "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" {
		t.Fatalf("end of stream: %q %v", rest, err)
	}
}

func TestServerRefusesMalformedRequests(t *testing.T) {
	addr, _ := startH1(t, echo, ServerOptions{}, func(s *Server) { s.maxHeader = 1024 })
	cases := []struct {
		name, req string
		status    int
	}{
		{"content-length and chunked", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"conflicting lengths", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
		{"malformed length", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc", 400},
		{"header folding", "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n  2\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost: h\r\nX-A : 1\r\n\r\n", 400},
		{"missing host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"http/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505},
		{"garbage", "hello\r\n\r\n", 400},
		{"gzip transfer-encoding", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: h\r\nExpect: magic\r\nContent-Length: 1\r\n\r\na", 417},
		{"headers too large", "GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431},
		{"target with space", "GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := dial(t, addr)
			io.WriteString(c, tc.req)
			resp, _ := readResp(t, br, "GET")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if !resp.Close {
				t.Error("a refused request's connection is kept open")
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("connection not closed after refusal: %d %v", n, err)
			}
		})
	}
}

func TestServerHTTP10AndConnectionClose(t *testing.T) {
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part1 ")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "part2")
	})
	addr, _ := startH1(t, stream, ServerOptions{}, nil)

	// HTTP/1.0 cannot be chunked: a streamed body ends with the connection.
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if body != "part1 part2" || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Fatalf("HTTP/1.0 stream: %q te=%v close=%v", body, resp.TransferEncoding, resp.Close)
	}

	// HTTP/1.1 with Connection: close is answered, then closed.
	c, br = dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	resp, body = readResp(t, br, "GET")
	if body != "part1 part2" || !resp.Close {
		t.Fatalf("connection: close: %q close=%v", body, resp.Close)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close, read %v, want EOF", err)
	}

	// HTTP/1.0 keep-alive is honoured for a response with a length.
	addr, _ = startH1(t, echo, ServerOptions{}, nil)
	c, br = dial(t, addr)
	for i := range 2 {
		io.WriteString(c, "GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
		resp, body := readResp(t, br, "GET")
		if resp.Close || body != "GET /k host= x= body=" {
			t.Fatalf("HTTP/1.0 keep-alive request %d: close=%v %q", i, resp.Close, body)
		}
	}
}

func TestServerExpectContinue(t *testing.T) {
	addr, _ := startH1(t, echo, ServerOptions{}, nil)
	c, br := dial(t, addr)
	io.WriteString(c, "POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 100 {
		t.Fatalf("want 100 Continue before the body, got %v %v", resp, err)
	}
	io.WriteString(c, "abc")
	resp, body := readResp(t, br, "POST")
	if resp.StatusCode != 200 || body != "POST /x host=h x= body=abc" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// A client that sends a request head slowly (slowloris), stops reading its
// stream, or idles on a kept-alive connection loses it.
func TestServerTimeouts(t *testing.T) {
	var handlerErr atomic.Value
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for range 100_000 { // 3 GiB: more than any socket buffer
			if _, err := w.Write(chunk); err != nil {
				handlerErr.Store(err)
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				handlerErr.Store(err)
				return
			}
		}
	})
	lim := ServerOptions{HeaderTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}
	addr, _ := startH1(t, big, lim, func(s *Server) { s.idleTimeout = 300 * time.Millisecond })

	closedWithin := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		return err == nil || !errors.Is(err, os.ErrDeadlineExceeded)
	}
	t.Run("slow head", func(t *testing.T) {
		c, _ := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
		if !closedWithin(c, 5*time.Second) {
			t.Fatal("a request head that never ends keeps its connection")
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c, _ := dial(t, addr)
		if !closedWithin(c, 5*time.Second) {
			t.Fatal("an idle connection outlives the idle timeout")
		}
	})
	t.Run("client stops reading", func(t *testing.T) {
		c, _ := dial(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		deadline := time.Now().Add(10 * time.Second)
		for handlerErr.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if handlerErr.Load() == nil {
			t.Fatal("a stream to a client that does not read blocks its handler")
		}
	})
}

// A client that disconnects while its request waits (for a backend's first
// byte, say) has the request's context cancelled, as net/http's background
// read would.
func TestServerClientGoneCancelsContext(t *testing.T) {
	cause := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(10 * time.Second):
			cause <- nil
		}
	})
	addr, _ := startH1(t, h, ServerOptions{HeaderTimeout: time.Second}, nil)
	c, _ := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
	time.Sleep(100 * time.Millisecond)
	c.Close()
	if err := <-cause; !errors.Is(err, errClientGone) {
		t.Fatalf("context cause %v, want %v", err, errClientGone)
	}
}

// Pipelined bytes waiting in the socket are not mistaken for a departed
// client.
func TestServerPipelinedRequestIsNotClientGone(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
				w.WriteHeader(499)
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
		io.WriteString(w, r.URL.Path)
	})
	addr, _ := startH1(t, h, ServerOptions{HeaderTimeout: 100 * time.Millisecond}, nil)
	c, br := dial(t, addr)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	for _, want := range []string{"/slow", "/next"} {
		resp, body := readResp(t, br, "GET")
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("%d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

func TestServerShutdownLetsStreamsFinish(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "finished")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(h, ServerOptions{ShutdownGrace: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	busy, br := dial(t, ln.Addr().String())
	io.WriteString(busy, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	idle, _ := dial(t, ln.Addr().String())
	time.Sleep(50 * time.Millisecond) // let the idle connection be accepted
	cancel()
	// The idle connection is closed, new ones are refused, the busy
	// request completes.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle connection not closed on shutdown: %v", err)
	}
	close(release)
	resp, body := readResp(t, br, "GET")
	if body != "finished" || !resp.Close {
		t.Fatalf("in-flight request during shutdown: %q close=%v", body, resp.Close)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("still accepting after shutdown")
	}
}

// FuzzServerRequest checks the request parser against net/http's: what
// Server accepts, net/http reads alike.
func FuzzServerRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
		"GET http://example/a%20b?c=d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\nx: b\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewServer(http.NotFoundHandler(), ServerOptions{})
		c := &srvConn{s: s, br: bufio.NewReader(bytes.NewReader(data)), bw: bufio.NewWriter(io.Discard)}
		req, _, err := c.readRequest()
		if err != nil {
			return
		}
		ours, err := io.ReadAll(req.Body)
		if err != nil {
			return // a body cut short is found when read, as in net/http
		}
		// One empty line before the request line is allowed here (RFC 9112
		// §2.2), not by http.ReadRequest.
		stdData := bytes.TrimPrefix(data, []byte("\n"))
		if len(stdData) == len(data) {
			stdData = bytes.TrimPrefix(data, []byte("\r\n"))
		}
		std, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(stdData)))
		if err != nil {
			t.Fatalf("accepted here, refused by net/http (%v): %q", err, data)
		}
		theirs, err := io.ReadAll(std.Body)
		if err != nil {
			t.Fatalf("net/http could not read a body read here (%v): %q", err, data)
		}
		if req.Method != std.Method || req.RequestURI != std.RequestURI || req.URL.Path != std.URL.Path || req.URL.RawQuery != std.URL.RawQuery ||
			req.Host != std.Host || req.ContentLength != std.ContentLength || !bytes.Equal(ours, theirs) {
			t.Fatalf("disagree on %q:\nours %s %s %q host=%q len=%d body=%q\nstd  %s %s %q host=%q len=%d body=%q", data,
				req.Method, req.RequestURI, req.URL.Path, req.Host, req.ContentLength, ours,
				std.Method, std.RequestURI, std.URL.Path, std.Host, std.ContentLength, theirs)
		}
		for k, vs := range req.Header {
			if strings.Join(vs, ",") != strings.Join(std.Header[k], ",") {
				t.Fatalf("header %s: ours %q, net/http %q in %q", k, vs, std.Header[k], data)
			}
		}
		if req.Close != std.Close {
			t.Fatalf("close: ours %v, net/http %v in %q", req.Close, std.Close, data)
		}
	})
}

// A client that stops reading a stream is cut off at the write timeout
// (the gateway's idle_stream_timeout), even when the stream is small
// enough for the kernel's buffers: the server bounds a streaming
// connection's send buffer, so that the writes block (and the sweeper sees
// them blocked) once the client stops taking bytes.
func TestServerCutsClientThatStopsReading(t *testing.T) {
	const events = 1000 // 1 MB: less than loopback's default send buffer
	errc := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev := []byte("data: " + strings.Repeat("x", 1000) + "\n\n")
		rc := http.NewResponseController(w)
		for range events {
			if _, err := w.Write(ev); err != nil {
				errc <- err
				return
			}
			if err := rc.Flush(); err != nil {
				errc <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		errc <- nil
	})
	addr, _ := startH1(t, h, ServerOptions{HeaderTimeout: time.Second, WriteTimeout: 300 * time.Millisecond}, nil)
	// The client's own receive buffer is its business (it absorbs what it
	// holds whatever the server does): keep it small here.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	select {
	case err := <-errc:
		if err == nil {
			t.Fatalf("all %d events went to a client that read none of them, in %v (idle_stream_timeout 300ms)", events, time.Since(t0))
		}
		t.Logf("cut after %v: %v", time.Since(t0), err)
	case <-time.After(20 * time.Second):
		t.Fatal("the handler neither finished nor failed")
	}
}

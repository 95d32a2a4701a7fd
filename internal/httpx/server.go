package httpx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server is an HTTP/1.1 server with one goroutine per client connection
// that reads a request, runs the handler on the same goroutine and writes
// the response, with no other goroutine per request.
//
// Why not net/http.Server: for each request it starts a goroutine that
// reads the connection in the background (to notice a client that goes
// away) and, when the handler returns, interrupts that read and waits for
// it; it writes a streamed body's terminating chunk in a system call of
// its own; and it re-arms the socket's deadlines per request. On a
// two-vCPU virtual machine each goroutine start or hand-off wakes another
// thread (a futex call, and a VM exit when the other vCPU sleeps), and the
// first of them lies on the request's path, ahead of anything its handler
// does. Profiles of ttft's gateway at 2,000 req/s put these at a quarter of
// its CPU (docs/performance.md).
//
// What it does instead:
//   - Timeouts (idle keep-alive, request head and body, a stalled write,
//     and the handler's SetReadDeadline/SetWriteDeadline) are times kept in
//     atomics and enforced by one sweeper goroutine per server, which closes
//     the connection of a request that overstays. No per-request timer or
//     deadline system call.
//   - A client that disconnects while its handler waits (for a backend,
//     say) is found by the same sweeper, with a non-blocking MSG_PEEK on the sockets
//     of requests that have written nothing for a sweep; its request's
//     context is then cancelled (as net/http's background read does).
//   - Responses are framed by the server: headers and the first body bytes
//     leave in one write, each Flush is one write, and FinishBody sends the
//     last bytes and the chunked terminator together.
//
// It speaks HTTP/1.0 and 1.1 (keep-alive, pipelining, chunked request
// bodies, Expect: 100-continue), refuses ambiguous framing (Content-Length
// with Transfer-Encoding, differing Content-Lengths, header folding,
// whitespace before a colon) and answers malformed requests with 400, 431
// or 501 before closing. HTTP/2 and TLS are not offered. For net/http.Server
// with the same framing checks, see ServeStd.
type Server struct {
	handler http.Handler
	log     *slog.Logger
	base    context.Context

	idleTimeout   time.Duration // between requests on a kept-alive connection
	headerTimeout time.Duration // from a request's first byte until its body is read
	writeTimeout  time.Duration // a single write to the client blocked this long ends the connection
	maxHeader     int           // request line plus header bytes
	grace         time.Duration // for requests in flight at shutdown
	sweepEvery    time.Duration

	mu       sync.Mutex
	conns    map[*srvConn]struct{}
	closing  atomic.Bool
	date     atomic.Pointer[dateLine]
	bufPool  sync.Pool    // *bufio.Writer of 32 KiB + framing, held per request
	readPool sync.Pool    // *bufio.Reader of 4 KiB, held per connection
	writers  atomic.Int64 // write buffers held now
}

type dateLine struct {
	sec  int64
	line []byte // "Date: ...\r\n"
}

// Connection phases, as the sweeper sees them.
const (
	phaseIdle   = iota // waiting for a request's first byte
	phaseActive        // reading a request or running its handler
)

type srvConn struct {
	s      *Server
	nc     net.Conn
	raw    syscall.RawConn // nil when the connection is not a socket
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string

	// Enforced by the sweeper (unix nanoseconds; 0 = none).
	phase         atomic.Int32
	readDeadline  atomic.Int64
	writeDeadline atomic.Int64
	writeStart    atomic.Int64 // start of the write now blocked, 0 when none
	lastWrite     atomic.Int64
	bodyRead      atomic.Bool // the request's body was read to its end
	reading       atomic.Bool // blocked (or about to be) reading from the client
	cancel        atomic.Pointer[context.CancelCauseFunc]
	aborted       atomic.Bool

	linger bool // unread request bytes may remain: close gently
	// readErr is the error that ended reading the socket (Read), so that
	// a request body's decoding errors can be told from the connection's.
	readErr error
	// sndbufBound: the socket's send buffer was bounded for streaming
	// (boundSendBuffer).
	sndbufBound bool

	line []byte // scratch for request lines longer than br's buffer
	pend []byte // body bytes written before the response is committed
}

var (
	errClientGone   = errors.New("client closed the connection")
	errReadTimeout  = errors.New("client too slow sending its request")
	errWriteTimeout = errors.New("client too slow reading its response")
	errIdleTimeout  = errors.New("keep-alive connection idle too long")
	errShutdown     = errors.New("server shutting down")
)

// ServerOptions configure Server and ServeStd. Zero values take the
// defaults given with each field.
type ServerOptions struct {
	// HeaderTimeout bounds reading a request: from its first byte until
	// its body is read (default 10 s; ServeStd: the head only).
	HeaderTimeout time.Duration
	// WriteTimeout ends the connection of a write to the client blocked
	// this long (default 60 s; Server only: with ServeStd, handlers set
	// write deadlines themselves).
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (default 120 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request line and headers (default 64 KiB).
	MaxHeaderBytes int
	// ShutdownGrace is how long requests in flight may still run once the
	// server's context ends (default 30 s).
	ShutdownGrace time.Duration
	// Logger hears of failed accepts and handler panics (nil: discarded).
	Logger *slog.Logger
}

func (o *ServerOptions) defaults() {
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// NewServer returns a Server for h; Serve runs it.
func NewServer(h http.Handler, o ServerOptions) *Server {
	o.defaults()
	s := &Server{
		handler: h, log: o.Logger, base: context.Background(),
		idleTimeout:   o.IdleTimeout,
		headerTimeout: o.HeaderTimeout,
		writeTimeout:  o.WriteTimeout,
		maxHeader:     o.MaxHeaderBytes,
		grace:         o.ShutdownGrace,
		conns:         map[*srvConn]struct{}{},
	}
	// A tenth of the shortest timeout, so a timeout fires at most 10% late.
	s.sweepEvery = min(max(min(s.headerTimeout, s.writeTimeout)/10, 5*time.Millisecond), 250*time.Millisecond)
	s.bufPool.New = func() any { return bufio.NewWriterSize(nil, 32<<10+64) }
	s.readPool.New = func() any { return bufio.NewReaderSize(nil, 4<<10) }
	return s
}

// Serve accepts connections on ln until ctx ends, then lets requests in
// flight finish (up to ServerOptions.ShutdownGrace) before closing what is
// left. Requests' contexts carry ctx's values, not its cancellation. A
// Server serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.base = context.WithoutCancel(ctx)
	grace := s.grace
	sweepDone := make(chan struct{})
	stopSweep := make(chan struct{})
	go func() { defer close(sweepDone); s.sweep(stopSweep) }()
	defer func() { close(stopSweep); <-sweepDone }()

	acceptErr := make(chan error, 1)
	var wg sync.WaitGroup
	go func() {
		var delay time.Duration
		for {
			nc, err := ln.Accept()
			if err != nil {
				if !s.closingErr(err) {
					// Out of file descriptors and the like: back off as
					// net/http does rather than spin or give up.
					delay = min(max(2*delay, 5*time.Millisecond), time.Second)
					s.log.Warn("http server: accept failed; retrying", "err", err, "retry_in", delay)
					time.Sleep(delay)
					continue
				}
				acceptErr <- err
				return
			}
			delay = 0
			c := s.newConn(nc)
			if c == nil {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); c.serve() }()
		}
	}()

	select {
	case err := <-acceptErr:
		s.closing.Store(true)
		s.closeAll(errShutdown)
		wg.Wait()
		if s.closingErr(err) {
			return nil
		}
		return fmt.Errorf("accepting connections: %w", err)
	case <-ctx.Done():
	}
	s.closing.Store(true)
	ln.Close()
	<-acceptErr
	s.closeIdle()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.closeAll(errShutdown)
		<-done
	}
	return nil
}

func (s *Server) closingErr(err error) bool {
	return s.closing.Load() || errors.Is(err, net.ErrClosed)
}

func (s *Server) newConn(nc net.Conn) *srvConn {
	c := &srvConn{s: s, nc: nc}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
		}
	}
	if a := nc.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		nc.Close()
		return nil
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return c
}

func (s *Server) forget(c *srvConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.phase.Load() == phaseIdle {
			c.abort(errShutdown)
		}
	}
}

func (s *Server) closeAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.abort(cause)
	}
}

// sweep enforces every connection's timeouts and looks for clients that
// went away while their requests wait.
func (s *Server) sweep(stop <-chan struct{}) {
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	var peek []*srvConn
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		quiet := now - int64(s.sweepEvery)
		peek = peek[:0]
		s.mu.Lock()
		for c := range s.conns {
			switch {
			case c.reading.Load() && expired(c.readDeadline.Load(), now):
				if c.phase.Load() == phaseIdle {
					c.abort(errIdleTimeout)
				} else {
					c.abort(errReadTimeout)
				}
			case c.writeStart.Load() != 0 && (expired(c.writeDeadline.Load(), now) || now-c.writeStart.Load() > int64(s.writeTimeout)):
				// Deadlines bound writes in progress, as socket
				// deadlines do; a handler waiting (for a backend, say)
				// is not writing.
				c.abort(errWriteTimeout)
			case c.raw != nil && c.phase.Load() == phaseActive && !c.reading.Load() && c.bodyRead.Load() && c.lastWrite.Load() < quiet:
				peek = append(peek, c)
			}
		}
		if s.closing.Load() {
			for c := range s.conns {
				if c.phase.Load() == phaseIdle {
					c.abort(errShutdown)
				}
			}
		}
		s.mu.Unlock()
		for _, c := range peek {
			if c.peerClosed() {
				c.abort(errClientGone)
			}
		}
	}
}

func expired(deadline, now int64) bool { return deadline != 0 && now > deadline }

// peerClosed reports whether the client has closed its side: a
// non-blocking peek that finds the end of the stream (or a reset). Pipelined
// bytes waiting in the socket are not consumed.
func (c *srvConn) peerClosed() bool {
	var b [1]byte
	closed := false
	c.raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
	})
	return closed
}

// abort ends the connection from outside its goroutine: pending reads and
// writes fail, and the current request's context is cancelled.
func (c *srvConn) abort(cause error) {
	if c.aborted.Swap(true) {
		return
	}
	if f := c.cancel.Load(); f != nil {
		(*f)(cause)
	}
	c.nc.Close()
}

// Read is the connection's socket reader (under br); it keeps the error
// that ended it.
func (c *srvConn) Read(p []byte) (int, error) {
	n, err := c.nc.Read(p)
	if err != nil {
		c.readErr = err
	}
	return n, err
}

// streamSendBuffer is the socket send buffer of a connection that streams
// (the kernel doubles it for its bookkeeping): small enough that a client
// that stops reading blocks the server's writes after a few KiB, which
// the sweeper then times out; ample for token streams (32 KiB per
// round trip: 320 KiB/s at 100 ms).
const streamSendBuffer = 16 << 10

// boundSendBuffer bounds the send buffer of a connection that streams, once
// per connection. A write to a socket succeeds as long as its send buffer
// has room, and Linux grows that buffer up to tcp_wmem's maximum (4 MiB,
// and on loopback it starts at megabytes): without a bound, a client that
// stops reading a stream of less than that never blocks a write, so the
// write timeout never sees it, and the stream (and whatever produces it)
// runs to its end for nobody.
func (c *srvConn) boundSendBuffer() {
	c.sndbufBound = true
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.SetWriteBuffer(streamSendBuffer)
	}
}

// Write is the connection's socket writer (under bw): it marks the write
// as in progress so that the sweeper can end one that a client stalls.
func (c *srvConn) Write(p []byte) (int, error) {
	now := time.Now().UnixNano()
	c.writeStart.Store(now)
	n, err := c.nc.Write(p)
	c.writeStart.Store(0)
	c.lastWrite.Store(now)
	return n, err
}

func (c *srvConn) serve() {
	s := c.s
	c.br = s.readPool.Get().(*bufio.Reader)
	c.br.Reset(c)
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				s.log.Error("http server: handler panic; connection closed", "panic", fmt.Sprint(p), "remote", c.remote)
			}
		} else if c.linger && !c.aborted.Load() {
			c.lingerClose()
		}
		c.abort(errShutdown)
		s.forget(c)
		c.br.Reset(nil)
		s.readPool.Put(c.br)
		c.releaseWriter()
	}()
	for {
		c.phase.Store(phaseIdle)
		c.readDeadline.Store(time.Now().Add(s.idleTimeout).UnixNano())
		if s.closing.Load() && c.br.Buffered() == 0 {
			return
		}
		c.reading.Store(true)
		if _, err := c.br.Peek(1); err != nil {
			return // closed by the client, idle timeout or shutdown
		}
		c.phase.Store(phaseActive)
		c.readDeadline.Store(time.Now().Add(s.headerTimeout).UnixNano())
		c.bodyRead.Store(false)
		req, info, err := c.readRequest()
		c.reading.Store(false)
		if err != nil {
			c.linger = c.refuse(err)
			return
		}
		if !c.handle(req, info) {
			return
		}
	}
}

// reqInfo is what the server needs about a request beyond http.Request.
type reqInfo struct {
	keepAlive      bool
	expectContinue bool
}

// httpError is a request the server refuses before any handler runs.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// BodyFinisher is the ResponseWriter of a Server: FinishBody ends the
// response before the handler returns (see srvResponse.FinishBody).
type BodyFinisher interface{ FinishBody() error }

// MalformedRequest reports whether err, from reading r's body, is the
// client's mistake rather than a connection that failed: a body whose
// framing a Server found malformed, or any error on a connection that
// ServeStd found ambiguously or wrongly framed (its response then needs
// "Connection: close"). The handler should answer 400.
func MalformedRequest(r *http.Request, err error) bool {
	var he *httpError
	return errors.As(err, &he) || framingBroken(r)
}

func badRequest(format string, a ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

// acquireWriter gives the connection a write buffer for one response.
// Idle kept-alive connections hold none: a client's open connections pin
// 4 KiB each, not 36.
func (c *srvConn) acquireWriter() {
	if c.bw == nil {
		c.bw = c.s.bufPool.Get().(*bufio.Writer)
		c.bw.Reset(c)
		c.s.writers.Add(1)
	}
}

func (c *srvConn) releaseWriter() {
	if c.bw != nil {
		c.bw.Reset(nil)
		c.s.bufPool.Put(c.bw)
		c.bw = nil
		c.s.writers.Add(-1)
	}
}

// refuse answers a request that could not be read; it reports whether an
// answer was sent (the caller then closes).
func (c *srvConn) refuse(err error) bool {
	var he *httpError
	if !errors.As(err, &he) {
		return false // the connection failed or timed out: nobody to answer
	}
	c.acquireWriter()
	msg := he.msg + "\n"
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		he.status, http.StatusText(he.status), len(msg), msg)
	return c.bw.Flush() == nil
}

// lingerClose half-closes and reads what the client still sends, for up
// to half a second, before the connection is closed: closing a socket with
// unread input sends a reset, which can destroy the answer in flight
// before the client reads it (the 413 of a too-large body, say).
func (c *srvConn) lingerClose() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.phase.Store(phaseActive)
	c.reading.Store(true)
	c.readDeadline.Store(time.Now().Add(500 * time.Millisecond).UnixNano())
	c.br.Reset(c.nc)
	io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
}

// readLine returns the next header line without its line end, and adds its
// length to *total, which may not exceed the server's header limit.
func (c *srvConn) readLine(total *int) ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		c.line = append(c.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) && len(c.line) <= c.s.maxHeader {
			line, err = c.br.ReadSlice('\n')
			c.line = append(c.line, line...)
		}
		line = c.line
	}
	*total += len(line)
	if *total > c.s.maxHeader {
		return nil, &httpError{status: http.StatusRequestHeaderFieldsTooLarge, msg: fmt.Sprintf("request line and headers exceed %d bytes", c.s.maxHeader)}
	}
	if err != nil {
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return nil, badRequest("request head cut short")
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readRequest parses a request head from c.br and sets up its body.
func (c *srvConn) readRequest() (*http.Request, reqInfo, error) {
	var info reqInfo
	total := 0
	line, err := c.readLine(&total)
	// RFC 9112 §2.2: ignore at least one empty line before a request line.
	if err == nil && len(line) == 0 {
		line, err = c.readLine(&total)
	}
	if err != nil {
		return nil, info, err
	}
	req, err := parseRequestLine(line)
	if err != nil {
		return nil, info, err
	}
	req.RemoteAddr = c.remote
	req.Header = make(http.Header, 8)
	var cl, te []string
	for {
		line, err := c.readLine(&total)
		if err != nil {
			return nil, info, err
		}
		if len(line) == 0 {
			break
		}
		k, v, err := parseHeaderLine(line)
		if err != nil {
			return nil, info, err
		}
		switch k {
		case "Content-Length":
			cl = append(cl, v)
		case "Transfer-Encoding":
			te = append(te, v)
		}
		req.Header[k] = append(req.Header[k], v)
	}
	return req, info, c.frameRequest(req, &info, cl, te)
}

// parseRequestLine parses "METHOD target HTTP/1.x".
func parseRequestLine(line []byte) (*http.Request, error) {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, badRequest("malformed request line")
	}
	rest := line[sp1+1:]
	sp2 := bytes.LastIndexByte(rest, ' ')
	if sp2 <= 0 {
		return nil, badRequest("malformed request line")
	}
	method, target, proto := line[:sp1], rest[:sp2], rest[sp2+1:]
	for _, b := range method {
		if !isTokenByte(b) {
			return nil, badRequest("malformed request method")
		}
	}
	var major, minor int
	switch string(proto) {
	case "HTTP/1.1":
		major, minor = 1, 1
	case "HTTP/1.0":
		major, minor = 1, 0
	default:
		if bytes.HasPrefix(proto, []byte("HTTP/")) {
			return nil, &httpError{status: http.StatusHTTPVersionNotSupported, msg: "only HTTP/1.0 and HTTP/1.1 are served"}
		}
		return nil, badRequest("malformed HTTP version")
	}
	if len(target) == 0 {
		return nil, badRequest("malformed request target")
	}
	for _, b := range target {
		if b <= ' ' || b == 0x7f {
			return nil, badRequest("malformed request target")
		}
	}
	rawTarget := string(target)
	req := &http.Request{Method: string(method), RequestURI: rawTarget, Proto: string(proto), ProtoMajor: major, ProtoMinor: minor}
	if req.Method == http.MethodConnect {
		return nil, &httpError{status: http.StatusMethodNotAllowed, msg: "CONNECT is not served"}
	}
	var err error
	if target[0] == '/' && !bytes.ContainsAny(target, "%?#") {
		// The common case, without url.ParseRequestURI's allocations.
		req.URL = &url.URL{Path: rawTarget}
	} else if req.URL, err = url.ParseRequestURI(rawTarget); err != nil {
		return nil, badRequest("malformed request target")
	}
	return req, nil
}

// parseHeaderLine splits "Name: value" and canonicalises the name.
func parseHeaderLine(line []byte) (string, string, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return "", "", badRequest("obsolete header line folding is not accepted")
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return "", "", badRequest("malformed header line")
	}
	name := line[:colon]
	for _, b := range name {
		if !isTokenByte(b) {
			return "", "", badRequest("malformed header name %q", name)
		}
	}
	v := bytes.Trim(line[colon+1:], " \t")
	for _, b := range v {
		if (b < ' ' && b != '\t') || b == 0x7f {
			return "", "", badRequest("malformed value for header %s", name)
		}
	}
	return canonicalHeader(name), string(v), nil
}

// canonicalHeader is textproto.CanonicalMIMEHeaderKey without allocating
// for the headers every LLM request carries.
func canonicalHeader(name []byte) string {
	switch len(name) {
	case 4:
		if bytes.EqualFold(name, []byte("Host")) {
			return "Host"
		}
	case 6:
		if bytes.EqualFold(name, []byte("Accept")) {
			return "Accept"
		}
	case 9:
		if bytes.EqualFold(name, []byte("X-Api-Key")) {
			return "X-Api-Key"
		}
	case 10:
		if bytes.EqualFold(name, []byte("User-Agent")) {
			return "User-Agent"
		}
		if bytes.EqualFold(name, []byte("Connection")) {
			return "Connection"
		}
	case 11:
		if bytes.EqualFold(name, []byte("Traceparent")) {
			return "Traceparent"
		}
	case 12:
		if bytes.EqualFold(name, []byte("Content-Type")) {
			return "Content-Type"
		}
	case 13:
		if bytes.EqualFold(name, []byte("Authorization")) {
			return "Authorization"
		}
	case 14:
		if bytes.EqualFold(name, []byte("Content-Length")) {
			return "Content-Length"
		}
	case 15:
		if bytes.EqualFold(name, []byte("Accept-Encoding")) {
			return "Accept-Encoding"
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

func isTokenByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}

// frameRequest validates Host, connection handling and the body's framing
// and sets req.Body.
func (c *srvConn) frameRequest(req *http.Request, info *reqInfo, cl, te []string) error {
	hosts := req.Header["Host"]
	switch {
	case len(hosts) > 1:
		return badRequest("more than one Host header")
	case len(hosts) == 1:
		req.Host = hosts[0]
	case req.ProtoMinor == 1:
		return badRequest("missing required Host header")
	}
	if req.URL.Host != "" {
		req.Host = req.URL.Host // absolute-form target (RFC 9112 §3.2.2)
	}
	delete(req.Header, "Host")
	conn := req.Header["Connection"]
	info.keepAlive = req.ProtoMinor == 1
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			switch strings.ToLower(strings.TrimSpace(tok)) {
			case "close":
				info.keepAlive = false
				req.Close = true
			case "keep-alive":
				if req.ProtoMinor == 0 {
					info.keepAlive = true
				}
			}
		}
	}
	if !info.keepAlive {
		req.Close = true
	}
	if ex := req.Header.Get("Expect"); ex != "" {
		if !strings.EqualFold(ex, "100-continue") || req.ProtoMinor == 0 {
			return &httpError{status: http.StatusExpectationFailed, msg: "unsupported Expect header"}
		}
		info.expectContinue = true
	}
	switch {
	case len(te) > 0:
		if len(cl) > 0 {
			return badRequest("both Transfer-Encoding and Content-Length")
		}
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") || req.ProtoMinor == 0 {
			return &httpError{status: http.StatusNotImplemented, msg: "unsupported Transfer-Encoding (only chunked)"}
		}
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
		delete(req.Header, "Transfer-Encoding")
		req.Body = &srvBody{c: c, expect: info.expectContinue, r: httputil.NewChunkedReader(c.br), chunked: true}
	case len(cl) > 0:
		n, err := parseContentLength(cl)
		if err != nil {
			return err
		}
		req.ContentLength = n
		if n == 0 {
			req.Body = http.NoBody
			c.bodyRead.Store(true)
		} else {
			req.Body = &srvBody{c: c, expect: info.expectContinue, r: io.LimitReader(c.br, n), left: n}
		}
	default:
		req.Body = http.NoBody
		c.bodyRead.Store(true)
	}
	return nil
}

// parseContentLength accepts one value, or repeats of the same value.
func parseContentLength(vs []string) (int64, error) {
	var n int64 = -1
	for _, v := range vs {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			if part == "" || len(part) > 18 || strings.TrimLeft(part, "0123456789") != "" {
				return 0, badRequest("malformed Content-Length %q", v)
			}
			m, _ := strconv.ParseInt(part, 10, 64)
			if n >= 0 && m != n {
				return 0, badRequest("conflicting Content-Length values")
			}
			n = m
		}
	}
	return n, nil
}

// srvBody is a request body read straight from the connection's buffer.
type srvBody struct {
	c       *srvConn
	expect  bool // 100 Continue not yet sent
	r       io.Reader
	left    int64 // Content-Length bodies: bytes not yet read
	chunked bool
	eof     bool
	err     error
}

func (b *srvBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.expect {
		// The client waits for this before sending the body.
		b.expect = false
		if _, err := b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err == nil {
			b.c.bw.Flush()
		}
	}
	b.c.reading.Store(true)
	n, err := b.r.Read(p)
	b.c.reading.Store(false)
	b.left -= int64(n)
	switch {
	case err == io.EOF && !b.chunked && b.left > 0:
		err = io.ErrUnexpectedEOF
	case err == io.EOF && b.chunked:
		err = b.c.skipTrailers()
	case err == nil && !b.chunked && b.left == 0:
		err = io.EOF
	}
	if err == io.EOF {
		b.eof = true
		b.c.bodyRead.Store(true)
	} else if err != nil {
		switch {
		case errors.Is(err, net.ErrClosed) && b.c.aborted.Load():
			err = errReadTimeout
		case b.chunked && b.c.readErr == nil:
			// The connection is fine: the chunked framing is not (a
			// chunk size that is not hex, data not followed by CRLF).
			err = &httpError{status: http.StatusBadRequest, msg: "chunked framing: " + err.Error()}
		}
		b.err = err
	}
	return n, err
}

func (b *srvBody) Close() error { return nil }

// skipTrailers reads a chunked body's trailer section (ignored) through its
// final empty line; it returns io.EOF when the body ended cleanly.
func (c *srvConn) skipTrailers() error {
	// Strict, as net/http is: every line ends in CRLF, each trailer is a
	// well-formed header line, and the section is bounded like a head.
	total := 0
	for {
		line, err := c.br.ReadSlice('\n')
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("reading chunked body trailers: %w", err)
		}
		total += len(line)
		if total > c.s.maxHeader {
			return errors.New("chunked body trailers too large")
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return errors.New("malformed end of chunked body")
		}
		if len(line) == 2 {
			return io.EOF
		}
		if _, _, err := parseHeaderLine(line[:len(line)-2]); err != nil {
			return err
		}
	}
}

// maxDrain is the most of a body the handler left unread that is read (and
// discarded) to keep its connection for another request.
const maxDrain = 256 << 10

// drain reads what the handler left of a body so that the next request can
// be read; it reports false when the connection cannot be reused.
func (b *srvBody) drain() bool {
	if b.eof {
		return true
	}
	if b.err != nil {
		return false
	}
	if !b.chunked && b.left > maxDrain {
		return false
	}
	n, err := io.Copy(io.Discard, io.LimitReader(b, maxDrain+1))
	return err == nil && n <= maxDrain && b.eof
}

// handle runs the handler for one request and finishes its response. It
// reports whether the connection can carry another request.
func (c *srvConn) handle(req *http.Request, info reqInfo) bool {
	ctx, cancel := context.WithCancelCause(c.s.base)
	c.cancel.Store(&cancel)
	c.acquireWriter()
	defer func() {
		c.cancel.Store(nil)
		cancel(context.Canceled)
		c.releaseWriter()
	}()
	if c.aborted.Load() {
		return false // aborted between reading the head and here
	}
	req = req.WithContext(ctx)
	w := &srvResponse{c: c, req: req, header: make(http.Header, 8), keepAlive: info.keepAlive && !c.s.closing.Load(), contentLength: -1}
	c.lastWrite.Store(time.Now().UnixNano())
	c.s.handler.ServeHTTP(w, req)
	w.finish()
	if w.err != nil || c.aborted.Load() {
		return false
	}
	b, _ := req.Body.(*srvBody)
	if !w.keepAlive {
		c.linger = b != nil && !b.eof
		return false
	}
	if b != nil && (b.expect || !b.drain()) {
		// A client still waiting for 100 Continue will not send the
		// body: the connection cannot be reused.
		c.linger = !b.expect
		return false
	}
	c.readDeadline.Store(0)
	c.writeDeadline.Store(0)
	return true
}

// srvResponse is the handler's http.ResponseWriter. Body bytes written
// before the first Flush are held (up to 4 KiB) so that a small answer
// goes out with a Content-Length in one write; after that, or when the
// handler flushes, the response is chunked (HTTP/1.1) or delimited by
// closing the connection (HTTP/1.0).
type srvResponse struct {
	c             *srvConn
	req           *http.Request
	header        http.Header
	status        int
	committed     bool
	chunked       bool
	keepAlive     bool
	contentLength int64 // declared by the handler, -1 when not
	written       int64
	finished      bool
	err           error
}

func (w *srvResponse) Header() http.Header { return w.header }

func (w *srvResponse) WriteHeader(code int) {
	if w.status != 0 || w.committed {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An interim answer (103 Early Hints): sent now, headers and all.
		w.c.bw.Write(statusLine(nil, code))
		w.writeHeaderFields(false)
		w.c.bw.WriteString("\r\n")
		w.c.bw.Flush()
		return
	}
	w.status = code
	if v := w.header.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		}
	}
}

func statusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	b = append(b, text...)
	return append(b, "\r\n"...)
}

// bodyAllowed reports whether the response may carry a body at all.
func (w *srvResponse) bodyAllowed() bool {
	return w.req.Method != http.MethodHead && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *srvResponse) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.finished {
		return 0, http.ErrBodyNotAllowed
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.c.pend)+len(p) <= 4<<10 {
			w.c.pend = append(w.c.pend, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

func (w *srvResponse) WriteString(s string) (int, error) {
	// Through Write, so that headers and framing come first; the copy is
	// only for strings too big to hold back.
	return w.Write([]byte(s))
}

// commit writes the status line and headers, choosing the body's framing:
// the handler's Content-Length, else (final) the held bytes' length, else
// chunked, else close-delimited for HTTP/1.0.
func (w *srvResponse) commit(final bool) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.committed = true
	bw := w.c.bw
	h := w.header
	cl := ""
	switch {
	case !w.bodyAllowed() && w.req.Method != http.MethodHead:
	case w.contentLength >= 0:
		cl = strconv.FormatInt(w.contentLength, 10)
	case final:
		cl = strconv.Itoa(len(w.c.pend))
		if w.req.Method == http.MethodHead && len(w.c.pend) == 0 {
			cl = ""
		}
	case w.req.ProtoMinor >= 1:
		w.chunked = w.req.Method != http.MethodHead
	default:
		w.keepAlive = false
	}
	if strings.EqualFold(h.Get("Connection"), "close") || w.c.s.closing.Load() {
		w.keepAlive = false
	}
	if b, ok := w.req.Body.(*srvBody); ok && !b.eof && (b.err != nil || b.expect || (!b.chunked && b.left > maxDrain)) {
		// The rest of the body cannot be read (malformed, never asked for
		// with 100 Continue, or too long to drain): handle will close the
		// connection, so the answer says so.
		w.keepAlive = false
	}
	w.c.line = statusLine(w.c.line[:0], w.status)
	bw.Write(w.c.line)
	w.writeHeaderFields(true)
	if _, ok := h["Date"]; !ok {
		bw.Write(w.c.s.dateHeader())
	}
	if cl != "" {
		bw.WriteString("Content-Length: ")
		bw.WriteString(cl)
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !w.keepAlive {
		bw.WriteString("Connection: close\r\n")
	} else if w.req.ProtoMinor == 0 {
		bw.WriteString("Connection: keep-alive\r\n")
	}
	if _, ok := h["Content-Type"]; !ok && w.bodyAllowed() && len(w.c.pend) > 0 {
		bw.WriteString("Content-Type: ")
		bw.WriteString(http.DetectContentType(w.c.pend))
		bw.WriteString("\r\n")
	}
	bw.WriteString("\r\n")
	pend := w.c.pend
	w.c.pend = w.c.pend[:0]
	if len(pend) > 0 {
		w.writeBody(pend)
	}
}

// writeHeaderFields writes the handler's headers (without those the server
// frames itself when framing); line breaks in values become spaces, as
// net/http does.
func (w *srvResponse) writeHeaderFields(framing bool) {
	bw := w.c.bw
	for k, vs := range w.header {
		if !validHeaderName(k) {
			continue
		}
		if framing {
			switch k {
			case "Content-Length", "Transfer-Encoding", "Connection", "Date":
				continue
			}
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			bw.WriteString(strings.TrimSpace(v))
			bw.WriteString("\r\n")
		}
	}
}

func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenByte(k[i]) {
			return false
		}
	}
	return true
}

func (w *srvResponse) writeBody(p []byte) {
	bw := w.c.bw
	if w.chunked {
		var hb [18]byte
		bw.Write(strconv.AppendUint(hb[:0], uint64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(p)
	w.setErr(err)
}

func (w *srvResponse) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		if w.c.aborted.Load() {
			w.err = fmt.Errorf("writing the response: %w", context.Cause(w.req.Context()))
		}
	}
}

// FlushError sends everything written so far (http.ResponseController
// calls it).
func (w *srvResponse) FlushError() error {
	if w.err != nil {
		return w.err
	}
	if w.finished {
		return nil
	}
	if !w.c.sndbufBound {
		// A flushed response is a stream.
		w.c.boundSendBuffer()
	}
	if !w.committed {
		w.commit(false)
	}
	w.setErr(w.c.bw.Flush())
	return w.err
}

func (w *srvResponse) Flush() { w.FlushError() }

// FinishBody ends the response now: held bytes, the chunked terminator and
// all go out in one write. Later writes fail. A proxy calls it when its
// upstream's last bytes and end arrive together, saving the client a
// wake-up for the terminator alone.
func (w *srvResponse) FinishBody() error {
	w.finish()
	return w.err
}

func (w *srvResponse) finish() {
	if w.finished {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.committed {
		w.commit(true)
	}
	w.finished = true
	if w.chunked && w.err == nil {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.setErr(err)
	}
	if w.contentLength >= 0 && w.written < w.contentLength && w.bodyAllowed() {
		w.keepAlive = false // the client would wait for the missing bytes
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
}

// SetReadDeadline and SetWriteDeadline (http.ResponseController) are
// enforced by the sweeper, which closes the connection once they pass.
func (w *srvResponse) SetReadDeadline(t time.Time) error {
	w.c.readDeadline.Store(unixNanoOrZero(t))
	return nil
}

func (w *srvResponse) SetWriteDeadline(t time.Time) error {
	w.c.writeDeadline.Store(unixNanoOrZero(t))
	return nil
}

func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// dateHeader is the Date line, formatted once a second.
func (s *Server) dateHeader() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := s.date.Load(); d != nil && d.sec == sec {
		return d.line
	}
	d := &dateLine{sec: sec, line: []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")}
	s.date.Store(d)
	return d.line
}

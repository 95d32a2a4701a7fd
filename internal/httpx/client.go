package httpx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client is an HTTP/1.1 client for plain-http servers whose I/O runs on
// the caller's goroutine.
//
// Why not http.Transport: the Transport gives every connection a read loop
// and a write loop goroutine, so one request is handed from the caller to
// the write loop, the response from the read loop back to the caller, and
// the connection back to the read loop at the end of the body — four
// goroutine hand-offs, each a futex wake-up of another thread when both
// CPUs are busy, which on a virtual machine (where a cross-CPU wake-up is a
// VM exit) costs more than the request's own work. Here the caller's
// goroutine writes the request (one write system call), parses the
// response with http.ReadResponse and reads the body, and puts the
// connection back in an idle pool when the body ended cleanly.
//
// It speaks plain HTTP/1.1 only: TLS (https) stays with http.Transport.
type Client struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int // idle connections kept per address
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]*h1Conn // per address, most recently used last
	closed bool
}

type h1Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Dial opens connections (nil: a net.Dialer with a 5 s timeout and 30 s
	// keep-alives).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost is the most idle connections kept per address (0: 2,
	// as http.Transport keeps).
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection is kept (0: 90 s).
	IdleTimeout time.Duration
}

// NewClient returns a Client; Close releases its idle connections.
func NewClient(o ClientOptions) *Client {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = http.DefaultMaxIdleConnsPerHost
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	return &Client{dial: o.Dial, maxIdle: o.MaxIdlePerHost, idleTimeout: o.IdleTimeout, idle: map[string][]*h1Conn{}}
}

// get takes the most recently used idle connection to addr (warm in every
// cache), dropping expired ones.
func (c *Client) get(addr string, now time.Time) *h1Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.idle[addr]
	for len(l) > 0 {
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		l = l[:len(l)-1]
		if now.Sub(pc.idleAt) < c.idleTimeout {
			c.idle[addr] = l
			return pc
		}
		pc.nc.Close()
	}
	c.idle[addr] = l
	return nil
}

// put returns a connection whose response was read to its end.
func (c *Client) put(pc *h1Conn) {
	pc.idleAt = time.Now()
	c.mu.Lock()
	if c.closed || len(c.idle[pc.addr]) >= c.maxIdle {
		c.mu.Unlock()
		pc.nc.Close()
		return
	}
	c.idle[pc.addr] = append(c.idle[pc.addr], pc)
	c.mu.Unlock()
}

// DropIdle closes the idle connections to host (a URL's host, with or
// without a port: 80 by default). A connection error on one of them (or a
// health check that found the server down or back up) means the server
// closed or restarted: every connection it had open is as dead as the one
// that failed, and trying them one by one would hand each failure to a
// caller (a restarted server stayed unusable until the pool's idle
// timeout, 90 s).
func (c *Client) DropIdle(host string) { c.dropIdle(hostPort(host)) }

func (c *Client) dropIdle(addr string) {
	c.mu.Lock()
	l := c.idle[addr]
	delete(c.idle, addr)
	c.mu.Unlock()
	for _, pc := range l {
		pc.nc.Close()
	}
}

// IdleCount is the number of idle connections pooled for host.
func (c *Client) IdleCount(host string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.idle[hostPort(host)])
}

// Close closes the idle connections and stops pooling.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for a, l := range c.idle {
		for _, pc := range l {
			pc.nc.Close()
		}
		delete(c.idle, a)
	}
}

// hostPort is the dial address of a URL's host.
func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}

// RoundTrip sends req with exactly body (req.Body is not read) and returns
// the response; its Body must be closed. The request's context cancels it
// (blocked I/O included), and an httptrace.ClientTrace in it hears
// WroteRequest. A request that fails on a reused idle connection before
// any response byte (the server closed it while idle, or restarted) is
// sent once more on a newly dialled connection, as http.Transport does for
// requests it knows were not processed: not on another pooled one, which
// is likely just as stale.
func (c *Client) RoundTrip(req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	addr := hostPort(req.URL.Host)
	pc := c.get(addr, time.Now())
	for fresh := pc == nil; ; fresh = true {
		if pc == nil {
			nc, err := c.dial(ctx, "tcp", addr)
			if err != nil {
				if ctx.Err() == nil {
					// Nothing listens there: pooled connections are to a
					// process that is gone.
					c.dropIdle(addr)
				}
				return nil, fmt.Errorf("connecting to %s: %w", addr, err)
			}
			pc = &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 16<<10), addr: addr}
		}
		resp, err := c.exchange(ctx, pc, req, body)
		if err == nil {
			return resp, nil
		}
		pc.nc.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("request to %s: %w (%v)", addr, ctx.Err(), err)
		}
		c.dropIdle(addr)
		if !fresh && staleConnErr(err) {
			pc = nil
			continue
		}
		return nil, err
	}
}

// staleConnErr reports errors that a server's closing of an idle
// keep-alive connection produces before any response byte.
func staleConnErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// aLongTimeAgo is a deadline in the past: setting it unblocks pending I/O.
var aLongTimeAgo = time.Unix(1, 0)

func (c *Client) exchange(ctx context.Context, pc *h1Conn, req *http.Request, body []byte) (*http.Response, error) {
	// Cancellation (the caller's client gone, a timeout) interrupts blocked
	// I/O on the connection, which is then closed, never reused.
	stop := context.AfterFunc(ctx, func() { pc.nc.SetDeadline(aLongTimeAgo) })
	if err := writeRequest(pc.bw, req, body); err != nil {
		stop()
		return nil, fmt.Errorf("writing request to %s: %w", pc.addr, err)
	}
	// As http.Transport does: the caller may ask whether the server got
	// the whole request (a timeout after that is not a connect failure).
	if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.WroteRequest != nil {
		tr.WroteRequest(httptrace.WroteRequestInfo{})
	}
	// Wait for the first byte apart, so that a connection the server
	// closed while idle (EOF or reset before any byte) is told from a
	// response cut short.
	if _, err := pc.br.Peek(1); err != nil {
		stop()
		return nil, fmt.Errorf("reading response from %s: %w", pc.addr, err)
	}
	resp, err := http.ReadResponse(pc.br, req)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // some bytes came: not a stale connection
	}
	// Interim 1xx answers (100 Continue, 103 Early Hints) precede the real one.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(pc.br, req)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("reading response from %s: %w", pc.addr, err)
	}
	resp.Body = &h1Body{c: c, pc: pc, body: resp.Body, stop: stop, reuse: !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	return resp, nil
}

// writeRequest writes the request line, headers and body and flushes them
// in one write (bodies larger than the buffer: two).
func writeRequest(w *bufio.Writer, req *http.Request, body []byte) error {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		for _, v := range vs {
			// Values the caller adds (a key from the environment, say)
			// are checked as the Transport would.
			if strings.ContainsAny(v, "\r\n\x00") {
				return fmt.Errorf("header %s: value contains a line break or NUL", k)
			}
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("Content-Length: ")
	var nb [20]byte
	w.Write(strconv.AppendInt(nb[:0], int64(len(body)), 10))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	return w.Flush()
}

// h1Body is a response body that returns its connection to the pool when
// it was read to its end, and closes it otherwise. The inner body's Close
// is never called: for an unfinished response it would drain the rest of
// the stream, which for a stalled or endless one never ends.
type h1Body struct {
	c      *Client
	pc     *h1Conn
	body   io.ReadCloser
	stop   func() bool
	reuse  bool
	eof    bool
	closed bool
}

var errBodyClosed = errors.New("read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// The server died mid-answer (not our own cancellation, which
		// poisons the deadline): its idle connections died with it.
		b.c.dropIdle(b.pc.addr)
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// stop reports false when cancellation already poisoned the
	// connection's deadline; bytes left buffered past the end of the
	// response mean the server does not speak HTTP/1.1 as we think.
	if b.stop() && b.eof && b.reuse && b.pc.br.Buffered() == 0 {
		b.c.put(b.pc)
		return nil
	}
	return b.pc.nc.Close()
}

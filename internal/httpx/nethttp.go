package httpx

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// ServeStd serves h on ln with net/http.Server, with the request framing
// checks of this package's Server (framingListener), until ctx ends; then
// it shuts down gracefully (requests in flight get up to
// o.ShutdownGrace). Requests' contexts carry ctx's values, not its
// cancellation. Of o it uses HeaderTimeout (for the request head),
// IdleTimeout, MaxHeaderBytes, ShutdownGrace and Logger (net/http's
// errors, as warnings).
func ServeStd(ctx context.Context, ln net.Listener, h http.Handler, o ServerOptions) error {
	o.defaults()
	srv := &http.Server{
		// Requests net/http frames more leniently than Server are
		// refused here.
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !refuseAmbiguous(w, r) {
				h.ServeHTTP(w, r)
			}
		}),
		ReadHeaderTimeout: o.HeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:       framingContext,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(framingListener{ln}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// framingListener serves net/http.Server (ServeStd) with the request
// framing checks of this package's Server.
//
// net/http reads a request that has both Content-Length and
// Transfer-Encoding: chunked by its chunked body, drops the Content-Length
// header before any handler sees it, and keeps the connection (RFC 9112
// §6.3 allows the first, but says the connection must then be closed). A
// front proxy that went by the Content-Length sees different request
// boundaries: what follows the chunked body is a request smuggled past it.
// Each connection is therefore followed as net/http reads it (framingConn),
// and a request on a connection where such a head was seen is refused
// before its handler runs, with 400 and Connection: close, as Server does
// (a handler whose body read failed there learns it from MalformedRequest).
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, cl: -1, first: true}, nil
}

// framingConnKey is the request context key of a request's framingConn.
type framingConnKey struct{}

// framingContext is http.Server.ConnContext: it lets the handler find the
// connection its request came on.
func framingContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingConnKey{}, fc)
	}
	return ctx
}

// framingBroken reports whether r came (through net/http) on a connection
// whose request framing could not be followed: an ambiguous head, or a
// malformed length or chunked body.
func framingBroken(r *http.Request) bool {
	fc, _ := r.Context().Value(framingConnKey{}).(*framingConn)
	return fc != nil && fc.bad.Load()
}

// refuseAmbiguous answers 400 and reports true for a request on a
// connection with broken framing (see framingListener), before its
// handler runs.
func refuseAmbiguous(w http.ResponseWriter, r *http.Request) bool {
	if !framingBroken(r) {
		return false
	}
	w.Header().Set("Connection", "close")
	http.Error(w, "malformed or ambiguous request framing (both Content-Length and Transfer-Encoding, header folding, a malformed length or chunk)", http.StatusBadRequest)
	return true
}

// Where a framingConn is in the request bytes it passes on.
const (
	frameHead      = iota // request line and headers
	frameBody             // a Content-Length body
	frameChunkSize        // a chunk-size line
	frameChunkData        // a chunk's data
	frameChunkEnd         // the CRLF after a chunk's data
	frameTrailer          // trailer lines
	frameLost             // stopped following: bad is set
)

// maxFrameLine bounds a line kept across reads (net/http's head limit is
// 64 KiB, plus its slack).
const maxFrameLine = 64<<10 + 4096

// framingConn follows the request framing of the bytes net/http reads
// from it: the heads (for their Content-Length and Transfer-Encoding) and
// the bodies between them (skipped by length or by chunk). Only net/http
// reads it, one Read at a time; bad is read by handlers.
type framingConn struct {
	net.Conn
	// bad: a head had both Content-Length and Transfer-Encoding (or folded
	// lines, or a length that could not be read), so the framing cannot
	// be trusted from there on.
	bad atomic.Bool

	state  int
	line   []byte // a line cut by the end of a read
	left   int64  // bytes of the body or chunk still to come
	first  bool   // the next head line is the request line
	http10 bool   // the head is HTTP/1.0's (net/http ignores its Transfer-Encoding)
	cl     int64  // the head's Content-Length, -1 when none
	te     bool   // the head has a Transfer-Encoding
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.follow(p[:n])
	return n, err
}

// CloseWrite keeps net/http's graceful close (half-close, then wait)
// working through the wrapper.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *framingConn) follow(p []byte) {
	for len(p) > 0 && c.state != frameLost {
		if c.state == frameBody || c.state == frameChunkData {
			k := min(int64(len(p)), c.left)
			p, c.left = p[k:], c.left-k
			if c.left == 0 {
				if c.state == frameBody {
					c.state = frameHead
				} else {
					c.state = frameChunkEnd
				}
			}
			continue
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(c.line)+len(p) > maxFrameLine {
				c.lose()
				return
			}
			c.line = append(c.line, p...)
			return
		}
		line := p[:i]
		if len(c.line) > 0 {
			c.line = append(c.line, line...)
			line = c.line
		}
		p = p[i+1:]
		c.onLine(bytes.TrimSuffix(line, []byte("\r")))
		c.line = c.line[:0]
	}
}

func (c *framingConn) lose() {
	c.state = frameLost
	c.bad.Store(true)
}

func (c *framingConn) onLine(line []byte) {
	switch c.state {
	case frameHead:
		switch {
		case c.first:
			if len(line) > 0 {
				c.first, c.cl, c.te = false, -1, false
				c.http10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
			}
		case len(line) == 0: // the end of the head
			c.first = true
			switch {
			case c.te && c.cl >= 0:
				c.lose()
			case c.te && !c.http10:
				c.state = frameChunkSize
			case c.cl > 0:
				c.state, c.left = frameBody, c.cl
			}
		case line[0] == ' ' || line[0] == '\t':
			c.lose() // a folded line: what it continues is ambiguous
		default:
			name, v, _ := bytes.Cut(line, []byte(":"))
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				n, err := strconv.ParseInt(string(bytes.Trim(v, " \t")), 10, 64)
				if err != nil || n < 0 || (c.cl >= 0 && n != c.cl) {
					c.lose()
					return
				}
				c.cl = n
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				c.te = true
			}
		}
	case frameChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.Trim(size, " \t")), 16, 64)
		switch {
		case err != nil || n < 0:
			c.lose()
		case n == 0:
			c.state = frameTrailer
		default:
			c.state, c.left = frameChunkData, n
		}
	case frameChunkEnd:
		if len(line) != 0 {
			c.lose()
			return
		}
		c.state = frameChunkSize
	case frameTrailer:
		if len(line) == 0 {
			c.state = frameHead
		}
	}
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// TimingServer is a minimal OpenAI-compatible streaming server that writes
// its first token a known time after each request arrives and remembers
// when every first token actually left, so a client's added error can be
// measured exactly. It backs --self-check and the package's tests.
//
// A request header X-Test-Fault makes it misbehave: "status" (HTTP 503),
// "cut" (drop the connection after the first token), "malformed" (a broken
// JSON chunk), "error-event" (a 200 whose stream carries an error),
// "stall" (never send a token), "no-done" (end without [DONE]), "json" (one
// JSON body instead of a stream).
type TimingServer struct {
	FirstTokenDelay time.Duration
	TokenInterval   time.Duration
	Tokens          int

	mu    sync.Mutex
	first map[string]time.Time // X-Request-Id -> first-token write time
	recv  map[string]time.Time
}

// NewTimingServer returns a server writing tokens tokens, the first after
// firstDelay and then one per interval.
func NewTimingServer(firstDelay, interval time.Duration, tokens int) *TimingServer {
	return &TimingServer{FirstTokenDelay: firstDelay, TokenInterval: interval, Tokens: tokens,
		first: map[string]time.Time{}, recv: map[string]time.Time{}}
}

// FirstTokenWrite returns when the first token for request id was written
// and when the request arrived.
func (s *TimingServer) FirstTokenWrite(id string) (first, received time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok = s.first[id]
	return first, s.recv[id], ok
}

// Start serves s on ln in the background. Its connections take kernel
// receive timestamps (where the platform has them), so a request's arrival
// is when its last byte reached the host, not when the handler got to run.
func (s *TimingServer) Start(ln net.Listener) *http.Server {
	srv := &http.Server{Handler: s, ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		if st := stamperOf(c); st != nil {
			return context.WithValue(ctx, arrivalKey{}, st)
		}
		return ctx
	}}
	go func() { _ = srv.Serve(stampingListener{ln}) }()
	return srv
}

type arrivalKey struct{}

// stampingListener turns on kernel receive timestamps on accepted
// connections.
type stampingListener struct{ net.Listener }

func (l stampingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return withRXStamps(c), nil
}

func (s *TimingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	switch r.URL.Path {
	case "/_timings":
		// For a client in another process: every first-token write and
		// arrival time, as Unix nanoseconds (the wall clock both share).
		s.mu.Lock()
		out := make(map[string][2]int64, len(s.first))
		for id, t := range s.first {
			out[id] = [2]int64{t.UnixNano(), s.recv[id].UnixNano()}
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"timing-server","object":"model","owned_by":"ttft"}]}`)
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var body struct {
		MaxTokens int `json:"max_tokens"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&body)
	if st, ok := r.Context().Value(arrivalKey{}).(rxStamper); ok {
		// The body is read: the connection's latest read brought the
		// request's last byte.
		at := &arrivalClock{conn: st, now: time.Now}
		if t := at.Now(); at.stamped {
			recv = t
		}
	}
	id := r.Header.Get("X-Request-Id")
	fault := r.Header.Get("X-Test-Fault")
	if fault == "status" {
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		return
	}
	if fault == "json" { // a server that ignores stream: true
		time.Sleep(s.FirstTokenDelay)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":" tok0 tok1"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
		return
	}
	n := s.Tokens
	if body.MaxTokens > 0 && body.MaxTokens < n {
		n = body.MaxTokens
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	fl.Flush()
	if fault == "stall" {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	next := recv.Add(s.FirstTokenDelay)
	buf := make([]byte, 0, 256)
	for i := range n {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		buf = buf[:0]
		switch {
		case fault == "malformed" && i == 1:
			buf = append(buf, "data: {\"choices\":[{\"delta\":\n\n"...)
		case fault == "error-event" && i == 1:
			buf = append(buf, "data: {\"error\":{\"message\":\"engine failure\"}}\n\n"...)
		case chat:
			buf = append(buf, `data: {"choices":[{"index":0,"delta":{"content":" tok`...)
			buf = strconv.AppendInt(buf, int64(i), 10)
			buf = append(buf, "\"},\"finish_reason\":null}]}\n\n"...)
		default:
			buf = append(buf, `data: {"choices":[{"index":0,"text":" tok`...)
			buf = strconv.AppendInt(buf, int64(i), 10)
			buf = append(buf, "\",\"finish_reason\":null}]}\n\n"...)
		}
		// Stamp before writing: the client may see the bytes before Write
		// returns here.
		wrote := time.Now()
		if _, err := w.Write(buf); err != nil {
			return
		}
		fl.Flush()
		if i == 0 && id != "" {
			t := wrote
			s.mu.Lock()
			s.first[id], s.recv[id] = t, recv
			s.mu.Unlock()
		}
		if fault == "cut" && i == 0 {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
				}
			}
			return
		}
		if fault == "malformed" && i == 1 || fault == "error-event" && i == 1 {
			return
		}
		next = next.Add(s.TokenInterval)
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", 0, n)
	if fault != "no-done" {
		io.WriteString(w, "data: [DONE]\n\n")
	}
	fl.Flush()
}

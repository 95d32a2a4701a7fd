package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ttft-dev/ttft/internal/lru"
)

// Config is one stand-in backend's latency model.
type Config struct {
	// Name labels the server (its /metrics and errors).
	Name string
	// Model is the model id served (default "standin").
	Model string
	// BlockChars is the prefix cache's block size in characters of the
	// canonical prompt (default 256).
	BlockChars int
	// CacheBlocks is the prefix cache's capacity in blocks (0: no cache).
	CacheBlocks int
	// Slots is how many requests run at once (default 4); the rest wait
	// first-in first-out.
	Slots int
	// Overhead is the fixed cost of a request before its first token.
	Overhead time.Duration
	// PrefillPerKChar is the prefill cost per 1,000 uncached characters.
	PrefillPerKChar time.Duration
	// DecodePerToken is the time between output tokens.
	DecodePerToken time.Duration
	// Speed divides every cost (default 1; 2 is twice as fast).
	Speed float64
	// DriftAfter, when positive, is when every cost starts being
	// multiplied by DriftFactor (a backend that slows mid-run): once
	// the fleet (the servers StartFleet started together) has received
	// that many chat requests. A count, not a time, so that every
	// policy run on the same requests meets the drift at the same point
	// of them: a fast policy gets through a fixed number of requests
	// sooner, and an event set at a time would come after its run had
	// ended (as it did, until 2026-12-06, on every policy that beat
	// round-robin well: docs/routing-evaluation.md, "Events on the
	// requests' clock").
	DriftAfter  int
	DriftFactor float64
	// NoMetrics turns /metrics off (an engine that publishes nothing).
	NoMetrics bool
	// SharedPrefill makes the requests in prefill share one processor:
	// with n of them prefilling at once each advances at 1/n of its
	// speed, as an engine batching prefills into the same GPU steps
	// does, where independent slots would run them side by side at full
	// speed. Slots then bounds how many requests run, not how fast.
	SharedPrefill bool
	// Network is a round trip between the gateway and this backend (a
	// replica in another zone): each chat request reaches the server
	// that much later. The server's records (Served) start when it
	// arrives, so they do not count it; a client's TTFT does.
	Network time.Duration
	// LateHeaders sends a stream's response headers with its first
	// token, as Ollama does, instead of once the request is parsed.
	LateHeaders bool
	// UpAfter, when positive, is an outage: once the fleet has received
	// DownAfter chat requests the server is gone — requests in flight
	// cut, connections refused — and once it has received UpAfter (the
	// others took them) it is back on the same address as a restarted
	// engine would be: an empty cache, its published counters from
	// zero, a new process start time. DownAfter 0 is a replica that
	// comes up late (a scale-out, or a slow start). Counts, as for
	// DriftAfter.
	DownAfter, UpAfter int
	// ErrorShare of the chat requests are answered 503 at once, before
	// any work (an engine shedding load, or failing now and then),
	// drawn from a generator seeded by Name.
	ErrorShare float64
}

// WithDefaults is c with its zero fields at their defaults, as Start
// serves it.
func (c Config) WithDefaults() Config {
	c.defaults()
	return c
}

func (c *Config) defaults() {
	if c.Model == "" {
		c.Model = "standin"
	}
	if c.BlockChars <= 0 {
		c.BlockChars = 256
	}
	if c.Slots <= 0 {
		c.Slots = 4
	}
	if c.Speed <= 0 {
		c.Speed = 1
	}
	if c.DriftFactor <= 0 {
		c.DriftFactor = 1
	}
}

// Stats are a server's counters since Start.
type Stats struct {
	Requests     int64
	QueriedChars int64 // prompt characters looked up in the prefix cache
	HitChars     int64 // of which found cached
	Running      int
	Waiting      int
}

// Served is one request as the server saw it, for judging routing by
// what the backends experienced rather than by what a client measured
// through whatever proxies stood in between.
type Served struct {
	// ID is the request's X-Request-Id header ("" when it had none), by
	// which a load generator's records are matched to the server's.
	ID string
	// Arrived is when the handler started on the request.
	Arrived time.Time
	// Queued is the wait for a slot; TTFT the time from arrival to the
	// first content token's write, taken just before it is flushed (the
	// whole answer for a request that does not stream), so a client can
	// only see it later: queueing, the prefill of the
	// uncached characters and the fixed overhead, as the server paid
	// them.
	Queued, TTFT time.Duration
	// Late is how much longer than its own latency model the server took
	// to the first token: TTFT less the slot wait and the modelled
	// prefill and overhead (0 when on time). It is the host's, not the
	// routing's: a stalled machine, a starved goroutine, a timer that
	// fired late.
	Late time.Duration
	// PromptChars and HitChars: the prompt's length and how much of it
	// the prefix cache held.
	PromptChars, HitChars int
	// Backend is the stand-in's Config.Name.
	Backend string
}

// HitRate is the share of prompt characters served from the cache.
func (s Stats) HitRate() float64 {
	if s.QueriedChars == 0 {
		return 0
	}
	return float64(s.HitChars) / float64(s.QueriedChars)
}

// Server is one running stand-in backend.
type Server struct {
	cfg      Config
	url      string
	srv      *http.Server
	arrivals *Arrivals

	mu      sync.Mutex
	cache   *lru.Set[uint64] // nil without a cache
	running int
	queue   []chan struct{} // FIFO of requests waiting for a slot
	stats   Stats
	served  []Served         // every request that got its first token, in that order
	prefill *sharedProcessor // nil unless SharedPrefill
	// since is the counters as they stood at the last restart: what the
	// engine publishes counts from there (Stats counts the whole run).
	since   Stats
	started time.Time // the process start time published
	closed  bool      // Close was called: an outage does not come back
	rng     *rand.Rand
}

// Arrivals counts the chat requests that reached a fleet's servers
// (retries included; a refused connection reached none), the clock
// their events (DriftAfter, DownAfter, UpAfter) are set on.
type Arrivals struct {
	n       atomic.Int64 // read on every cost (factor), so not under mu
	mu      sync.Mutex
	waiters []arrivalWaiter
}

type arrivalWaiter struct {
	at int
	ch chan struct{}
}

// Count is how many have arrived.
func (a *Arrivals) Count() int { return int(a.n.Load()) }

func (a *Arrivals) add() {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := int(a.n.Add(1))
	a.waiters = slices.DeleteFunc(a.waiters, func(w arrivalWaiter) bool {
		if n >= w.at {
			close(w.ch)
			return true
		}
		return false
	})
}

// wait blocks until n have arrived; false when ctx ended first.
func (a *Arrivals) wait(ctx context.Context, n int) bool {
	a.mu.Lock()
	if a.Count() >= n {
		a.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	a.waiters = append(a.waiters, arrivalWaiter{at: n, ch: ch})
	a.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// Start listens on a loopback port and serves cfg's model until ctx ends
// or Close. Its events count its own arrivals.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	return startServer(ctx, cfg, &Arrivals{})
}

func startServer(ctx context.Context, cfg Config, arrivals *Arrivals) (*Server, error) {
	cfg.defaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("stand-in %s: listening: %w", cfg.Name, err)
	}
	s := &Server{cfg: cfg, url: "http://" + ln.Addr().String(), arrivals: arrivals, started: time.Now()}
	s.rng = rand.New(rand.NewPCG(xxhash.Sum64String(cfg.Name), 0x5eed))
	if cfg.CacheBlocks > 0 {
		s.cache = lru.NewSet[uint64](cfg.CacheBlocks)
	}
	if cfg.SharedPrefill {
		s.prefill = newSharedProcessor()
	}
	s.srv = s.newHTTPServer()
	if cfg.UpAfter > 0 && cfg.DownAfter <= 0 {
		// Not up yet: nothing listens on the address until the outage
		// ends.
		_ = ln.Close()
	} else {
		go func() { _ = s.srv.Serve(ln) }()
	}
	if cfg.UpAfter > 0 {
		go s.outage(ctx)
	}
	go func() {
		<-ctx.Done()
		_ = s.Close()
	}()
	return s, nil
}

func (s *Server) newHTTPServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	if !s.cfg.NoMetrics {
		mux.HandleFunc("GET /metrics", s.metrics)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

// outage takes the server down at DownAfter arrivals and brings it back,
// restarted, at UpAfter (Config.UpAfter).
func (s *Server) outage(ctx context.Context) {
	if s.cfg.DownAfter > 0 {
		if !s.arrivals.wait(ctx, s.cfg.DownAfter) {
			return
		}
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		// Cuts the requests in flight: their handlers' contexts end, so
		// they leave their slots and the queue as a dead process's would.
		_ = srv.Close()
	}
	if !s.arrivals.wait(ctx, s.cfg.UpAfter) {
		return
	}
	addr := strings.TrimPrefix(s.url, "http://")
	var ln net.Listener
	var err error
	for range 50 { // the port is ours; a moment's wait if the kernel still holds it
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return
		}
	}
	if err != nil {
		return // stays down: the run sees a dead backend
	}
	srv := s.newHTTPServer()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return
	}
	if s.cfg.CacheBlocks > 0 {
		s.cache = lru.NewSet[uint64](s.cfg.CacheBlocks)
	}
	s.since = s.stats
	s.started = time.Now()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// StartFleet starts one server per config, their events counting the
// requests that reach any of them; on an error it closes those already
// started.
func StartFleet(ctx context.Context, cfgs []Config) ([]*Server, error) {
	var ss []*Server
	arrivals := &Arrivals{}
	for _, c := range cfgs {
		s, err := startServer(ctx, c, arrivals)
		if err != nil {
			for _, o := range ss {
				_ = o.Close()
			}
			return nil, err
		}
		ss = append(ss, s)
	}
	return ss, nil
}

// URL is the server's base URL (http://127.0.0.1:port).
func (s *Server) URL() string { return s.url }

// Config is the server's configuration, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Close stops the server, cutting requests in flight.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.srv
	s.mu.Unlock()
	return srv.Close()
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running, st.Waiting = s.running, len(s.queue)
	return st
}

// Served returns a copy of the requests that got their first token since
// Start, in the order of their first tokens.
func (s *Server) Served() []Served {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.served)
}

// record notes a request's first token, written at first; modelled is
// what the latency model said it would take from the slot on. The caller
// stamps first before the flush, not after: a goroutine preempted between
// the two would otherwise stamp a token the client already holds.
func (s *Server) record(id string, arrived, slot, first time.Time, prompt, hit int, modelled time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served = append(s.served, Served{ID: id, Arrived: arrived, Queued: slot.Sub(arrived), TTFT: first.Sub(arrived),
		Late: max(first.Sub(slot)-modelled, 0), PromptChars: prompt, HitChars: hit, Backend: s.cfg.Name})
}

// factor is the cost multiplier now: drift over speed.
func (s *Server) factor() float64 {
	f := 1 / s.cfg.Speed
	if s.cfg.DriftAfter > 0 && s.arrivals.Count() >= s.cfg.DriftAfter {
		f *= s.cfg.DriftFactor
	}
	return f
}

// acquire waits first-in first-out for a slot.
func (s *Server) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.running < s.cfg.Slots && len(s.queue) == 0 {
		s.running++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.queue = append(s.queue, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, c := range s.queue {
			if c == ch {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				return ctx.Err()
			}
		}
		// The slot was handed over as the context ended: pass it on.
		s.handOff()
		return ctx.Err()
	}
}

// release frees a slot.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handOff()
}

// handOff gives the caller's slot to the first waiter, or frees it
// (s.mu held).
func (s *Server) handOff() {
	if len(s.queue) > 0 {
		ch := s.queue[0]
		s.queue = s.queue[1:]
		close(ch)
		return
	}
	s.running--
}

// lookup returns how many leading characters of prompt the cache holds
// and caches every full block of it (most recent first block, as an
// engine touching a shared prefix on every request keeps it longest).
// BlockHashes is how a stand-in keys its cache: the prompt's whole
// blocks of blockChars characters, each hash chained to the one before.
func BlockHashes(prompt string, blockChars int) []uint64 {
	n := len(prompt) / blockChars
	hashes := make([]uint64, n)
	var prev uint64
	for i := range n {
		prev = xxhash.Sum64String(strconv.FormatUint(prev, 16) + prompt[i*blockChars:(i+1)*blockChars])
		hashes[i] = prev
	}
	return hashes
}

func (s *Server) lookup(prompt string) int {
	hashes := BlockHashes(prompt, s.cfg.BlockChars)
	n := len(hashes)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Requests++
	s.stats.QueriedChars += int64(len(prompt))
	if s.cache == nil {
		return 0
	}
	hit := 0
	for hit < n && s.cache.Contains(hashes[hit]) {
		hit++
	}
	for i := n - 1; i >= 0; i-- {
		s.cache.Touch(hashes[i])
	}
	s.stats.HitChars += int64(hit * s.cfg.BlockChars)
	return hit * s.cfg.BlockChars
}

type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Stream              bool          `json:"stream"`
	MaxTokens           int           `json:"max_tokens"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text is a message's content: a string, or the text of an array of
// parts.
func (m chatMessage) text() (string, error) {
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", errors.New("content is neither a string nor an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
	_, _ = w.Write(b)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.arrivals.add()
	if !sleep(r.Context(), s.cfg.Network) {
		return
	}
	arrived := time.Now()
	var req chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil {
		httpError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if s.cfg.ErrorShare > 0 {
		s.mu.Lock()
		fail := s.rng.Float64() < s.cfg.ErrorShare
		s.mu.Unlock()
		if fail {
			httpError(w, http.StatusServiceUnavailable, "stand-in "+s.cfg.Name+": overloaded, try again")
			return
		}
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		httpError(w, http.StatusNotFound, fmt.Sprintf("model %q not served (this is %q)", req.Model, s.cfg.Model))
		return
	}
	var prompt strings.Builder
	for i, m := range req.Messages {
		t, err := m.text()
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("messages[%d]: %v", i, err))
			return
		}
		// Role and separators as part of the cached text, as a chat
		// template would render them.
		prompt.WriteString("<" + m.Role + ">" + t + "\n")
	}
	out := max(req.MaxTokens, req.MaxCompletionTokens)
	if out <= 0 {
		out = 16
	}
	if req.Stream && !s.cfg.LateHeaders {
		// As vLLM, SGLang and TGI answer a stream: headers once the
		// request is parsed, before it waits for a slot.
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}
	ctx := r.Context()
	if err := s.acquire(ctx); err != nil {
		return
	}
	defer s.release()
	slot := time.Now()
	id := r.Header.Get("X-Request-Id")
	p := prompt.String()
	hit := s.lookup(p)
	f := s.factor()
	prefill := time.Duration(f * (float64(s.cfg.Overhead) + float64(s.cfg.PrefillPerKChar)*float64(len(p)-hit)/1000))
	if s.prefill != nil {
		// The overhead is the request's own (parsing, scheduling); only
		// the prefill's compute is shared.
		own := time.Duration(f * float64(s.cfg.Overhead))
		if !sleep(ctx, own) || !s.prefill.run(ctx, prefill-own) {
			return
		}
		// Late is judged against the time the processor's sharing
		// allowed, not against the request alone.
		prefill = time.Since(slot)
	} else if !sleep(ctx, prefill) {
		return
	}
	promptTokens := len(p) / 4
	if !req.Stream {
		if !sleep(ctx, time.Duration(f*float64(s.cfg.DecodePerToken)*float64(out-1))) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{
			"id": "standin", "object": "chat.completion", "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length",
				"message": map[string]any{"role": "assistant", "content": strings.Repeat("tok ", out)}}},
			"usage": usage(promptTokens, out, hit/4),
		})
		first := time.Now()
		_, _ = w.Write(b)
		s.record(id, arrived, slot, first, len(p), hit, prefill+time.Duration(f*float64(s.cfg.DecodePerToken)*float64(out-1)))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "standin", "object": "chat.completion.chunk", "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for i := range out {
		if i > 0 {
			if !sleep(ctx, time.Duration(s.factor()*float64(s.cfg.DecodePerToken))) {
				return
			}
		}
		var finish any
		if i == out-1 {
			finish = "length"
		}
		chunk(map[string]any{"content": "tok "}, finish)
		first := time.Now()
		if i < out-1 && fl != nil {
			fl.Flush()
		}
		if i == 0 {
			// Written and, but for a one-token answer (flushed with its
			// end below), flushed: the server's part of the TTFT is done.
			s.record(id, arrived, slot, first, len(p), hit, prefill)
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		b, _ := json.Marshal(map[string]any{"id": "standin", "object": "chat.completion.chunk", "model": s.cfg.Model,
			"choices": []any{}, "usage": usage(promptTokens, out, hit/4)})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func usage(prompt, out, cached int) map[string]any {
	return map[string]any{"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{"id": s.cfg.Model, "object": "model", "owned_by": "standin"}}})
	_, _ = w.Write(b)
}

// metrics writes vLLM-named series: running and waiting requests, cache
// usage, prefix-cache queries and hits (in tokens, a token being four
// characters here) and the cache's configuration, so that a gateway
// reading vLLM's metrics can learn from a stand-in too.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	used := 0
	s.mu.Lock()
	if s.cache != nil {
		used = s.cache.Len()
	}
	since, started := s.since, s.started
	s.mu.Unlock()
	st.QueriedChars -= since.QueriedChars
	st.HitChars -= since.HitChars
	usage := 0.0
	if s.cfg.CacheBlocks > 0 {
		usage = float64(used) / float64(s.cfg.CacheBlocks)
	}
	lbl := fmt.Sprintf(`{model_name=%q}`, s.cfg.Model)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d\n", lbl, st.Running)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %d\n", lbl, st.Waiting)
	fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s %g\n", lbl, usage)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total%s %d\n", lbl, st.QueriedChars/4)
	fmt.Fprintf(w, "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total%s %d\n", lbl, st.HitChars/4)
	fmt.Fprintf(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\"} 1\n", s.cfg.BlockChars/4, s.cfg.CacheBlocks)
	fmt.Fprintf(w, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.3f\n", float64(started.UnixNano())/1e9)
}

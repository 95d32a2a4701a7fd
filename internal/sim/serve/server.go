package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Config is one live replica: a deployment plus serving options. Its YAML
// form (the deployment's fields inline) is a fleet file's entry.
type Config struct {
	sim.Config `yaml:",inline"`
	// Addr is host:port to listen on; default 127.0.0.1:0.
	Addr string `yaml:"addr,omitempty"`
	// ServedModelName is the model id clients use (default: the catalog name).
	ServedModelName string `yaml:"served_model_name,omitempty"`
	// DefaultMaxTokens is the output length when a request sets no limit:
	// the reply's natural length, ended by EOS (finish_reason "stop").
	DefaultMaxTokens int         `yaml:"default_max_tokens,omitempty"`
	Faults           FaultConfig `yaml:"faults,omitempty"`
	// StartupDelay makes /health and every endpoint answer 503 for this long
	// after start, like a server still loading weights.
	StartupDelay time.Duration `yaml:"startup_delay,omitempty"`
	// SpinWindow is how long before a step's end the engine goroutine stops
	// sleeping and yields in a loop, because OS timers wake late by up to
	// milliseconds; 0 means 1 ms, negative disables spinning.
	SpinWindow time.Duration `yaml:"spin_window,omitempty"`
	// Count replicates this entry in a fleet file.
	Count int `yaml:"count,omitempty"`

	Catalog   *sim.Catalog       `yaml:"-"`
	Tokenizer workload.Tokenizer `yaml:"-"`
}

// DefaultConfig is a small, fast deployment: Llama-3.1-8B on one H100 SXM
// with vLLM's defaults and prefix caching, giving TTFTs of tens of
// milliseconds. It is the built-in target of "ttft bench".
func DefaultConfig() Config {
	return Config{
		Config: sim.Config{
			Model:               "llama-3.1-8b",
			GPU:                 "h100-sxm",
			TensorParallelSize:  1,
			EnablePrefixCaching: true,
			// MaxModelLen 0: the catalog's 131,072, as vLLM serves it
			// on one H100.
		},
		Addr:             "127.0.0.1:0",
		DefaultMaxTokens: 256,
	}
}

// Server is a live simulated replica speaking the OpenAI API.
type Server struct {
	cfg     Config
	d       *sim.Deployment
	name    string
	tok     workload.Tokenizer
	words   *sim.OutputTokens // tok's IDs of the output words
	ln      net.Listener
	srv     *http.Server
	url     string
	origin  time.Time
	in      chan *liveReq
	aborts  chan *sim.Seq
	metrics *serverMetrics
	ids     atomic.Uint64
	lag     lagHist
	// inflight counts generate requests being handled, for the API
	// server's contention delay (Deployment.APIDelay).
	inflight atomic.Int64

	faultMu  sync.Mutex
	faultRng *rand.Rand

	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

type liveReq struct {
	seq   *sim.Seq
	ready time.Duration
	st    *stream
}

// Start resolves cfg, listens on cfg.Addr and serves until Close or ctx
// ends.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	d, err := sim.Resolve(cfg.Catalog, cfg.Config)
	if err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 256
	}
	if cfg.SpinWindow == 0 {
		cfg.SpinWindow = time.Millisecond
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("simulator listening on %s: %w", cfg.Addr, err)
	}
	name := cfg.ServedModelName
	if name == "" {
		name = d.Model.Name
	}
	tok := cfg.Tokenizer
	if tok == nil {
		tok = workload.DefaultTokenizer()
	}
	words := sim.NewOutputTokens(cfg.Tokenizer) // nil: the default's, shared
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{
		cfg: cfg, d: d, name: name, tok: tok, words: words, ln: ln,
		url:      "http://" + ln.Addr().String(),
		origin:   time.Now(),
		in:       make(chan *liveReq, 4096),
		aborts:   make(chan *sim.Seq, 4096),
		metrics:  newServerMetrics(name, "0", d),
		faultRng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6661756c74)),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.handleGenerate(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.handleGenerate(w, r, false) })
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	go s.loop(ctx)
	go func() { _ = s.srv.Serve(writeStampListener{ln, s.origin}) }()
	go func() {
		<-ctx.Done()
		_ = s.srv.Close()
	}()
	return s, nil
}

// URL is the server's base URL, e.g. http://127.0.0.1:8000 (no /v1).
func (s *Server) URL() string { return s.url }

// Deployment is the resolved configuration being simulated.
func (s *Server) Deployment() *sim.Deployment { return s.d }

// ModelName is the id clients must send.
func (s *Server) ModelName() string { return s.name }

// Close stops the server and its engine.
func (s *Server) Close() error {
	var err error
	s.closed.Do(func() {
		s.cancel()
		err = s.srv.Close()
		<-s.done
	})
	return err
}

func (s *Server) since() time.Duration { return time.Since(s.origin) }

func (s *Server) ready() bool { return s.since() >= s.cfg.StartupDelay }

// ---- engine goroutine ----

// engineLoop is the engine goroutine's state: the engine, the requests
// handed over but not yet due (their API delay still running), and the
// step in progress.
type engineLoop struct {
	s     *Server
	ctx   context.Context
	eng   *sim.Engine
	q     []*liveReq // admission FIFO (ready times non-decreasing)
	timer *time.Timer
	// busy: a step is in progress, ending at stepEnd with emits.
	busy             bool
	stepEnd, lastEnd time.Duration
	emits            []sim.Emit // valid until the next step
}

// loop owns the engine. It runs the same Step as the offline runner; only
// the clock differs: it sleeps until each step's scheduled end, then hands
// the step's tokens to the streams with that scheduled time.
func (s *Server) loop(ctx context.Context) {
	defer close(s.done)
	l := &engineLoop{s: s, ctx: ctx, eng: sim.NewEngine(s.d), timer: time.NewTimer(time.Hour)}
	defer l.timer.Stop()
	for l.next() {
	}
}

// next does one turn of the loop: finish the step in progress, start the
// next due request's, or wait for work; false once the server stops.
func (l *engineLoop) next() bool {
	if l.ctx.Err() != nil {
		return false
	}
	l.drain()
	if l.busy {
		if !l.waitUntil(l.stepEnd) {
			return false
		}
		l.drain()
		l.s.deliver(l.emits, l.stepEnd)
		l.busy, l.lastEnd = false, l.stepEnd
		l.admit(l.lastEnd)
		l.s.metrics.update(l.eng)
		if l.eng.HasWork() {
			l.step(l.lastEnd)
		}
		return true
	}
	if len(l.q) > 0 {
		r := max(l.q[0].ready, l.lastEnd)
		if !l.waitUntil(r) {
			return false
		}
		l.drain()
		l.admit(r)
		l.step(r)
		return true
	}
	if l.eng.HasWork() { // only aborted leftovers
		l.step(max(l.s.since(), l.lastEnd))
		return true
	}
	select {
	case r := <-l.s.in:
		l.take(r)
	case a := <-l.s.aborts:
		l.eng.Abort(a)
	case <-l.ctx.Done():
		return false
	}
	return true
}

// take keeps q ordered by ready time: the API delay grows with the
// requests in flight, so a later arrival can be ready earlier.
func (l *engineLoop) take(r *liveReq) {
	i := len(l.q)
	for i > 0 && l.q[i-1].ready > r.ready {
		i--
	}
	l.q = slices.Insert(l.q, i, r)
}

// drain takes every arrival and abort already handed over.
func (l *engineLoop) drain() {
	for {
		select {
		case r := <-l.s.in:
			l.take(r)
		case a := <-l.s.aborts:
			l.eng.Abort(a)
		default:
			return
		}
	}
}

// waitUntil sleeps until engine time t, still accepting arrivals; false if
// the server stopped meanwhile.
func (l *engineLoop) waitUntil(t time.Duration) bool {
	spin := l.s.cfg.SpinWindow
	for {
		d := t - l.s.since()
		if d <= 0 {
			return true
		}
		if d > spin || spin < 0 {
			sleep := d
			if spin > 0 {
				sleep = d - spin
			}
			l.timer.Reset(sleep)
			select {
			case <-l.timer.C:
			case r := <-l.s.in:
				if !l.timer.Stop() {
					<-l.timer.C
				}
				l.take(r)
			case a := <-l.s.aborts:
				if !l.timer.Stop() {
					<-l.timer.C
				}
				l.eng.Abort(a)
			case <-l.ctx.Done():
				return false
			}
			continue
		}
		l.drain()
		runtime.Gosched()
	}
}

// admit hands the engine every queued request ready by upTo.
func (l *engineLoop) admit(upTo time.Duration) {
	i := 0
	for ; i < len(l.q) && l.q[i].ready <= upTo; i++ {
		l.eng.Add(l.q[i].seq, l.q[i].ready)
	}
	if i > 0 {
		n := copy(l.q, l.q[i:])
		clear(l.q[n:])
		l.q = l.q[:n]
	}
}

// step starts an engine step at engine time at.
func (l *engineLoop) step(at time.Duration) {
	res := l.eng.Step(at)
	l.busy, l.stepEnd, l.emits = true, res.End, res.Emits
}

// deliver hands a finished step's tokens to their streams and records
// vLLM's per-request histograms on the engine's schedule.
func (s *Server) deliver(emits []sim.Emit, end time.Duration) {
	at := s.origin.Add(end)
	m := s.metrics
	for _, em := range emits {
		st := em.Seq.Tag.(*stream)
		sq := em.Seq
		if em.First {
			m.ttft.Observe((end - st.received).Seconds())
		} else {
			m.itl.Observe((end - st.lastEmit).Seconds())
		}
		st.lastEmit = end
		ev := tokenEv{n: em.Tokens, out: sq.Output, at: at, first: em.First, finished: em.Finished, reason: sq.FinishReason, cached: sq.CachedTokens}
		if em.Finished {
			m.e2e.Observe((end - st.received).Seconds())
			m.queue.Observe((sq.FirstScheduled - sq.Arrival).Seconds())
			m.prefill.Observe((sq.FirstTokenAt - sq.FirstScheduled).Seconds())
			m.dec.Observe((end - sq.FirstTokenAt).Seconds())
			m.inference.Observe((end - sq.FirstScheduled).Seconds())
			if sq.Output > 1 {
				m.tpot.Observe((end - sq.FirstTokenAt).Seconds() / float64(sq.Output-1))
			}
			m.success.WithLabelValues(sq.FinishReason).Inc()
			m.observeFinished(sq, st.params)
		}
		st.push(ev)
	}
	m.observeStep(emits)
}

// ---- streams ----

type tokenEv struct {
	n, out   int // new tokens, cumulative output
	at       time.Time
	first    bool
	finished bool
	reason   string
	cached   int
}

// stream is the hand-off between the engine goroutine and one request's
// writer: the engine never blocks on a slow client.
type stream struct {
	mu       sync.Mutex
	evs      []tokenEv
	notify   chan struct{}
	received time.Duration // engine time the request arrived
	lastEmit time.Duration // engine goroutine only
	params   requestParams // for the finished-request metrics
}

func (st *stream) push(ev tokenEv) {
	st.mu.Lock()
	st.evs = append(st.evs, ev)
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

func (st *stream) take(buf []tokenEv) []tokenEv {
	st.mu.Lock()
	buf = append(buf[:0], st.evs...)
	st.evs = st.evs[:0]
	st.mu.Unlock()
	return buf
}

// ---- HTTP ----

// chatBase is the prompt's tokens as a next turn carries them, followed by
// the "\n" that joins the messages: the newline can merge with the prompt's
// last piece ("?\n" is one cl100k token), so only a short tail is
// re-tokenised, with the whole text as the fallback when the tail does not
// round-trip on its own.
func (s *Server) chatBase(text string, ids []int) []int {
	m := min(len(ids), 16)
	tail := ids[len(ids)-m:]
	if suffix := s.tok.Decode(tail); strings.HasSuffix(text, suffix) && slices.Equal(s.tok.Encode(suffix), tail) {
		out := make([]int, 0, len(ids)+2)
		out = append(out, ids[:len(ids)-m]...)
		return append(out, s.tok.Encode(suffix+"\n")...)
	}
	return s.tok.Encode(text + "\n")
}

// messageText extracts a message's text (wire.ContentText).
func messageText(m wire.ChatMessage) (string, error) {
	t, ok := wire.ContentText(m.Content)
	if !ok {
		return "", fmt.Errorf("content must be a string or an array of parts")
	}
	return t, nil
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status})
	_, _ = w.Write(b)
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the simulated engine is still starting")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.name, "object": "model", "created": s.origin.Unix(), "owned_by": "ttft-sim",
		"root": s.name, "parent": nil, "max_model_len": s.d.MaxModelLen,
	}}})
	_, _ = w.Write(b)
}

func (s *Server) modelMatches(name string) bool {
	if name == "" || strings.EqualFold(name, s.name) {
		return true
	}
	return sim.SameModelName(name, s.d.Model.Name)
}

// pickFault decides whether this request fails outright.
func (s *Server) pickFault(f FaultConfig) bool {
	if f.ErrorRate <= 0 {
		return false
	}
	if f.ErrorRate >= 1 {
		return true
	}
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faultRng.Float64() < f.ErrorRate
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
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

// handleGenerate serves /v1/chat/completions (chat) and /v1/completions.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	received := s.since()
	others := int(s.inflight.Add(1) - 1)
	defer s.inflight.Add(-1)
	ctx := r.Context()
	if !s.ready() {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the simulated engine is still starting")
		return
	}
	faults, err := ParseFaults(s.cfg.Faults, r.Header.Get(FaultHeader))
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	req, seq, cont, refused := s.readRequest(r, chat)
	if refused != nil {
		writeError(w, refused.status, refused.typ, refused.msg)
		return
	}
	if s.pickFault(faults) {
		status := faults.ErrorStatus
		if status == 0 {
			status = http.StatusInternalServerError
		}
		writeError(w, status, "InjectedFault", fmt.Sprintf("injected fault: HTTP %d", status))
		return
	}
	if !sleepCtx(ctx, faults.SlowStart) {
		return
	}
	if faults.SlowStart > 0 {
		received = s.since()
	}
	st := &stream{notify: make(chan struct{}, 1), received: received,
		params: newRequestParams(s.d, req.MaxCompletionTokens, req.MaxTokens, req.N, seq.PromptLen)}
	seq.Tag = st
	select {
	case s.in <- &liveReq{seq: seq, ready: received + s.d.APIDelay(others), st: st}:
	case <-ctx.Done():
		return
	}
	// Not seq.ID: that is the reply's text key, the same for the same
	// prompt (continue.go).
	id := fmt.Sprintf("%s-%d", map[bool]string{true: "chatcmpl", false: "cmpl"}[chat], s.ids.Add(1))
	w.Header().Set("X-Request-Id", id)
	out := &responder{s: s, w: w, chat: chat, id: id, created: time.Now().Unix(), seq: seq, faults: faults, cont: cont}
	out.conn, _ = r.Context().Value(connKey{}).(*writeStampConn)
	if req.Stream {
		out.usage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		out.stream(ctx, st)
	} else {
		out.whole(ctx, st)
	}
}

// apiError is a request refused before it reaches the engine, answered
// with an OpenAI-style error body.
type apiError struct {
	status   int
	typ, msg string
}

func badRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: msg}
}

// generateRequest is a generate request's body: the fields the wire
// shapes read, and vLLM's chat-template flags for continuing a final
// assistant message.
type generateRequest struct {
	wire.ChatCompletionRequest
	ContinueFinalMessage bool  `json:"continue_final_message"`
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
}

// readRequest reads and checks a generate request's body and makes its
// engine sequence, refusing what vLLM refuses. The sequence's ID is the
// key of its reply's words (continue.go), and cont where this reply
// starts within them.
func (s *Server) readRequest(r *http.Request, chat bool) (*generateRequest, *sim.Seq, continuation, *apiError) {
	var cont continuation
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return nil, nil, cont, badRequest("reading the request body: " + err.Error())
	}
	req := new(generateRequest)
	if err := json.Unmarshal(body, req); err != nil {
		return nil, nil, cont, badRequest("invalid JSON body: " + err.Error())
	}
	if !s.modelMatches(req.Model) {
		return nil, nil, cont, &apiError{status: http.StatusNotFound, typ: "NotFoundError", msg: fmt.Sprintf("The model `%s` does not exist.", req.Model)}
	}
	if req.N > 1 {
		return nil, nil, cont, badRequest("the simulator serves n=1 only")
	}
	text, ids, refused := s.prompt(&req.ChatCompletionRequest, chat)
	if refused != nil {
		return nil, nil, cont, refused
	}
	key, cont, ids, refused := s.replyKey(req, chat, text, ids)
	if refused != nil {
		return nil, nil, cont, refused
	}
	maxTok, refused := s.outputLimit(&req.ChatCompletionRequest, len(ids))
	if refused != nil {
		return nil, nil, cont, refused
	}
	natural := req.MaxCompletionTokens == nil && req.MaxTokens == nil
	if natural && cont.skip > 0 {
		// A continued answer has the rest of its natural length.
		maxTok = max(1, maxTok-cont.skip)
	}
	seq, err := sim.NewSeq(s.d, key, len(ids), maxTok, ids)
	if err != nil {
		return nil, nil, cont, badRequest(err.Error())
	}
	// Without a limit the reply has its natural length, the server's
	// default, and ends at EOS (finish_reason "stop") unless EOS is ignored.
	seq.EOS = natural && !req.IgnoreEOS
	if cont != (continuation{}) {
		// The output chain hashes words from the reply's start (key, 0..);
		// a continuation's are from its middle, so its output stays
		// uncached rather than cached under the wrong tokens.
		seq.ChainOutput(s.d, ids, nil)
	} else if s.d.Config.EnablePrefixCaching && (chat || s.cfg.Tokenizer != nil) {
		// The reply's blocks are hashed as the next turn's prompt will
		// carry them: a chat prompt joins messages with "\n", so the reply
		// follows this prompt and a newline; a completion's continues it.
		base := ids
		if chat {
			base = s.chatBase(text, ids)
		}
		seq.ChainOutput(s.d, base, s.words)
	}
	return req, seq, cont, nil
}

// prompt is a request's prompt text (a chat's message contents joined by
// "\n") and its token IDs (a completion may send the IDs themselves).
func (s *Server) prompt(req *wire.ChatCompletionRequest, chat bool) (text string, ids []int, refused *apiError) {
	if chat {
		if len(req.Messages) == 0 {
			return "", nil, badRequest("messages must not be empty")
		}
		parts := make([]string, len(req.Messages))
		for i, m := range req.Messages {
			var err error
			if parts[i], err = messageText(m); err != nil {
				return "", nil, badRequest(fmt.Sprintf("messages[%d]: %v", i, err))
			}
		}
		text = strings.Join(parts, "\n")
	} else if err := json.Unmarshal(req.Prompt, &text); err != nil {
		var list []string
		if err2 := json.Unmarshal(req.Prompt, &list); err2 == nil && len(list) == 1 {
			text = list[0]
		} else if err3 := json.Unmarshal(req.Prompt, &ids); err3 != nil || len(ids) == 0 {
			return "", nil, badRequest("prompt must be a string, a one-element list of strings, or a list of token ids")
		}
	}
	if ids == nil {
		ids = s.tok.Encode(text)
	}
	if len(ids) == 0 {
		ids = []int{0} // an empty prompt still costs the BOS token
	}
	return text, ids, nil
}

// outputLimit is a request's output length (max_completion_tokens, else
// max_tokens, else the server's default), checked against min_tokens and,
// when the client set it, against the context left after promptLen tokens.
func (s *Server) outputLimit(req *wire.ChatCompletionRequest, promptLen int) (int, *apiError) {
	maxTok := s.cfg.DefaultMaxTokens
	explicit := false
	for _, p := range []*int{req.MaxCompletionTokens, req.MaxTokens} {
		if p != nil {
			if *p < 1 {
				return 0, badRequest("max_tokens must be at least 1")
			}
			maxTok, explicit = *p, true
			break
		}
	}
	if req.MinTokens > maxTok {
		return 0, badRequest(fmt.Sprintf("min_tokens (%d) must be less than or equal to max_tokens (%d)", req.MinTokens, maxTok))
	}
	if explicit && promptLen+maxTok > s.d.MaxModelLen && promptLen < s.d.MaxModelLen {
		return 0, badRequest(fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", s.d.MaxModelLen, promptLen+maxTok, promptLen, maxTok))
	}
	return maxTok, nil
}

// responder writes one request's answer.
type responder struct {
	s       *Server
	w       http.ResponseWriter
	chat    bool
	usage   bool
	id      string
	created int64
	seq     *sim.Seq
	faults  FaultConfig
	cont    continuation // where the reply starts within its prompt's (continue.go)
	prefix  []byte       // chunk JSON up to the text
	buf     []byte
	conn    *writeStampConn // nil if the listener did not wrap it
}

func (o *responder) abort() {
	select {
	case o.s.aborts <- o.seq:
	default:
		go func() {
			select {
			case o.s.aborts <- o.seq:
			case <-o.s.done: // engine stopped: nothing to abort
			}
		}()
	}
}

// wait blocks until the stream has events; false if the client left.
func (o *responder) wait(ctx context.Context, st *stream) bool {
	select {
	case <-st.notify:
		return true
	case <-ctx.Done():
		o.abort()
		return false
	}
}

func (o *responder) chunkPrefix() []byte {
	if o.prefix != nil {
		return o.prefix
	}
	model, _ := json.Marshal(o.s.name)
	obj := "text_completion"
	if o.chat {
		obj = "chat.completion.chunk"
	}
	o.prefix = fmt.Appendf(nil, `data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":0,`, o.id, obj, o.created, model)
	return o.prefix
}

// appendChunk writes one SSE event carrying text; reason is "" until the
// last one.
func (o *responder) appendChunk(b []byte, text string, role bool, reason string) []byte {
	b = append(b, o.chunkPrefix()...)
	if o.chat {
		if role {
			b = append(b, `"delta":{"role":"assistant","content":""}`...)
		} else {
			b = append(b, `"delta":{"content":"`...)
			b = append(b, text...) // output words need no JSON escaping
			b = append(b, `"}`...)
		}
	} else {
		b = append(b, `"text":"`...)
		b = append(b, text...)
		b = append(b, '"')
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if reason == "" {
		b = append(b, `null`...)
	} else {
		b = strconv.AppendQuote(b, reason)
	}
	if reason != "" || !role {
		b = append(b, `,"stop_reason":null`...)
	}
	return append(b, "}]}\n\n"...)
}

func (o *responder) usageJSON(out, cached int) string {
	p := o.seq.PromptLen
	return fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, p, p+out, out, cached)
}

func (o *responder) stream(ctx context.Context, st *stream) {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	o.w.WriteHeader(http.StatusOK)
	fl, _ := o.w.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	rc := http.NewResponseController(o.w)
	var evs []tokenEv
	sent := 0
	stallMidAt := o.faults.StallMidAfter
	if stallMidAt == 0 {
		stallMidAt = max(1, o.seq.MaxTokens/2)
	}
	if r := o.faults.MidRate; r > 0 && r < 1 && !o.s.pickFault(FaultConfig{ErrorRate: r}) {
		o.faults.StallMid, o.faults.CutAfter = 0, 0 // this request is spared
	}
	for {
		if !o.wait(ctx, st) {
			return
		}
		evs = st.take(evs)
		// Everything pending goes out in one write: when a writer falls
		// behind, it catches up with one syscall instead of one per token.
		b := o.buf[:0]
		finished := false
		for _, ev := range evs {
			if ev.first {
				if !sleepCtx(ctx, o.faults.StallFirst) {
					o.abort()
					return
				}
				if o.chat {
					b = o.appendChunk(b, "", true, "")
				}
			}
			if ev.n > 1 {
				// Speculative decoding: the step's tokens share one chunk.
				var sb strings.Builder
				for j := ev.out - ev.n; j < ev.out; j++ {
					sb.WriteString(o.word(j))
				}
				reason := ""
				if ev.finished {
					reason = ev.reason
				}
				b = o.appendChunk(b, sb.String(), false, reason)
			} else {
				for i := sent; i < ev.out; i++ {
					reason := ""
					if ev.finished && i == ev.out-1 {
						reason = ev.reason
					}
					b = o.appendChunk(b, o.word(i), false, reason)
				}
			}
			prev := sent
			sent = ev.out
			if ev.finished {
				finished = true
				if o.usage {
					b = fmt.Appendf(b, `data: {"id":"%s","object":"%s","created":%d,"model":%q,"choices":[],"usage":%s}`+"\n\n", o.id, map[bool]string{true: "chat.completion.chunk", false: "text_completion"}[o.chat], o.created, o.s.name, o.usageJSON(ev.out, ev.cached))
				}
				b = append(b, "data: [DONE]\n\n"...)
			}
			cut := o.faults.CutAfter > 0 && sent >= o.faults.CutAfter && !ev.finished
			stall := o.faults.StallMid > 0 && prev < stallMidAt && sent >= stallMidAt && !ev.finished
			if cut || stall || ev.first && o.faults.StallFirst > 0 {
				// Faults act at this token: flush what precedes it first.
				if !o.flush(rc, b, evs[:1]) {
					return
				}
				b = b[:0]
				if cut {
					o.abort()
					panic(http.ErrAbortHandler) // closes the connection mid-stream
				}
				if stall && !sleepCtx(ctx, o.faults.StallMid) {
					o.abort()
					return
				}
			}
		}
		if len(b) > 0 && !o.flush(rc, b, evs) {
			return
		}
		o.buf = b
		if finished {
			return
		}
	}
}

// flush writes b and records each event's emission lag.
func (o *responder) flush(rc *http.ResponseController, b []byte, evs []tokenEv) bool {
	if _, err := o.w.Write(b); err != nil {
		o.abort()
		return false
	}
	_ = rc.Flush()
	left := o.leftAt()
	for _, ev := range evs {
		o.s.lag.observe(left.Sub(ev.at))
	}
	return true
}

// leftAt is when the bytes just flushed left: when their write(2) began
// (the kernel has them from then on; on loopback the reader's socket
// too). Time spent after the call, waiting for the Go scheduler to give
// this goroutine a processor back, is not the token's.
func (o *responder) leftAt() time.Time {
	if o.conn != nil {
		if v := o.conn.lastWrite.Load(); v != 0 {
			return o.s.origin.Add(time.Duration(v))
		}
	}
	return time.Now()
}

type connKey struct{}

// writeStampListener wraps accepted connections in writeStampConn.
type writeStampListener struct {
	net.Listener
	origin time.Time
}

func (l writeStampListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeStampConn{Conn: c, origin: l.origin}, nil
}

// writeStampConn remembers when its latest write(2) began, on the
// engine's clock.
type writeStampConn struct {
	net.Conn
	origin    time.Time
	lastWrite atomic.Int64 // ns since origin
}

func (c *writeStampConn) Write(p []byte) (int, error) {
	c.lastWrite.Store(int64(time.Since(c.origin)))
	return c.Conn.Write(p)
}

// CloseWrite keeps net/http's graceful close of TCP connections.
func (c *writeStampConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (o *responder) whole(ctx context.Context, st *stream) {
	var evs []tokenEv
	for {
		if !o.wait(ctx, st) {
			return
		}
		evs = st.take(evs)
		if len(evs) == 0 || !evs[len(evs)-1].finished {
			continue
		}
		ev := evs[len(evs)-1]
		if !sleepCtx(ctx, o.faults.StallFirst+o.faults.StallMid) {
			return
		}
		if c := o.faults.CutAfter; c > 0 {
			panic(http.ErrAbortHandler)
		}
		text := o.text(ev.out)
		// vLLM's answer, from maps (keys in sorted order): not a wire type.
		var choice map[string]any
		obj := "text_completion"
		if o.chat {
			obj = "chat.completion"
			choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "logprobs": nil, "finish_reason": ev.reason, "stop_reason": nil}
		} else {
			choice = map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": ev.reason, "stop_reason": nil}
		}
		resp := map[string]any{"id": o.id, "object": obj, "created": o.created, "model": o.s.name, "choices": []any{choice}, "usage": json.RawMessage(o.usageJSON(ev.out, ev.cached))}
		b, _ := json.Marshal(resp)
		o.w.Header().Set("Content-Type", "application/json")
		o.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = o.w.Write(b)
		if fl, ok := o.w.(http.Flusher); ok {
			fl.Flush()
		}
		o.s.lag.observe(o.leftAt().Sub(ev.at))
		return
	}
}

// ---- emission lag ----

// lagHist counts how late tokens were written versus their scheduled time:
// 10 µs buckets up to 20 ms, then 1 ms buckets up to 1 s.
type lagHist struct {
	fine   [2000]atomic.Int64
	coarse [1001]atomic.Int64
	n      atomic.Int64
	maxv   atomic.Int64
}

func (h *lagHist) observe(d time.Duration) {
	us := max(0, d.Microseconds())
	if us < 20000 {
		h.fine[us/10].Add(1)
	} else {
		h.coarse[min(1000, us/1000)].Add(1)
	}
	h.n.Add(1)
	for {
		m := h.maxv.Load()
		if us <= m || h.maxv.CompareAndSwap(m, us) {
			break
		}
	}
}

// LagStats describes emission error: write time minus scheduled time.
type LagStats struct {
	Count         int64
	P50, P99, Max time.Duration
}

// EmissionLag reports how far token writes trailed the engine's schedule.
func (s *Server) EmissionLag() LagStats {
	h := &s.lag
	n := h.n.Load()
	st := LagStats{Count: n, Max: time.Duration(h.maxv.Load()) * time.Microsecond}
	if n == 0 {
		return st
	}
	q := func(p float64) time.Duration {
		want := int64(p * float64(n))
		var c int64
		for i := range h.fine {
			if c += h.fine[i].Load(); c > want {
				return time.Duration(i*10+10) * time.Microsecond
			}
		}
		for i := range h.coarse {
			if c += h.coarse[i].Load(); c > want {
				return time.Duration(i+1) * time.Millisecond
			}
		}
		return st.Max
	}
	st.P50, st.P99 = q(0.5), q(0.99)
	return st
}

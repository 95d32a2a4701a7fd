package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/sharedstate"
	"github.com/ttft-dev/ttft/internal/httpx"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/wire"
)

// Options are the gateway's process-level dependencies.
type Options struct {
	// Logger receives the JSON access log and operational messages (nil:
	// discarded). Prompt bodies and keys are never logged.
	Logger *slog.Logger
	// AccessLog, if set, receives the access log instead of Logger: one
	// JSON line per request with the fields Logger would get, formatted
	// without log/slog's per-field cost. Give it a LogBuffer so that lines
	// are written in batches rather than one system call per request.
	AccessLog io.Writer
	// Registerer and Gatherer hold the metrics served on /metrics (nil: a
	// private registry).
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// TracerProvider creates the gateway's spans (nil: no tracing). The W3C
	// trace context of each span is propagated to the backend.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the GenAI server metrics (gen_ai.server.*)
	// for OTLP export (nil: none; the Prometheus metrics are unaffected).
	MeterProvider metric.MeterProvider
	// Getenv resolves api_key_env on reloads (nil: os.Getenv).
	Getenv func(string) string
	// Transport talks to backends (nil: a tuned http.Transport).
	Transport http.RoundTripper
	// Seed makes the scheduler's random choices reproducible (0: clock).
	Seed uint64
	// HTTPServer chooses the server behind Serve: "" or "ttft" for the
	// gateway's own HTTP/1.1 server (httpx.Server), "net/http" for the
	// standard library's (httpx.ServeStd).
	HTTPServer string
	// OnRecord, if set, gets every finished request as a record.Record
	// (source "gateway"), after its response is complete: e.g. appended to
	// a run directory's requests.jsonl for ttft report and compare.
	OnRecord func(*record.Record)
	// OnFinish, if set, hears every request's TTFT (0 when none) and
	// whether it failed, e.g. to feed a dynamic trace sampler.
	OnFinish func(ttft time.Duration, failed bool)
}

// Gateway is the routing reverse proxy. It implements http.Handler.
type Gateway struct {
	opts    Options
	st      atomic.Pointer[state]
	m       *metrics
	gather  prometheus.Gatherer
	tracer  trace.Tracer
	tracing bool // false for a no-op provider: spans are not even built
	client  *http.Client
	h1      *httpx.Client // nil when Options.Transport is set
	log     *slog.Logger
	budget  retryBudget
	// recIndex numbers the records given to OnRecord.
	recIndex atomic.Int64
	limits   limiters
	hashers  sync.Pool
	bufs     sync.Pool // 32 KiB stream buffers
	lines    sync.Pool // access-log line buffers
	reload   sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// checked is closed when the first round of health checks and
	// engine-metric scrapes has ended (at once when checks are off):
	// Serve waits for it (firstCheckWait).
	checked chan struct{}

	// otm: the gen_ai.server.* metrics (otelmetrics.go).
	otm *telemetry.GenAIServerMetrics
	// shared shares state with other replicas (shared.go; nil when off).
	shared *sharedstate.Client
}

// state is one configuration's immutable routing tables; a reload swaps it.
type state struct {
	cfg        *Config
	sched      *sched.Scheduler
	ups        map[string]*upstream
	routes     map[string]*Route
	modelClass map[string]string
	keys       map[string]*ClientKey
	models     []string
}

// upstream is one backend as the proxy needs it.
type upstream struct {
	cfg BackendConfig
	sb  *sched.Backend
	// models are those the backend lists on /v1/models, learnt by the
	// health checks when cfg.Models is empty (nil until then).
	models atomic.Pointer[[]string]
}

// New builds a gateway and starts its health checks; Close stops them.
func New(cfg Config, opts Options) (*Gateway, error) {
	switch opts.HTTPServer {
	case "", "ttft", "net/http":
	default:
		return nil, fmt.Errorf("unknown HTTP server %q (want ttft or net/http)", opts.HTTPServer)
	}
	c := cfg
	if err := c.validate(nil, opts.Getenv); err != nil {
		return nil, err
	}
	g := &Gateway{opts: opts, log: opts.Logger, limits: limiters{keys: map[string]*keyLimits{}}}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	reg := opts.Registerer
	g.gather = opts.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, g.gather = r, r
	}
	if g.gather == nil {
		if gg, ok := reg.(prometheus.Gatherer); ok {
			g.gather = gg
		} else {
			g.gather = prometheus.DefaultGatherer
		}
	}
	m, err := newMetrics(reg, g)
	if err != nil {
		return nil, fmt.Errorf("registering gateway metrics: %w", err)
	}
	g.m = m
	tp := opts.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	_, off := tp.(noop.TracerProvider)
	g.tracing = !off
	g.tracer = tp.Tracer("github.com/ttft-dev/ttft/internal/gateway")
	if g.otm, err = telemetry.NewGenAIServerMetrics(opts.MeterProvider); err != nil {
		return nil, fmt.Errorf("creating the GenAI metrics: %w", err)
	}
	tr := opts.Transport
	if tr == nil {
		dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		// Plain-http backends go through the gateway's own HTTP/1.1
		// client (httpx.Client); the Transport serves https backends and
		// health checks.
		g.h1 = httpx.NewClient(httpx.ClientOptions{Dial: dialer.DialContext, MaxIdlePerHost: 1024, IdleTimeout: 90 * time.Second})
		tr = &http.Transport{
			Proxy:               nil, // never send backend traffic through an environment proxy
			DialContext:         dialer.DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // streams pass through byte for byte
			ForceAttemptHTTP2:   false,
			WriteBufferSize:     16 << 10,
			ReadBufferSize:      16 << 10,
		}
	}
	g.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	g.hashers.New = func() any { return sched.NewBlockHasher(sched.DefaultBlockBytes) }
	g.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	g.lines.New = func() any { b := make([]byte, 0, 512); return &b }
	if err := g.newShared(&c, reg); err != nil {
		return nil, err
	}
	if err := g.apply(&c); err != nil {
		return nil, err
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.checked = make(chan struct{})
	g.wg.Add(1)
	go g.healthLoop()
	if g.shared != nil {
		g.shared.Start(g.ctx)
	}
	return g, nil
}

// Close stops background work. In-flight requests are not interrupted.
func (g *Gateway) Close() error {
	g.cancel()
	g.wg.Wait()
	if g.shared != nil {
		g.shared.Close()
	}
	if g.h1 != nil {
		g.h1.Close()
	}
	return nil
}

// Config returns the configuration in force.
func (g *Gateway) Config() Config { return *g.st.Load().cfg }

// Scheduler exposes the current scheduler (read-only use: evaluation, tests).
func (g *Gateway) Scheduler() *sched.Scheduler { return g.st.Load().sched }

// Reload validates cfg and swaps it in. Streams in flight continue on the
// backends they started on; a backend whose definition did not change keeps
// its learned state (predictors, prefix index, breaker).
func (g *Gateway) Reload(cfg Config) error {
	c := cfg
	if err := c.validate(nil, g.opts.Getenv); err != nil {
		return err
	}
	return g.apply(&c)
}

func (g *Gateway) apply(c *Config) error {
	g.reload.Lock()
	defer g.reload.Unlock()
	old := g.st.Load()
	st := &state{cfg: c, ups: map[string]*upstream{}, routes: map[string]*Route{}, modelClass: map[string]string{}, keys: map[string]*ClientKey{}}
	var sbs []*sched.Backend
	models := map[string]bool{}
	for _, bc := range c.Backends {
		spec := sched.BackendSpec{
			Name: bc.Name, Models: slices.Clone(bc.Models), Weight: bc.Weight,
			MaxConcurrency: bc.MaxConcurrency, PrefixBlocks: bc.PrefixBlocks, Predictor: c.Predictor,
		}
		switch bc.API {
		case "both":
			spec.APIs = []string{"openai", "anthropic"}
		default:
			spec.APIs = []string{bc.API}
		}
		if spec.Weight == 0 {
			spec.Weight = 1
		}
		var sb *sched.Backend
		if old != nil {
			if ou := old.ups[bc.Name]; ou != nil && ou.cfg.URL == bc.URL && reflect.DeepEqual(ou.sb.Spec, normSpec(spec)) {
				sb = ou.sb
			}
		}
		if sb == nil {
			sb = sched.NewBackend(spec)
		}
		nu := &upstream{cfg: bc, sb: sb}
		if old != nil {
			if ou := old.ups[bc.Name]; ou != nil && ou.cfg.URL == bc.URL {
				nu.models.Store(ou.models.Load())
			}
		}
		st.ups[bc.Name] = nu
		sbs = append(sbs, sb)
		for _, m := range bc.Models {
			models[m] = true
			if bc.SLOClass != "" && st.modelClass[m] == "" {
				st.modelClass[m] = bc.SLOClass
			}
		}
	}
	for m := range models {
		st.models = append(st.models, m)
	}
	sort.Strings(st.models)
	for i := range c.Routes {
		st.routes[c.Routes[i].Model] = &c.Routes[i]
	}
	for i := range c.Keys {
		st.keys[c.Keys[i].SHA256] = &c.Keys[i]
	}
	if old != nil && old.cfg.Policy == c.Policy && old.cfg.Explore == c.Explore && old.cfg.PanicThreshold == c.PanicThreshold {
		st.sched = old.sched
		st.sched.SetBackends(sbs)
	} else {
		s, err := sched.New(sched.Options{Policy: c.Policy, Seed: g.opts.Seed, Explore: c.Explore, PanicThreshold: c.PanicThreshold, PluginLatency: g.m.pluginLatency, Shared: g.sharedObserver()}, sbs)
		if err != nil {
			return err
		}
		st.sched = s
	}
	// Counters start at zero for every backend, so that rates (spend per
	// hour, tokens per second) exist before the first request.
	for name := range st.ups {
		g.m.cost.WithLabelValues(name)
		g.m.tokens.WithLabelValues(name, "input")
		g.m.tokens.WithLabelValues(name, "output")
	}
	g.st.Store(st)
	return nil
}

// normSpec applies NewBackend's defaults so specs compare equal.
func normSpec(s sched.BackendSpec) sched.BackendSpec {
	return sched.NewBackend(s).Spec
}

// ServeHTTP routes the gateway's endpoints.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions":
		g.inference(w, r, wire.OpenAIChat)
	case "/v1/completions":
		g.inference(w, r, wire.OpenAICompletions)
	case "/v1/messages":
		g.inference(w, r, wire.Anthropic)
	case "/v1/models":
		g.listModels(w, r)
	case "/metrics":
		if st := g.st.Load(); st.cfg.MetricsRequireKey {
			if _, status, msg := g.authenticate(st, r); status != 0 {
				writeError(w, wire.OpenAIChat, status, "authentication_error", msg)
				return
			}
		}
		promhttp.HandlerFor(g.gather, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	default:
		writeError(w, wire.OpenAIChat, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
	}
}

func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request) {
	st := g.st.Load()
	if _, status, msg := g.authenticate(st, r); status != 0 {
		writeError(w, wire.OpenAIChat, status, "authentication_error", msg)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	ids := slices.Clone(st.models)
	for _, u := range st.ups {
		if ms := u.models.Load(); ms != nil {
			ids = append(ids, *ms...)
		}
	}
	slices.Sort(ids)
	for _, m := range slices.Compact(ids) {
		out.Data = append(out.Data, model{ID: m, Object: "model", OwnedBy: "ttft-gateway"})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// authenticate checks the client key when keys are configured. It returns
// the key (nil when keys are off), or an HTTP status and message.
func (g *Gateway) authenticate(st *state, r *http.Request) (*ClientKey, int, string) {
	if len(st.keys) == 0 {
		return nil, 0, ""
	}
	k := clientKeyFrom(r.Header)
	if k == "" {
		return nil, http.StatusUnauthorized, "missing API key (Authorization: Bearer or x-api-key)"
	}
	ck := st.keys[HashKey(k)]
	if ck == nil {
		return nil, http.StatusUnauthorized, "invalid API key"
	}
	return ck, 0, ""
}

// firstCheckWait waits until the first round of health checks has ended,
// ctx ends, or the health timeout (plus a second's slack) has passed,
// whichever is first: a check that hangs past its timeout does not keep
// the gateway from serving.
func (g *Gateway) firstCheckWait(ctx context.Context) {
	t := time.NewTimer(g.st.Load().cfg.Health.Timeout.Std() + time.Second)
	defer t.Stop()
	select {
	case <-g.checked:
	case <-ctx.Done():
	case <-g.ctx.Done():
	case <-t.C:
	}
}

// ListenAndServe serves the gateway on addr until ctx ends, then shuts down
// gracefully (in-flight streams get up to 30 s to finish).
func (g *Gateway) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return g.Serve(ctx, ln)
}

// Serve is ListenAndServe on an existing listener: the gateway's own
// HTTP/1.1 server (httpx.Server) or, with Options.HTTPServer "net/http",
// Go's (httpx.ServeStd), with limits.header_timeout and (for writes to
// clients) limits.idle_stream_timeout as they are when it starts.
//
// It takes the first connection once the first round of health checks
// has ended (at most the health timeout after New, firstCheckWait), so
// that the first requests see what that round learnt: the models of a
// backend configured without a list (an OpenAI client lists them before
// anything else), and the KV capacity and queue each engine publishes on
// its metrics, by which the scheduler places new prompt groups (sched,
// tiedBetter). Connections made meanwhile wait in the listener's backlog.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	g.firstCheckWait(ctx)
	lim := g.st.Load().cfg.Limits
	o := httpx.ServerOptions{
		HeaderTimeout:  lim.HeaderTimeout.Std(),
		WriteTimeout:   lim.IdleStreamTimeout.Std(),
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ShutdownGrace:  30 * time.Second,
		Logger:         g.log,
	}
	if g.opts.HTTPServer != "net/http" {
		return httpx.NewServer(g, o).Serve(ctx, ln)
	}
	return httpx.ServeStd(ctx, ln, g, o)
}

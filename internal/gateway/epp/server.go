package epp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// Protocol names (Endpoint Picker protocol v1.0.0), the defaults of
// Options.
const (
	DestinationKey        = "x-gateway-destination-endpoint"
	DestinationNamespace  = "envoy.lb"
	SubsetKey             = "x-gateway-destination-endpoint-subset"
	SubsetNamespace       = "envoy.lb.subset_hint"
	ServedKey             = "x-gateway-destination-endpoint-served"
	LivenessService       = "liveness"
	ReadinessService      = "readiness"
	ExtProcService        = "envoy.service.ext_proc.v3.ExternalProcessor"
	DefaultMetricsPath    = "/metrics"
	DefaultHealthPath     = "/health"
	DefaultScrapeInterval = 100 * time.Millisecond
)

// Options configure a Server.
type Options struct {
	// Policy is the scheduler's policy (default slo-predictive); Seed
	// makes its random choices reproducible.
	Policy string
	Seed   uint64
	// DefaultClass is the SLO class of requests that name none.
	DefaultClass string
	// Fallbacks is how many endpoints to list after the chosen one (the
	// protocol's comma-separated list, tried in order by a data plane that
	// retries). 0 sends the chosen endpoint alone, which is what an Envoy
	// ORIGINAL_DST cluster reading the header can use.
	Fallbacks int
	// SheddableClasses are the SLO classes whose requests are refused with
	// 429 rather than queued when every eligible endpoint is saturated or
	// none is predicted to meet their SLO (the reference picker sheds
	// requests of negative priority the same way).
	SheddableClasses []string
	// Saturation thresholds, the reference picker's defaults: an endpoint
	// with QueueThreshold requests waiting (default 5) or its KV cache
	// KVThreshold full (default 0.8) is saturated.
	QueueThreshold float64
	KVThreshold    float64
	// MetricsPath is the endpoints' metrics path (default /metrics);
	// ScrapeInterval how often they are read (default 100 ms; negative:
	// never, and endpoints are picked without engine gauges);
	// ScrapeTimeout bounds one read (default 1 s); FailThreshold
	// consecutive failed reads take an endpoint out (default 3).
	MetricsPath string
	// HealthPath is checked with each scrape (default /health; "-": not
	// checked).
	HealthPath     string
	ScrapeInterval time.Duration
	ScrapeTimeout  time.Duration
	FailThreshold  int
	// MaxBodyBytes bounds a request body (default 16 MiB): a larger one is
	// refused with 413.
	MaxBodyBytes int
	// Protocol names, for data planes configured with other ones.
	DestinationKey, DestinationNamespace, SubsetKey, SubsetNamespace, ServedKey string
	// Registerer, when not nil, gets the picker's metrics.
	Registerer prometheus.Registerer
	// OnDecision, when not nil, is called with each decision's overhead:
	// from the request body's end reaching the picker to the header
	// mutation being sent (tests and benchmarks read it).
	OnDecision func(time.Duration)
	// DiscoveredEndpoints: the endpoints come from a discovery (an
	// InferencePool's pods) that calls EndpointsSynced once it has listed
	// them; readiness waits for it.
	DiscoveredEndpoints bool
	// ServerOptions are added after the picker's own (serverOptions) to
	// the gRPC server Serve starts.
	ServerOptions []grpc.ServerOption
	// bareServer: Serve starts its gRPC server with ServerOptions alone
	// (tests compare the picker's settings with gRPC's defaults).
	bareServer bool
	// Log gets errors and endpoint changes (nil: discarded).
	Log *slog.Logger
	// HTTPClient scrapes the endpoints (nil: a client of its own).
	HTTPClient *http.Client
}

func (o *Options) defaults() {
	if o.Policy == "" {
		o.Policy = sched.SLOPredictive
	}
	if o.QueueThreshold <= 0 {
		o.QueueThreshold = 5
	}
	if o.KVThreshold <= 0 {
		o.KVThreshold = 0.8
	}
	if o.MetricsPath == "" {
		o.MetricsPath = DefaultMetricsPath
	}
	if o.HealthPath == "" {
		o.HealthPath = DefaultHealthPath
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	if o.ScrapeTimeout <= 0 {
		o.ScrapeTimeout = time.Second
	}
	if o.FailThreshold <= 0 {
		o.FailThreshold = 3
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&o.DestinationKey, DestinationKey)
	def(&o.DestinationNamespace, DestinationNamespace)
	def(&o.SubsetKey, SubsetKey)
	def(&o.SubsetNamespace, SubsetNamespace)
	def(&o.ServedKey, ServedKey)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}}
	}
}

// Server is the Endpoint Picker: an ext_proc server over a scheduler and
// its endpoints. Register it on a grpc.Server (Register) or let Serve do
// it; Run scrapes the endpoints.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	opts    Options
	sched   *sched.Scheduler
	pool    pool
	health  *health.Server
	hashers sync.Pool // *sched.BlockHasher
	m       *metrics
	canned  cannedResponses
	// listed: the endpoint set is known (at once for a static list, after
	// the discovery's first listing otherwise); synced: the endpoints have
	// been scraped once since; leader: this replica may serve (always,
	// without leader election).
	listed, synced, leader atomic.Bool
}

// New returns a picker over eps.
func New(opts Options, eps []Endpoint) (*Server, error) {
	opts.defaults()
	for _, c := range opts.SheddableClasses {
		if _, err := sched.ParseClass(c); err != nil {
			return nil, fmt.Errorf("sheddable class: %w", err)
		}
	}
	if opts.DefaultClass != "" {
		if _, err := sched.ParseClass(opts.DefaultClass); err != nil {
			return nil, fmt.Errorf("default class: %w", err)
		}
	}
	s := &Server{opts: opts, health: health.NewServer(), m: newMetrics(opts.Registerer), canned: newCannedResponses()}
	s.hashers.New = func() any { return sched.NewBlockHasher(sched.DefaultBlockBytes) }
	sc, err := sched.New(sched.Options{Policy: opts.Policy, Seed: opts.Seed}, nil)
	if err != nil {
		return nil, fmt.Errorf("endpoint picker: %w", err)
	}
	s.sched = sc
	s.leader.Store(true)
	s.listed.Store(!opts.DiscoveredEndpoints)
	if err := s.SetEndpoints(eps); err != nil {
		return nil, err
	}
	if opts.ScrapeInterval < 0 {
		s.synced.Store(true)
	}
	s.health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	s.updateHealth()
	return s, nil
}

// Scheduler is the picker's scheduler (for inspection and tests).
func (s *Server) Scheduler() *sched.Scheduler { return s.sched }

// SetEndpoints replaces the endpoint set; endpoints that stay keep what
// the scheduler learnt about them.
func (s *Server) SetEndpoints(eps []Endpoint) error {
	eps = slices.Clone(eps)
	for i := range eps {
		if err := eps[i].Validate(); err != nil {
			return err
		}
		if eps[i].MetricsURL == "" {
			eps[i].MetricsURL = "http://" + eps[i].Addr + s.opts.MetricsPath
		}
		if eps[i].HealthURL == "" && s.opts.HealthPath != "-" {
			eps[i].HealthURL = "http://" + eps[i].Addr + s.opts.HealthPath
		}
	}
	bs := s.pool.set(eps, func(ep Endpoint) *sched.Backend {
		return sched.NewBackend(sched.BackendSpec{Name: ep.Addr, Models: ep.Models})
	}, s.opts.ScrapeInterval > 0)
	s.sched.SetBackends(bs)
	return nil
}

// SetDraining takes an endpoint out of (or back into) rotation without
// forgetting it: requests in flight finish, new ones go elsewhere. It
// reports whether the endpoint is known.
func (s *Server) SetDraining(addr string, draining bool) bool {
	m := s.pool.get(addr)
	if m == nil {
		return false
	}
	m.draining.Store(draining)
	m.update()
	return true
}

// Endpoint reports an endpoint's last engine metrics and whether it may be
// picked.
func (s *Server) Endpoint(addr string) (em EngineMetrics, eligible, ok bool) {
	m := s.pool.get(addr)
	if m == nil {
		return EngineMetrics{}, false, false
	}
	return m.metrics(), m.eligible(), true
}

// SetLeader makes this replica the active one (true) or a standby
// (false): readiness, and the ext_proc service's health, follow it, so
// that the data plane sends requests to the leader only.
func (s *Server) SetLeader(leader bool) {
	s.leader.Store(leader)
	s.updateHealth()
}

// EndpointsSynced tells the picker that the discovery has listed the
// endpoints (Options.DiscoveredEndpoints): readiness follows once they
// have been scraped.
func (s *Server) EndpointsSynced() {
	s.listed.Store(true)
	s.updateHealth()
}

// Ready reports whether the picker serves requests: endpoints listed and
// scraped once and, with leader election, the leader.
func (s *Server) Ready() bool { return s.listed.Load() && s.synced.Load() && s.leader.Load() }

func (s *Server) updateHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.Ready() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(ReadinessService, st)
	s.health.SetServingStatus(ExtProcService, st)
	s.health.SetServingStatus("", st)
}

// Register adds the ext_proc and health services to gs.
func (s *Server) Register(gs *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
}

// Run scrapes the endpoints every ScrapeInterval until ctx ends.
func (s *Server) Run(ctx context.Context) {
	if s.opts.ScrapeInterval < 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.opts.ScrapeInterval)
	defer t.Stop()
	for {
		s.pool.scrapeAll(ctx, s.opts.HTTPClient, s.opts.ScrapeTimeout, s.opts.FailThreshold, func(addr string, err error) {
			s.opts.Log.Warn("endpoint out of rotation: its metrics cannot be read", "endpoint", addr, "error", err.Error())
		})
		// The first round after the endpoints were listed makes the
		// picker ready.
		if !s.synced.Load() && s.listed.Load() {
			s.synced.Store(true)
			s.updateHealth()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Serve serves the picker on ln until ctx ends, then stops gracefully
// (streams in flight finish, for at most grace).
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	gs := grpc.NewServer(s.serverOptions()...)
	s.Register(gs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.Run(ctx) }()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		s.health.Shutdown()
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			gs.Stop()
		}
	}()
	err := gs.Serve(ln)
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("endpoint picker: %w", err)
	}
	return nil
}

// Flow-control windows of the gRPC server Serve starts.
const (
	streamWindow = 1 << 20
	connWindow   = 16 << 20
)

// serverOptions are the settings of the gRPC server Serve starts, for a
// data plane that opens one stream per HTTP request over a few
// long-lived connections.
//
// Static flow-control windows: gRPC's default, a window sized by
// bandwidth-delay estimation, sends a ping whenever data arrives and no
// ping is out, and every request body is such data: a ping and its
// acknowledgement per request on a quiet connection, one per round trip
// on a busy one, for an estimate a loopback or same-node link does not
// need (Envoy's HTTP/2 client keeps configured, static windows). 1 MiB per stream
// takes a chat request body in one window.
//
// Not gRPC's stream workers (NumStreamWorkers), although they remove the
// stack growth of a goroutine per stream: an ext_proc stream lasts as
// long as its HTTP response streams (seconds), so with a handful of
// workers all of them are busy under load and gRPC starts a goroutine
// per stream anyway; they help only a benchmark's short streams.
//
// docs/endpoint-picker.md ("Decision overhead") has the measurements.
func (s *Server) serverOptions() []grpc.ServerOption {
	if s.opts.bareServer {
		return s.opts.ServerOptions
	}
	return append([]grpc.ServerOption{grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(connWindow)},
		s.opts.ServerOptions...)
}

// sheddable reports whether requests of class may be shed.
func (s *Server) sheddable(class string) bool {
	return class != "" && slices.ContainsFunc(s.opts.SheddableClasses, func(c string) bool { return strings.EqualFold(c, class) })
}

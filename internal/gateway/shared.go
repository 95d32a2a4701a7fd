package gateway

import (
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/sharedstate"
)

// SharedState configures state shared between gateway replicas (package
// sharedstate): prefix-index inserts and breaker/demotion openings,
// through Redis. It is read when the gateway starts; a reload does not
// change it.
type SharedState struct {
	// Redis is the server's URL (redis://127.0.0.1:6379/0); empty turns
	// sharing off.
	Redis string `yaml:"redis"`
	// TTL is how long a prefix entry outlives its last use (default 10m).
	TTL Duration `yaml:"ttl"`
	// KeyPrefix namespaces keys and the channel (default "ttft:gateway:"):
	// replicas share state only with those using the same prefix.
	KeyPrefix string `yaml:"key_prefix"`
	// ShareLoad relays each replica's requests in flight per backend to
	// the others (default true). Off, each replica's load is its own
	// requests in flight and the engines' scraped metrics, which behind a
	// balancer see a replica's share of the load, or the whole of it
	// seconds late.
	ShareLoad *bool `yaml:"share_load"`
}

// validateSharedState checks shared_state.
func (c *Config) validateSharedState(bad fieldErrs) error {
	s := &c.SharedState
	if s.Redis == "" {
		return nil
	}
	u, err := url.Parse(s.Redis)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		return bad.at("must be a redis://, rediss:// or unix:// URL", "shared_state", "redis")
	}
	setDefault(&s.TTL, sharedstate.DefaultTTL)
	if s.TTL.Std() < time.Second {
		return bad.at("must be at least 1s", "shared_state", "ttl")
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = sharedstate.DefaultKeyPrefix
	}
	return nil
}

// sharedLocal applies other replicas' entries to the backends in force.
type sharedLocal struct{ g *Gateway }

func (l sharedLocal) backend(name string) *sched.Backend {
	st := l.g.st.Load()
	if st == nil {
		return nil
	}
	if u := st.ups[name]; u != nil {
		return u.sb
	}
	return nil
}

func (l sharedLocal) ImportPrefix(backend string, blocks []uint64) {
	if b := l.backend(backend); b != nil {
		b.ImportPrefix(blocks)
	}
}

func (l sharedLocal) ImportCooldown(backend, kind string, until time.Time) {
	if b := l.backend(backend); b != nil {
		b.ImportCooldown(kind, until, time.Now())
	}
}

// InFlight reports this replica's own requests in flight per backend.
func (l sharedLocal) InFlight(dst []sharedstate.BackendLoad) []sharedstate.BackendLoad {
	st := l.g.st.Load()
	if st == nil {
		return dst
	}
	for name, u := range st.ups {
		dst = append(dst, sharedstate.BackendLoad{Backend: name, InFlight: u.sb.InFlight()})
	}
	return dst
}

func (l sharedLocal) ImportInFlight(backend string, n int64) {
	if b := l.backend(backend); b != nil {
		b.ImportInFlight(n)
	}
}

// sharedObserver is the scheduler's observer: nil (not a nil *Client)
// without shared state.
func (g *Gateway) sharedObserver() sched.SharedObserver {
	if g.shared == nil {
		return nil
	}
	return g.shared
}

// newShared builds the shared-state client of cfg (nil when off); New
// starts it once the gateway runs.
func (g *Gateway) newShared(cfg *Config, reg prometheus.Registerer) error {
	s := cfg.SharedState
	if s.Redis == "" {
		return nil
	}
	m, err := sharedstate.NewMetrics(reg)
	if err != nil {
		return err
	}
	sc := sharedstate.Config{URL: s.Redis, TTL: s.TTL.Std(), KeyPrefix: s.KeyPrefix, Logger: g.log}
	if s.ShareLoad != nil && !*s.ShareLoad {
		sc.LoadInterval = -1
	}
	g.shared, err = sharedstate.New(sc, sharedLocal{g}, m)
	return err
}

// SharedState is the shared-state client (nil when off), for tests.
func (g *Gateway) SharedState() *sharedstate.Client { return g.shared }

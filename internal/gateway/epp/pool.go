package epp

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/enginemetrics"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// Endpoint is one model server the picker may choose.
type Endpoint struct {
	// Addr is ip:port: the backend's name in the scheduler and the value
	// sent to Envoy.
	Addr string
	// Models served; empty means any model.
	Models []string
	// MetricsURL is where its Prometheus metrics are read (default
	// http://Addr + Options.MetricsPath).
	MetricsURL string
	// HealthURL, when set, must answer 2xx for the endpoint to be picked
	// (default http://Addr + Options.HealthPath): an engine still loading
	// its weights serves metrics but fails its health check, which is
	// what a Kubernetes readiness probe reads.
	HealthURL string
}

// Validate checks the address is an ip:port, as the protocol requires
// (Envoy's original-destination cluster takes no host names).
func (e Endpoint) Validate() error {
	host, port, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return fmt.Errorf("endpoint %q: %w", e.Addr, err)
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("endpoint %q: %q is not an IP address", e.Addr, host)
	}
	if p, err := net.LookupPort("tcp", port); err != nil || p == 0 {
		return fmt.Errorf("endpoint %q: bad port %q", e.Addr, port)
	}
	return nil
}

// EngineMetrics are the gauges read from an endpoint's /metrics.
type EngineMetrics struct {
	Waiting, Running, KVUsage float64
}

// member is one endpoint's state in the pool.
type member struct {
	ep Endpoint // immutable once the member is in the pool
	b  *sched.Backend
	// draining: being removed (pod terminating, or SetDraining); scrapeOK:
	// the last scrapes succeeded (fewer than FailThreshold failures).
	draining, scrapeOK atomic.Bool
	fails              int // consecutive scrape failures (scrape loop only)
	running            atomic.Uint64
	// dest: the destination header and metadata naming this endpoint
	// alone (Server.destinationOf).
	dest atomic.Pointer[destination]
	// mu orders update calls: a scrape's verdict computed before a
	// SetDraining must not land after it.
	mu sync.Mutex
}

// eligible reports whether the endpoint may be picked at all.
func (m *member) eligible() bool { return m.b.Healthy() }

// update sets the scheduler's health verdict from the two reasons an
// endpoint is out: unreadable metrics, or draining.
func (m *member) update() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b.SetHealthy(m.scrapeOK.Load() && !m.draining.Load())
}

func (m *member) metrics() EngineMetrics {
	w, kv := m.b.EngineMetrics()
	return EngineMetrics{Waiting: w, KVUsage: kv, Running: math.Float64frombits(m.running.Load())}
}

// pool is the picker's endpoint set: members by address, swapped whole on
// change so that a decision reads it without a lock.
type pool struct {
	mu      sync.Mutex // serialises changes
	members atomic.Pointer[map[string]*member]
	list    atomic.Pointer[[]*member] // the same, in the configured order
}

func (p *pool) get(addr string) *member {
	if m := p.members.Load(); m != nil {
		return (*m)[addr]
	}
	return nil
}

func (p *pool) all() []*member {
	if l := p.list.Load(); l != nil {
		return *l
	}
	return nil
}

// set replaces the endpoint set, keeping the state (predictors, prefix
// index, health) of endpoints that stay. scrape says whether new
// endpoints wait for their first scrape before they are picked.
func (p *pool) set(eps []Endpoint, newBackend func(Endpoint) *sched.Backend, scrape bool) []*sched.Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.members.Load()
	next := make(map[string]*member, len(eps))
	list := make([]*member, 0, len(eps))
	bs := make([]*sched.Backend, 0, len(eps))
	for _, ep := range eps {
		if _, dup := next[ep.Addr]; dup {
			continue
		}
		var m *member
		if old != nil {
			switch om := (*old)[ep.Addr]; {
			case om == nil || !slices.Equal(om.ep.Models, ep.Models):
				// New, or serving other models: fresh scheduling state.
			case om.ep.MetricsURL == ep.MetricsURL && om.ep.HealthURL == ep.HealthURL:
				m = om
			default:
				// Same backend, other URLs: a member of its own (the
				// scrapers read ep without a lock), the state kept.
				m = &member{ep: ep, b: om.b}
				m.scrapeOK.Store(om.scrapeOK.Load())
				m.draining.Store(om.draining.Load())
				m.running.Store(om.running.Load())
			}
		}
		if m == nil {
			m = &member{ep: ep, b: newBackend(ep)}
			// A new endpoint is picked once its metrics could be read: a
			// pod listed before its server listens must not get traffic.
			m.scrapeOK.Store(!scrape)
			m.update()
		}
		next[ep.Addr] = m
		list = append(list, m)
		bs = append(bs, m.b)
	}
	p.members.Store(&next)
	p.list.Store(&list)
	return bs
}

// scrapeAll reads every member's metrics once, concurrently, each within
// timeout. failThreshold consecutive failures take a member out.
func (p *pool) scrapeAll(ctx context.Context, client *http.Client, timeout time.Duration, failThreshold int, onErr func(addr string, err error)) {
	ms := p.all()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			es, err := scrape(sctx, client, m.ep.MetricsURL)
			if err == nil && m.ep.HealthURL != "" {
				err = probe(sctx, client, m.ep.HealthURL)
			}
			if err != nil {
				m.fails++
				if onErr != nil && m.fails == failThreshold {
					onErr(m.ep.Addr, err)
				}
				if m.fails >= failThreshold {
					m.scrapeOK.Store(false)
					m.update()
				}
				return
			}
			m.fails = 0
			// SetEngineStats: the gauges, and the engine's cache size and
			// prefix-cache counters for the capacity the scheduler learns.
			m.b.SetEngineStats(es)
			_, running, _, _ := enginemetrics.Load(es)
			m.running.Store(math.Float64bits(running))
			m.scrapeOK.Store(true)
			m.update()
		}()
	}
	wg.Wait()
}

// scrape reads one endpoint's engine metrics; an exposition without any
// queue or KV gauge is an error, since the picker could tell nothing about
// the endpoint from it.
func scrape(ctx context.Context, client *http.Client, url string) (sched.EngineStats, error) {
	es, err := enginemetrics.Scrape(ctx, client, url)
	if err != nil {
		return es, err
	}
	if _, _, _, ok := enginemetrics.Load(es); !ok {
		return es, fmt.Errorf("scraping %s: none of the vLLM, SGLang or TensorRT-LLM queue and KV-cache gauges is present", url)
	}
	return es, nil
}

// probe checks an endpoint's health URL answers 2xx.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health check %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health check %s: %w", url, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health check %s: status %d", url, resp.StatusCode)
	}
	return nil
}

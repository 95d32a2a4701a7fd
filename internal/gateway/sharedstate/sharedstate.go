package sharedstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultTTL           = 10 * time.Minute
	DefaultKeyPrefix     = "ttft:gateway:"
	DefaultQueueSize     = 8192
	DefaultBatchSize     = 256
	DefaultFlushInterval = 5 * time.Millisecond
	DefaultLoadInterval  = 5 * time.Millisecond
)

// Requests-in-flight reports: every replica republishes all its counts
// every loadHeartbeat, even unchanged, and the others forget a replica
// not heard from for loadExpiry (it stopped, or lost Redis), so a
// replica's requests are not counted for ever after it dies.
const (
	loadHeartbeat = time.Second
	loadExpiry    = 3 * loadHeartbeat
)

// Config configures a Client.
type Config struct {
	// URL is the Redis URL (redis://host:port/db, rediss://, unix://).
	URL string
	// TTL is how long a prefix entry lives in Redis after its last
	// publication (default DefaultTTL): about how long an engine keeps an
	// unused prefix cached.
	TTL time.Duration
	// KeyPrefix namespaces the keys and the channel (default
	// DefaultKeyPrefix), so that several gateway fleets share one Redis.
	KeyPrefix string
	// ReplicaID names this replica in what it publishes, so it can ignore
	// its own messages (default: random).
	ReplicaID string
	// QueueSize bounds the entries awaiting publication; beyond it they
	// are dropped (default DefaultQueueSize).
	QueueSize int
	// BatchSize is the most entries written in one round trip (default
	// DefaultBatchSize); FlushInterval how long a batch waits to fill
	// (default DefaultFlushInterval).
	BatchSize     int
	FlushInterval time.Duration
	// LoadInterval is how often this replica's requests in flight per
	// backend are read and, where they changed, published (default
	// DefaultLoadInterval; negative: never, and others' are ignored).
	LoadInterval time.Duration
	// Logger gets connectivity changes (nil: discarded).
	Logger *slog.Logger
}

func (c *Config) defaults() error {
	if c.URL == "" {
		return errors.New("shared state: no Redis URL")
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.ReplicaID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("shared state: replica id: %w", err)
		}
		c.ReplicaID = hex.EncodeToString(b[:])
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.LoadInterval == 0 {
		c.LoadInterval = DefaultLoadInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Local is the replica's own scheduler state that other replicas' entries
// are applied to. Unknown backends are ignored (the replicas' configurations
// may differ for a while during a rollout).
type Local interface {
	ImportPrefix(backend string, blocks []uint64)
	ImportCooldown(backend, kind string, until time.Time)
	// InFlight appends this replica's own requests in flight on each
	// backend to dst (it is read every LoadInterval, off the request
	// path).
	InFlight(dst []BackendLoad) []BackendLoad
	// ImportInFlight sets the other replicas' requests in flight on
	// backend (their sum).
	ImportInFlight(backend string, n int64)
}

// BackendLoad is one backend's requests in flight.
type BackendLoad struct {
	Backend  string
	InFlight int64
}

// Entry kinds on the wire.
const (
	kindPrefix = "prefix"
	// kindLoad: the origin's requests in flight on a backend (N). Only in
	// messages, never a key: a replica that subscribes learns them within
	// loadHeartbeat.
	kindLoad = "load"
)

// entry is one piece of shared state, as a key's value and in a message.
type entry struct {
	// Kind is "prefix" or a cooldown kind (sched.CooldownBreaker, …).
	Kind    string `json:"k"`
	Backend string `json:"b"`
	// Blocks: a prefix entry's chained block hashes.
	Blocks []uint64 `json:"h,omitempty"`
	// Until: a cooldown's end, in Unix milliseconds.
	Until int64 `json:"u,omitempty"`
	// N: a load entry's requests in flight.
	N int64 `json:"n,omitempty"`
	// Origin is the publishing replica.
	Origin string `json:"r"`
}

// message is one published batch.
type message struct {
	Origin  string  `json:"r"`
	Entries []entry `json:"e"`
}

// Metrics are the shared state's Prometheus series.
type Metrics struct {
	Published prometheus.Counter
	Applied   prometheus.Counter
	Dropped   prometheus.Counter
	Connected prometheus.Gauge
}

// NewMetrics registers the ttft_gateway_shared_state_* series on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{Name: "ttft_gateway_shared_state_published_total",
			Help: "Shared-state entries (prefix inserts, breaker and demotion openings) this replica wrote to Redis."}),
		Applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "ttft_gateway_shared_state_applied_total",
			Help: "Other replicas' shared-state entries applied to this replica's scheduler."}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ttft_gateway_shared_state_dropped_total",
			Help: "Shared-state entries not published: queue full or Redis unreachable."}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ttft_gateway_shared_state_connected",
			Help: "1 while this replica is subscribed to the shared state in Redis, 0 while routing on local state only."}),
	}
	for _, c := range []prometheus.Collector{m.Published, m.Applied, m.Dropped, m.Connected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering shared-state metrics: %w", err)
		}
	}
	return m, nil
}

// Client publishes this replica's state and applies the others'. It
// implements sched.SharedObserver.
type Client struct {
	cfg   Config
	rdb   *redis.Client
	local Local
	m     *Metrics
	q     chan entry
	// connected mirrors the gauge, for Connected.
	connected atomic.Bool

	// mu guards the dedup state the request path consults.
	mu sync.Mutex
	// sentPrefix: when each (backend, last block) chain was last queued,
	// so a hot prefix is republished only to refresh its TTL.
	sentPrefix map[prefixKey]time.Time
	// cooldowns: the last opening seen per backend and kind, published or
	// applied, so one opening is published once and never echoed.
	cooldowns map[cooldownKey]int64

	// lmu guards remote: the other replicas' requests in flight per
	// backend (by origin), and when each origin was last heard.
	lmu    sync.Mutex
	remote map[string]*remoteLoad
	// slot is this replica's rank among the live replicas (high 32 bits)
	// and their number (low 32), for ReplicaSlot; announce asks the load
	// loop to publish every count now, so that a replica that just
	// appeared learns of this one without waiting for a heartbeat.
	slot     atomic.Uint64
	announce atomic.Bool

	wg sync.WaitGroup
}

type remoteLoad struct {
	seen     time.Time
	inFlight map[string]int64
}

type prefixKey struct {
	backend string
	last    uint64
}

type cooldownKey struct{ backend, kind string }

// maxSent bounds sentPrefix; past it the map starts over (republishing a
// few entries early is harmless).
const maxSent = 1 << 16

// New returns a client; Start runs it. m may be nil (no metrics).
func New(cfg Config, local Local, m *Metrics) (*Client, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("shared state: Redis URL: %w", err)
	}
	// Fail fast and never retry: a batch that cannot be written is
	// dropped, and the request path never waits on any of this.
	opt.DialTimeout = 500 * time.Millisecond
	opt.ReadTimeout = time.Second
	opt.WriteTimeout = time.Second
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.PoolSize = 4
	opt.DisableIdentity = true
	if m == nil {
		if m, err = NewMetrics(prometheus.NewRegistry()); err != nil {
			return nil, err
		}
	}
	return &Client{
		cfg: cfg, rdb: redis.NewClient(opt), local: local, m: m,
		q:          make(chan entry, cfg.QueueSize),
		sentPrefix: map[prefixKey]time.Time{},
		cooldowns:  map[cooldownKey]int64{},
		remote:     map[string]*remoteLoad{},
	}, nil
}

// ReplicaID is the id this replica publishes under.
func (c *Client) ReplicaID() string { return c.cfg.ReplicaID }

// Connected reports whether the subscriber is currently subscribed.
func (c *Client) Connected() bool { return c.connected.Load() }

// Start runs the publisher and the subscriber until ctx ends; Close
// waits for them.
func (c *Client) Start(ctx context.Context) {
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.publishLoop(ctx)
	}()
	go func() {
		defer c.wg.Done()
		c.subscribeLoop(ctx)
	}()
	if c.cfg.LoadInterval > 0 {
		c.wg.Go(func() { c.loadLoop(ctx) })
	}
}

// Close waits for the loops (their context must have ended) and closes
// the connections.
func (c *Client) Close() error {
	c.wg.Wait()
	c.connected.Store(false)
	c.m.Connected.Set(0)
	return c.rdb.Close()
}

func (c *Client) channel() string { return c.cfg.KeyPrefix + "events" }

func (c *Client) key(e *entry) string {
	if e.Kind == kindPrefix {
		return c.cfg.KeyPrefix + "prefix:" + e.Backend + ":" + strconv.FormatUint(e.Blocks[len(e.Blocks)-1], 16)
	}
	return c.cfg.KeyPrefix + "cooldown:" + e.Kind + ":" + e.Backend
}

// enqueue queues e without waiting: a full queue drops it.
func (c *Client) enqueue(e entry) {
	select {
	case c.q <- e:
	default:
		c.m.Dropped.Inc()
		c.forget([]entry{e})
	}
}

// forget clears the dedup state of entries that were dropped, so that the
// next insert of the same chain (or report of the same opening) is
// published rather than skipped as recent: after Redis returns, hot
// prefixes are shared again at once, not a quarter of the TTL later.
func (c *Client) forget(es []entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range es {
		e := &es[i]
		if e.Kind == kindPrefix {
			delete(c.sentPrefix, prefixKey{e.Backend, e.Blocks[len(e.Blocks)-1]})
		} else if k := (cooldownKey{e.Backend, e.Kind}); c.cooldowns[k] == e.Until {
			delete(c.cooldowns, k)
		}
	}
}

// PrefixInserted implements sched.SharedObserver: it queues the chain
// unless it was queued less than a quarter of the TTL ago.
func (c *Client) PrefixInserted(backend string, blocks []uint64) {
	if len(blocks) == 0 {
		return
	}
	now := time.Now()
	k := prefixKey{backend, blocks[len(blocks)-1]}
	c.mu.Lock()
	if t, ok := c.sentPrefix[k]; ok && now.Sub(t) < c.cfg.TTL/4 {
		c.mu.Unlock()
		return
	}
	if len(c.sentPrefix) >= maxSent {
		clear(c.sentPrefix)
	}
	c.sentPrefix[k] = now
	c.mu.Unlock()
	c.enqueue(entry{Kind: kindPrefix, Backend: backend, Blocks: append([]uint64(nil), blocks...), Origin: c.cfg.ReplicaID})
}

// CooldownOpen implements sched.SharedObserver: it queues each opening once.
func (c *Client) CooldownOpen(backend, kind string, until time.Time) {
	u := until.UnixMilli()
	k := cooldownKey{backend, kind}
	c.mu.Lock()
	if c.cooldowns[k] >= u {
		c.mu.Unlock()
		return
	}
	c.cooldowns[k] = u
	c.mu.Unlock()
	c.enqueue(entry{Kind: kind, Backend: backend, Until: u, Origin: c.cfg.ReplicaID})
}

// publishLoop writes queued entries in batches.
func (c *Client) publishLoop(ctx context.Context) {
	batch := make([]entry, 0, c.cfg.BatchSize)
	var failedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-c.q:
			batch = append(batch, e)
		}
		// Let the batch fill for a moment: one round trip for many
		// entries.
		timer := time.NewTimer(c.cfg.FlushInterval)
	fill:
		for len(batch) < c.cfg.BatchSize {
			select {
			case e := <-c.q:
				batch = append(batch, e)
			case <-timer.C:
				break fill
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
		timer.Stop()
		// After a failure, drop for a second rather than dial Redis
		// for every batch while it is down.
		if !failedAt.IsZero() && time.Since(failedAt) < time.Second && !c.connected.Load() {
			c.m.Dropped.Add(float64(len(batch)))
			c.forget(batch)
		} else if err := c.write(ctx, batch); err != nil {
			failedAt = time.Now()
			c.m.Dropped.Add(float64(len(batch)))
			c.forget(batch)
			if ctx.Err() == nil {
				c.cfg.Logger.Debug("shared state: publishing", "entries", len(batch), "error", err.Error())
			}
		} else {
			failedAt = time.Time{}
			c.m.Published.Add(float64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
}

// write sets one key per entry and publishes the batch, in one pipeline.
func (c *Client) write(ctx context.Context, batch []entry) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	now := time.Now()
	pipe := c.rdb.Pipeline()
	for i := range batch {
		e := &batch[i]
		v, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encoding a shared-state entry: %w", err)
		}
		ttl := c.cfg.TTL
		if e.Kind != kindPrefix {
			ttl = time.UnixMilli(e.Until).Sub(now)
			if ttl < time.Millisecond {
				continue // already over: nothing to load later
			}
		}
		pipe.Set(ctx, c.key(e), v, ttl)
	}
	msg, err := json.Marshal(message{Origin: c.cfg.ReplicaID, Entries: batch})
	if err != nil {
		return fmt.Errorf("encoding a shared-state message: %w", err)
	}
	pipe.Publish(ctx, c.channel(), msg)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("writing shared state to Redis: %w", err)
	}
	return nil
}

// subscribeLoop subscribes, loads the live keys, and applies messages
// until the connection fails; then it retries with backoff.
func (c *Client) subscribeLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.subscribeOnce(ctx)
		// Whatever the others had in flight is no longer heard of: count
		// only this replica's own until they report again.
		c.forgetLoads(func(string) bool { return true })
		if c.connected.Swap(false) {
			c.m.Connected.Set(0)
			c.cfg.Logger.Warn("shared state: lost Redis, routing on local state", "error", fmt.Sprint(err))
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// subscribeOnce runs one subscription, returning when it fails or ctx ends.
func (c *Client) subscribeOnce(ctx context.Context) error {
	ps := c.rdb.Subscribe(ctx, c.channel())
	defer ps.Close()
	// go-redis reads a subscription without watching ctx: closing it is
	// what ends a blocked receive when the gateway stops.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	// The confirmation proves the subscription is live before the load:
	// whatever is published after it is seen, what came before is in the
	// keys.
	if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	n, err := c.load(ctx)
	if err != nil {
		return err
	}
	c.connected.Store(true)
	c.m.Connected.Set(1)
	c.announce.Store(true)
	c.cfg.Logger.Info("shared state: subscribed to Redis", "loaded", n)
	for {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				// Quiet, not necessarily dead: ping to find out.
				if perr := ps.Ping(ctx); perr != nil {
					return fmt.Errorf("pinging: %w", perr)
				}
				continue
			}
			return fmt.Errorf("receiving: %w", err)
		}
		if m, ok := msg.(*redis.Message); ok {
			c.applyMessage(m.Payload)
		}
	}
}

// applyMessage applies another replica's batch.
func (c *Client) applyMessage(payload string) {
	var m message
	if json.Unmarshal([]byte(payload), &m) != nil || m.Origin == c.cfg.ReplicaID {
		return
	}
	c.heard(m.Origin)
	for i := range m.Entries {
		c.apply(&m.Entries[i])
	}
}

// apply applies one entry of another replica.
func (c *Client) apply(e *entry) {
	if e.Origin == c.cfg.ReplicaID {
		return
	}
	switch e.Kind {
	case kindPrefix:
		if len(e.Blocks) == 0 {
			return
		}
		c.local.ImportPrefix(e.Backend, e.Blocks)
		c.m.Applied.Inc()
		return
	case kindLoad:
		c.applyLoad(e)
		return
	}
	k := cooldownKey{e.Backend, e.Kind}
	c.mu.Lock()
	seen := c.cooldowns[k] >= e.Until
	if !seen {
		c.cooldowns[k] = e.Until
	}
	c.mu.Unlock()
	if seen {
		return
	}
	c.local.ImportCooldown(e.Backend, e.Kind, time.UnixMilli(e.Until))
	c.m.Applied.Inc()
}

// load applies every live key (SCAN, then MGET page by page) and returns
// how many entries it applied.
func (c *Client) load(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n := 0
	var cursor uint64
	for {
		keys, next, err := c.rdb.Scan(ctx, cursor, c.cfg.KeyPrefix+"*", 1000).Result()
		if err != nil {
			return n, fmt.Errorf("scanning shared state: %w", err)
		}
		if len(keys) > 0 {
			vals, err := c.rdb.MGet(ctx, keys...).Result()
			if err != nil {
				return n, fmt.Errorf("reading shared state: %w", err)
			}
			for _, v := range vals {
				s, ok := v.(string)
				if !ok {
					continue // expired between SCAN and MGET
				}
				var e entry
				if json.Unmarshal([]byte(s), &e) == nil && e.Origin != c.cfg.ReplicaID {
					c.apply(&e)
					n++
				}
			}
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}

package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Policy names.
const (
	RoundRobin       = "round-robin"
	Random           = "random"
	LeastOutstanding = "least-outstanding"
	PowerOfTwo       = "power-of-two"
	PrefixAffinity   = "prefix-affinity"
	CacheAware       = "cache-aware"
	SLOPredictive    = "slo-predictive"
)

// Policies lists every policy name.
func Policies() []string {
	return []string{RoundRobin, Random, LeastOutstanding, PowerOfTwo, PrefixAffinity, CacheAware, SLOPredictive}
}

// Decision reasons (a bounded set: they are metric label values).
const (
	ReasonRotation   = "rotation"
	ReasonRandom     = "random"
	ReasonLeastLoad  = "least-load"
	ReasonPrefixHit  = "prefix-hit"
	ReasonPrefixMiss = "prefix-miss"
	ReasonOverloaded = "prefix-overloaded"
	ReasonHeadroom   = "headroom"
	ReasonExplore    = "explore"
	ReasonNoHeadroom = "no-headroom"
	ReasonProbe      = "probe"
)

// Errors Pick returns.
var (
	ErrNoBackend   = errors.New("no backend serves this model")
	ErrUnavailable = errors.New("no backend available (all unhealthy, open or at capacity)")
)

// SLA-weighted scorer weights (article §4.3).
const (
	slaWeightCompliance = 0.6
	slaWeightLatency    = 0.4
)

// Request is what the scheduler knows about one request.
type Request struct {
	// API is "openai" or "anthropic"; Model the requested model.
	API   string
	Model string
	// PromptTokens is the (estimated) prompt length; Blocks the chained
	// hashes of its canonical prompt (BlockHasher).
	PromptTokens int
	Blocks       []uint64
	// SLO is the TTFT target (0 = none); Class its name for labels.
	SLO   time.Duration
	Class string
	// Exclude names backends already tried for this request (retries).
	Exclude []string
}

// Options configure a Scheduler.
type Options struct {
	Policy string
	// Now is the clock (time.Now when nil); an offline evaluation passes a
	// virtual one.
	Now func() time.Time
	// Seed makes random choices reproducible (0 = from the clock).
	Seed uint64
	// Explore is the share of SLO-predictive decisions that pick a random
	// backend predicted to meet the SLO, so that every backend's estimate
	// stays fresh (default 0.03; negative disables).
	Explore float64
	// BlockTokens is the token estimate of one hashed block (default
	// DefaultBlockBytes/4).
	BlockTokens int
	// PanicThreshold is the share of the backends serving a request's
	// model and API that must be available (healthy, breaker admitting)
	// for circuit breakers to be obeyed. Below it, requests go to every
	// healthy backend, breakers ignored, as with Envoy's healthy panic
	// threshold: a burst of failures (many of them the requests' own)
	// must not take a whole fleet out of rotation and answer 503 to
	// requests that would have succeeded. Default 0.5; negative disables.
	PanicThreshold float64
}

// Scheduler picks backends. It is safe for concurrent use; backends can be
// swapped (config reload) while requests are in flight on the old ones.
type Scheduler struct {
	opts     Options
	backends atomic.Pointer[[]*Backend]
	rr       atomic.Uint64
	mu       sync.Mutex
	rng      *rand.Rand
}

// New returns a scheduler running the named policy.
func New(opts Options, backends []*Backend) (*Scheduler, error) {
	if opts.Policy == "" {
		opts.Policy = SLOPredictive
	}
	if !slices.Contains(Policies(), opts.Policy) {
		return nil, fmt.Errorf("unknown policy %q (want one of %s)", opts.Policy, strings.Join(Policies(), ", "))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Seed == 0 {
		opts.Seed = uint64(time.Now().UnixNano())
	}
	if opts.Explore == 0 {
		opts.Explore = 0.03
	}
	if opts.PanicThreshold == 0 {
		opts.PanicThreshold = 0.5
	}
	if opts.BlockTokens <= 0 {
		opts.BlockTokens = DefaultBlockBytes / 4
	}
	s := &Scheduler{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5851F42D4C957F2D))}
	s.SetBackends(backends)
	return s, nil
}

// Policy is the policy name.
func (s *Scheduler) Policy() string { return s.opts.Policy }

// SetBackends replaces the backend set atomically. Requests in flight keep
// their *Backend; callers reuse the *Backend of an unchanged backend so its
// learned state survives a reload.
func (s *Scheduler) SetBackends(bs []*Backend) {
	cp := slices.Clone(bs)
	s.backends.Store(&cp)
}

// Backends returns the current backend set (do not modify).
func (s *Scheduler) Backends() []*Backend { return *s.backends.Load() }

// candidate is one backend that passed the filters, with what scoring learnt.
type candidate struct {
	b        *Backend
	brOK     bool // the breaker admits it
	sloOK    bool
	matched  int // leading prefix blocks in the index
	uncached int
	feat     Features
	pred     Prediction
	score    float64
}

// Ticket is one dispatched request. Call FirstToken when the first token
// reaches the gateway (streams only) and End exactly once when it finishes.
type Ticket struct {
	Backend      *Backend
	Policy       string
	Reason       string
	Prediction   Prediction
	SLO          time.Duration
	Class        string
	MeetsSLO     bool // the prediction says P95 ≤ SLO (true without an SLO)
	CachedTokens int
	Candidates   int

	s        *Scheduler
	feat     Features
	uncached int64
	start    time.Time
	first    bool
	ended    bool
	trial    bool
	probe    bool
	mu       sync.Mutex
}

func (s *Scheduler) float() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Float64()
}

func (s *Scheduler) intn(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

// Pick chooses a backend for req and dispatches it (counts it in flight).
func (s *Scheduler) Pick(req *Request) (*Ticket, error) {
	now := s.opts.Now()
	all := *s.backends.Load()
	var buf [32]candidate
	cands := buf[:0]
	serves := false
	// The panic threshold is a property of the fleet, not of this
	// request's retries: backends it excluded count too.
	total, avail := 0, 0
	for _, b := range all {
		if !b.serves(req.API, req.Model) {
			continue
		}
		total++
		brOK := b.admissible(now)
		if brOK {
			avail++
		}
		if slices.Contains(req.Exclude, b.Spec.Name) {
			continue
		}
		serves = true
		if !b.Healthy() {
			continue
		}
		if mc := b.Spec.MaxConcurrency; mc > 0 && b.inFlight.Load() >= int64(mc) {
			continue
		}
		cands = append(cands, candidate{b: b, brOK: brOK, sloOK: b.sloOK(now)})
	}
	if pt := s.opts.PanicThreshold; pt <= 0 || float64(avail) >= pt*float64(total) {
		n := 0
		for i := range cands {
			if cands[i].brOK {
				cands[n] = cands[i]
				n++
			}
		}
		cands = cands[:n]
	}
	if len(cands) == 0 {
		if !serves {
			return nil, fmt.Errorf("model %q: %w", req.Model, ErrNoBackend)
		}
		return nil, fmt.Errorf("model %q: %w", req.Model, ErrUnavailable)
	}
	// SLO demotion: leave demoted backends out unless nothing else is left.
	// A half-open backend with its probe slot free is "ok" and gets the
	// request as its probe when picked.
	ok := 0
	for i := range cands {
		if cands[i].sloOK {
			cands[ok] = cands[i]
			ok++
		}
	}
	if ok > 0 {
		cands = cands[:ok]
	}

	var i int
	reason := ""
	switch s.opts.Policy {
	case RoundRobin:
		i, reason = s.pickRoundRobin(cands), ReasonRotation
	case Random:
		i, reason = s.pickRandom(cands), ReasonRandom
	case LeastOutstanding:
		i, reason = s.pickLeast(cands), ReasonLeastLoad
	case PowerOfTwo:
		i, reason = s.pickP2C(cands), ReasonLeastLoad
	case PrefixAffinity:
		i, reason = s.pickPrefix(req, cands, false)
	case CacheAware:
		i, reason = s.pickPrefix(req, cands, true)
	case SLOPredictive:
		i, reason = s.pickPredictive(req, cands)
	}
	c := &cands[i]
	if s.opts.Policy != SLOPredictive {
		// Predict for the chosen backend under every policy, so predictor
		// error and the SLO tracker see all traffic.
		s.match(req, c)
		s.predict(req, c)
	}
	t := &Ticket{
		Backend:    c.b,
		Policy:     s.opts.Policy,
		Reason:     reason,
		Prediction: c.pred,
		SLO:        req.SLO,
		Class:      req.Class,
		// Without data there is no evidence against the SLO: a cold
		// backend is assumed to meet it rather than rejected.
		MeetsSLO:     req.SLO <= 0 || !c.pred.Ready || c.pred.P95 <= req.SLO,
		CachedTokens: req.PromptTokens - c.uncached,
		Candidates:   len(cands),
		s:            s,
		feat:         c.feat,
		uncached:     int64(c.uncached),
		start:        now,
	}
	t.trial, t.probe = c.b.claim(now)
	if t.probe && reason != ReasonNoHeadroom {
		t.Reason = ReasonProbe
	}
	c.b.inFlight.Add(1)
	c.b.queuedTokens.Add(t.uncached)
	c.b.prefix.Insert(req.Blocks)
	return t, nil
}

func (s *Scheduler) match(req *Request, c *candidate) {
	c.matched = c.b.prefix.Match(req.Blocks)
	c.uncached = max(req.PromptTokens-c.matched*s.opts.BlockTokens, 0)
}

func (s *Scheduler) predict(req *Request, c *candidate) {
	c.feat = c.b.features(req.PromptTokens, c.uncached)
	c.pred = c.b.preds.predict(c.feat)
}

func load(b *Backend) float64 { return float64(b.inFlight.Load()) / b.Spec.Weight }

func (s *Scheduler) pickRoundRobin(cands []candidate) int {
	total := 0
	for _, c := range cands {
		total += max(int(c.b.Spec.Weight+0.5), 1)
	}
	k := int((s.rr.Add(1) - 1) % uint64(total))
	for i, c := range cands {
		k -= max(int(c.b.Spec.Weight+0.5), 1)
		if k < 0 {
			return i
		}
	}
	return len(cands) - 1
}

func (s *Scheduler) pickRandom(cands []candidate) int {
	total := 0.0
	for _, c := range cands {
		total += c.b.Spec.Weight
	}
	x := s.float() * total
	for i, c := range cands {
		x -= c.b.Spec.Weight
		if x < 0 {
			return i
		}
	}
	return len(cands) - 1
}

// pickLeast returns the least loaded candidate, starting the scan at a
// rotating offset so that ties spread instead of piling on the first.
func (s *Scheduler) pickLeast(cands []candidate) int {
	off := int(s.rr.Add(1) % uint64(len(cands)))
	best := -1
	for k := range cands {
		i := (off + k) % len(cands)
		if best < 0 || load(cands[i].b) < load(cands[best].b) {
			best = i
		}
	}
	return best
}

func (s *Scheduler) pickP2C(cands []candidate) int {
	if len(cands) == 1 {
		return 0
	}
	a := s.intn(len(cands))
	b := s.intn(len(cands) - 1)
	if b >= a {
		b++
	}
	if load(cands[b].b) < load(cands[a].b) {
		return b
	}
	return a
}

// pickPrefix sends a request where most of its prefix is cached. With
// loadAware (cache-aware), a backend much busier than the least busy one is
// not eligible for affinity: a warm cache does not help behind a long queue.
func (s *Scheduler) pickPrefix(req *Request, cands []candidate, loadAware bool) (int, string) {
	minLoad := -1.0
	for i := range cands {
		s.match(req, &cands[i])
		if l := load(cands[i].b); minLoad < 0 || l < minLoad {
			minLoad = l
		}
	}
	off := int(s.rr.Add(1) % uint64(len(cands)))
	best, overloaded := -1, false
	for k := range cands {
		i := (off + k) % len(cands)
		c := &cands[i]
		if loadAware && c.matched > 0 && load(c.b) > 1.5*minLoad+2 {
			overloaded = true
			continue
		}
		if best < 0 || c.matched > cands[best].matched ||
			(c.matched == cands[best].matched && load(c.b) < load(cands[best].b)) {
			best = i
		}
	}
	if best < 0 {
		return s.pickLeast(cands), ReasonOverloaded
	}
	switch {
	case cands[best].matched > 0:
		return best, ReasonPrefixHit
	case overloaded:
		return best, ReasonOverloaded
	}
	return best, ReasonPrefixMiss
}

// pickPredictive scores every candidate with the sla-weighted scorer:
// 0.6·compliance + 0.4·(1/latency score), where compliance is the backend's
// recent SLO attainment times the predicted probability of meeting this
// request's SLO, and the latency score is the predicted mean relative to the
// best candidate's (so its inverse is 1 for the fastest).
func (s *Scheduler) pickPredictive(req *Request, cands []candidate) (int, string) {
	minMean := time.Duration(-1)
	for i := range cands {
		c := &cands[i]
		s.match(req, c)
		s.predict(req, c)
		if minMean < 0 || c.pred.Mean < minMean {
			minMean = c.pred.Mean
		}
	}
	best := 0
	meets := 0
	for i := range cands {
		c := &cands[i]
		p := meetProbability(c.pred, req.SLO)
		if !c.pred.Ready {
			// Optimism under uncertainty: an unmeasured backend is tried,
			// which is how it gets measured.
			p = 1
		}
		if p >= 0.95 {
			meets++
		}
		inv := 1.0
		if c.pred.Mean > 0 {
			inv = float64(max(minMean, time.Microsecond)) / float64(c.pred.Mean)
		}
		c.score = slaWeightCompliance*c.b.attainment()*p + slaWeightLatency*inv
		if c.score > cands[best].score {
			best = i
		}
	}
	if meets == 0 {
		return best, ReasonNoHeadroom
	}
	if s.opts.Explore > 0 && len(cands) > 1 && s.float() < s.opts.Explore {
		// Explore only among backends predicted to meet the SLO, so that
		// keeping estimates fresh costs no violations.
		k := s.intn(meets)
		for i := range cands {
			if !cands[i].pred.Ready || meetProbability(cands[i].pred, req.SLO) >= 0.95 {
				if k == 0 {
					return i, ReasonExplore
				}
				k--
			}
		}
	}
	return best, ReasonHeadroom
}

// meetProbability maps a (mean, P95) prediction to a probability of TTFT ≤
// slo: 1 when even the P95 fits, 0.5 at the mean, linear in between, and
// falling towards 0 as the mean exceeds the SLO. Without an SLO every
// backend "meets" it and only latency matters.
func meetProbability(p Prediction, slo time.Duration) float64 {
	if slo <= 0 {
		return 1
	}
	switch {
	case p.P95 <= slo:
		return 1
	case p.Mean < slo:
		span := float64(p.P95 - p.Mean)
		return 0.5 + 0.45*float64(slo-p.Mean)/span
	default:
		return 0.5 * float64(slo) / float64(p.Mean)
	}
}

// Outcome is how a request ended, for the circuit breaker.
type Outcome int

const (
	// OutcomeOK: the backend answered (any status below 500 but 429).
	OutcomeOK Outcome = iota
	// OutcomeFailed: transport error, 5xx, stall or cut stream.
	OutcomeFailed
	// OutcomeCanceled: the client went away; says nothing about the backend.
	OutcomeCanceled
	// OutcomeNoVerdict: the backend answered or worked, but not in a way
	// that says whether it is healthy: it shed load (429), or a long
	// non-streamed answer outlasted the gateway's timeout. Neither counts
	// toward the breaker, or a client's long requests (or a fleet busy
	// enough to answer 429) would open the breakers of backends that work.
	OutcomeNoVerdict
)

// FirstToken records the first token's arrival: the request leaves the
// backend's prefill queue, and the predictors and SLO tracker learn its TTFT.
func (t *Ticket) FirstToken() time.Duration { return t.FirstTokenAt(t.s.opts.Now()) }

// FirstTokenAt is FirstToken for a token that arrived at now (on the
// scheduler's clock), for a proxy that forwards the token before it does
// the bookkeeping.
func (t *Ticket) FirstTokenAt(now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first || t.ended {
		return 0
	}
	t.first = true
	ttft := now.Sub(t.start)
	t.Backend.queuedTokens.Add(-t.uncached)
	t.Backend.preds.observe(t.feat, ttft.Seconds())
	if t.SLO > 0 {
		t.Backend.reportSLO(now, ttft <= t.SLO, t.probe)
		t.probe = false
	}
	return ttft
}

// End finishes the request. It is idempotent.
func (t *Ticket) End(o Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	now := t.s.opts.Now()
	if !t.first {
		t.Backend.queuedTokens.Add(-t.uncached)
	}
	t.Backend.inFlight.Add(-1)
	switch o {
	case OutcomeCanceled, OutcomeNoVerdict:
		t.Backend.releaseTrial(t.trial, t.probe)
	case OutcomeFailed:
		t.Backend.reportOutcome(now, false, t.trial)
		if t.probe {
			// A probe that failed before its first token did not meet the SLO.
			t.Backend.reportSLO(now, false, true)
		}
	default:
		t.Backend.reportOutcome(now, true, t.trial)
		// A probe that ended without a first token (non-streaming) gave no
		// TTFT verdict: free the slot for the next one.
		t.Backend.releaseTrial(false, t.probe)
	}
}

// Elapsed is the time since dispatch on the scheduler's clock.
func (t *Ticket) Elapsed() time.Duration { return t.s.opts.Now().Sub(t.start) }

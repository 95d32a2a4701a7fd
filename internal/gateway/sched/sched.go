package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	// MaxTokens is the answer's token limit (max_tokens; 0: none
	// given). The wait for a slot reads a decoding answer's time left
	// against its own limit (slotTracker.perToken).
	MaxTokens int
	// Admit: a route's admission (reject or degrade) decides in Pick,
	// before anything is dispatched, by the queue-aware TTFT bound
	// (admit.go): Pick may move the request to another backend with room
	// or refuse it (a *Refused).
	Admit bool
}

// Options configure a Scheduler.
type Options struct {
	// Policy names a built-in profile (PolicyProfile; default
	// slo-predictive).
	Policy string
	// Profile, when not nil, is run instead of Policy's: a custom list of
	// plugins (its Name is then the policy label).
	Profile *ProfileSpec
	// PluginLatency, when not nil, gives the observer of each plugin's
	// duration per decision, by kind (KindFilter, KindScorer,
	// KindPicker) and plugin type; it is asked once per plugin when the
	// scheduler is built. The gateway passes the children of its
	// ttft_gateway_scheduler_plugin_duration_seconds histogram.
	PluginLatency func(kind, plugin string) Observer
	// PluginLatencyEvery times one decision in this many, at random (0 =
	// DefaultPluginLatencyEvery; 1 = every decision): timing each plugin
	// of every decision makes decisions measurably slower
	// (BenchmarkPickPluginTiming).
	PluginLatencyEvery int
	// Now is the clock (time.Now when nil); an offline evaluation passes a
	// virtual one.
	Now func() time.Time
	// Seed makes random choices reproducible (0 = from the clock).
	Seed uint64
	// Explore is the share of SLO-predictive decisions that pick a random
	// backend predicted to meet the SLO, so that every backend's estimate
	// stays fresh (default 0.03; negative disables): the explore
	// parameter of the slo-affinity-picker (which explores only with
	// requests whose prefix is cached nowhere) and of the slo-picker.
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
	// It is the breaker-filter's panic_threshold parameter.
	PanicThreshold float64
	// Shared, when not nil, hears prefix inserts and cooldown openings to
	// share with other gateway replicas (shared.go).
	Shared SharedObserver
}

// defaults fills in the defaults of unset options.
func (o *Options) defaults() {
	if o.Policy == "" {
		o.Policy = SLOPredictive
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Explore == 0 {
		o.Explore = DefaultExplore
	}
	if o.PanicThreshold == 0 {
		o.PanicThreshold = DefaultPanicThreshold
	}
	if o.BlockTokens <= 0 {
		o.BlockTokens = DefaultBlockBytes / 4
	}
	if o.PluginLatencyEvery <= 0 {
		o.PluginLatencyEvery = DefaultPluginLatencyEvery
	}
}

// DefaultPluginLatencyEvery is the default of Options.PluginLatencyEvery.
const DefaultPluginLatencyEvery = 16

// Scheduler picks backends by running its profile's plugins: filters,
// then weighted scorers, then a picker. It is safe for concurrent use;
// backends can be swapped (config reload) while requests are in flight on
// the old ones.
type Scheduler struct {
	opts     Options
	profile  *profile
	backends atomic.Pointer[[]*Backend]
	cycles   sync.Pool // *Cycle
	mu       sync.Mutex
	rng      *rand.Rand
	// decide serializes decisions with their dispatch: a pick reads the
	// backends' requests in flight and prefix indexes, and the picks
	// before it must have counted and inserted theirs. Unserialized, a
	// burst of simultaneous requests read the same loads and the same
	// empty index, and stacked on one backend or placed one new prompt
	// group on several. A decision takes microseconds, so at thousands
	// of requests a second the lock is rarely contended.
	decide sync.Mutex
	// loops: admission's feedback per route (admit_feedback.go).
	loops admitLoops
}

// New returns a scheduler running the named policy's profile, or
// opts.Profile.
func New(opts Options, backends []*Backend) (*Scheduler, error) {
	opts.defaults()
	var spec ProfileSpec
	if opts.Profile != nil {
		spec = *opts.Profile
		opts.Policy = spec.Name
	} else {
		var err error
		if spec, err = PolicyProfile(opts.Policy, opts); err != nil {
			return nil, err
		}
	}
	p, err := buildProfile(spec, opts.PluginLatency, opts.PluginLatencyEvery)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{opts: opts, profile: p, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5851F42D4C957F2D))}
	s.cycles.New = func() any { return &Cycle{s: s, cands: make([]Candidate, 0, 32)} }
	s.SetBackends(backends)
	return s, nil
}

// Policy is the policy (profile) name.
func (s *Scheduler) Policy() string { return s.opts.Policy }

// Profile returns the profile the scheduler runs.
func (s *Scheduler) Profile() ProfileSpec { return s.profile.spec }

// Describe is the profile's plugins in one line: "exclude-filter → … →
// 0.6×slo-compliance-scorer + 0.4×latency-scorer → slo-picker".
func (s *Scheduler) Describe() string { return s.profile.describe() }

// SetBackends replaces the backend set atomically. Requests in flight keep
// their *Backend; callers reuse the *Backend of an unchanged backend so its
// learned state survives a reload.
func (s *Scheduler) SetBackends(bs []*Backend) {
	cp := slices.Clone(bs)
	s.backends.Store(&cp)
}

// Backends returns the current backend set (do not modify).
func (s *Scheduler) Backends() []*Backend { return *s.backends.Load() }

// Ticket is one dispatched request. Call FirstToken when the first token
// reaches the gateway (streams only) and End exactly once when it finishes.
type Ticket struct {
	Backend    *Backend
	Policy     string
	Reason     string
	Prediction Prediction
	SLO        time.Duration
	Class      string
	MeetsSLO   bool // the prediction says P95 ≤ SLO (true without an SLO)
	// reportedU is the prompt's tokens the backend reported uncached
	// (reported: it did). scoring: the first token came and the slot
	// hypotheses are still to be scored against this request's wait
	// (scoreWaits): when the backend reports how much of the prompt it
	// had cached, or at End. (Here, in MeetsSLO's padding, and a float32,
	// exact to 16M tokens: the ticket stays in its allocation size class.)
	scoring, reported bool
	// caps: see capU.
	caps         bool
	reportedU    float32
	CachedTokens int
	Candidates   int

	s        *Scheduler
	feat     Features
	uncached int64
	start    time.Time
	// budget is the answer's tokens after the first that its max_tokens
	// allows (0: no limit given).
	budget float64
	// firstAt is when the first token came (zero before).
	firstAt time.Time
	first   bool
	ended   bool
	trial   bool
	probe   bool
	// headUS is when the response's headers came (HeadersAt), in
	// microseconds after start, plus one (0: not told). Beside the four
	// flags, in what was their padding, with caps moved beside
	// MeetsSLO: the ticket stays within its 512-byte size class.
	headUS int32
	// capU and capWork: each cache-capacity candidate's uncached tokens
	// and predicted work for this request (capacityModel), when caps.
	capU [nCap]int64
	// capPrompt is the prompt's tokens as capU counts them.
	capPrompt int64
	capWork   [nCap]float64
	// adm: admitted by Request.Admit; its first token is the route's
	// admission feedback (admit_feedback.go).
	adm admission
	mu  sync.Mutex
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
	cy := s.cycles.Get().(*Cycle)
	defer s.putCycle(cy)
	cy.req, cy.now = *req, now
	cands := cy.cands[:0]
	for _, b := range all {
		if b.serves(req.API, req.Model) {
			cands = append(cands, Candidate{b: b, scope: int32(len(cy.scope))})
			cy.scope = append(cy.scope, b)
		}
	}
	cy.cands = cands[:0] // keep what append grew
	if len(cands) == 0 {
		return nil, fmt.Errorf("model %q: %w", req.Model, ErrNoBackend)
	}
	s.decide.Lock()
	defer s.decide.Unlock()
	cands, i, reason := s.profile.run(cy, cands)
	if len(cands) == 0 {
		for _, b := range cy.scope {
			if !slices.Contains(req.Exclude, b.Spec.Name) {
				return nil, fmt.Errorf("model %q: %w", req.Model, ErrUnavailable)
			}
		}
		// Every backend serving the model was tried already.
		return nil, fmt.Errorf("model %q: %w", req.Model, ErrNoBackend)
	}
	c := &cands[i]
	// Predict for the chosen backend under every policy, so predictor
	// error and the SLO tracker see all traffic.
	if !c.predDone {
		cy.predict(c)
	}
	var adm admission
	if req.Admit {
		a, why, ad, err := s.admit(cy, c)
		if err != nil {
			return nil, err
		}
		if a != c {
			c, reason = a, why
		}
		adm = ad
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
		budget:       float64(max(req.MaxTokens-1, 0)),
		adm:          adm,
	}
	t.trial, t.probe = c.b.claim(now)
	if t.probe && reason != ReasonNoHeadroom {
		t.Reason = ReasonProbe
	}
	c.b.inFlight.Add(1)
	c.b.queuedTokens.Add(t.uncached)
	c.b.slots.dispatched(now, float64(c.uncached))
	// A prompt the backend held none of starts a prompt group there (a
	// new group, or one spilling to a second home): its root counts in
	// the backend's footprint (capacityModel.fill).
	root := c.matchDone && c.matched == 0
	if s.profile.predictive {
		t.caps = true
		t.capU = c.b.caps.uncached(req.Blocks, req.PromptTokens, s.opts.BlockTokens)
		t.capPrompt = int64(req.PromptTokens)
		t.capWork = c.b.caps.dispatched(t.capU)
		if root {
			c.b.caps.insertRoot(req.Blocks)
		} else {
			c.b.caps.insert(req.Blocks)
		}
	}
	if root {
		c.b.prefix.InsertRoot(req.Blocks)
	} else {
		c.b.prefix.Insert(req.Blocks)
	}
	s.sharedInsert(c.b, req.Blocks)
	return t, nil
}

// putCycle returns cy to the pool, dropping its references.
func (s *Scheduler) putCycle(cy *Cycle) {
	clear(cy.scope)
	cy.scope = cy.scope[:0]
	cy.req = Request{}
	s.cycles.Put(cy)
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

// HeadersAt records when the backend's response headers arrived (on the
// scheduler's clock). Where they come clearly before the first token,
// the time to them is the part of the TTFT that holds no slot at the
// backend (the network's round trip, the front end), which the queue
// bound then leaves out of the wait it prices per request ahead
// (queueBound.observeTransit). Optional; only the first call counts.
func (t *Ticket) HeadersAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.headUS == 0 && !t.first && !t.ended {
		t.headUS = int32(min(max(now.Sub(t.start).Microseconds(), 0), math.MaxInt32-1)) + 1
	}
}

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
	t.first, t.firstAt = true, now
	ttft := now.Sub(t.start)
	t.Backend.slots.firstToken(t.start, now, t.feat.InFlight, t.budget)
	if t.reported {
		t.scoreWaits()
	} else {
		t.scoring = true
	}
	t.Backend.queuedTokens.Add(-t.uncached)
	if t.caps {
		t.Backend.caps.firstToken(t.capU)
		t.Backend.caps.observe(t.capWork, ttft.Seconds())
	}
	if t.headUS != 0 {
		t.Backend.preds.bound.observeTransit(float64(t.headUS-1)/1e6, ttft.Seconds())
	}
	t.Backend.preds.observeAt(t.start, t.feat, ttft.Seconds())
	t.Backend.noteReach(int64(t.feat.InFlight))
	if t.SLO > 0 {
		if met := ttft <= t.SLO; met || t.sloVerdict() {
			t.Backend.reportSLO(now, t.start, met, t.probe, t.s.profile.predictive)
		} else {
			t.Backend.reportSLOForeseen(t.probe) // cooldown.go
		}
		if ttft > t.SLO {
			t.s.sharedCooldowns(t.Backend, now)
		}
		t.probe = false
		if t.adm.loop != nil {
			t.adm.loop.outcome(now, t.adm, ttft, t.SLO)
		}
	}
	return ttft
}

// ObserveCached records how many of the prompt's tokens the backend
// reported it took from its prefix cache (its usage's cached tokens, of
// prompt tokens by its own count), where it reports them: per-request
// evidence of what its cache holds, which the cache-capacity model
// scores each candidate's prediction against (capacityModel.
// observeCached). Backends that publish no metrics are learnt this way
// too, not only from TTFTs, once 16 answers have reported. The first
// report also gives the slot hypotheses the prefill this request was
// served (scoreWaits).
func (t *Ticket) ObserveCached(cached, prompt int) {
	if prompt <= 0 || cached < 0 || cached > prompt {
		return
	}
	t.mu.Lock()
	if !t.reported {
		// The backend's share uncached, of the prompt as this scheduler
		// counts it (its tokens and the backend's differ).
		t.reported = true
		t.reportedU = float32(float64(int64(t.CachedTokens)+t.uncached) * float64(prompt-cached) / float64(prompt))
		if t.scoring {
			t.scoreWaits()
		}
	}
	t.mu.Unlock()
	if !t.caps {
		return
	}
	t.Backend.caps.observeCached(t.capU, t.capPrompt, float64(cached)/float64(prompt))
}

// scoreWaits scores the backend's slot hypotheses against this
// request's wait (slotTracker.learnWaits), with the uncached tokens its
// backend reported where it did, else those predicted: waited for until
// the answer says, since a prediction of a cached prefix that the
// backend had evicted charges the whole prefill to the wait. Called with
// t.mu held, after the first token.
func (t *Ticket) scoreWaits() {
	t.scoring = false
	u := float64(t.uncached)
	if t.reported {
		u = float64(t.reportedU)
	}
	t.Backend.slots.learnWaits(&t.feat.Waits, u, t.firstAt.Sub(t.start).Seconds(), t.reported, t.feat.InFlight == 0)
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
	if t.scoring {
		t.scoreWaits()
	}
	if !t.first {
		t.Backend.queuedTokens.Add(-t.uncached)
		if t.caps {
			t.Backend.caps.firstToken(t.capU)
		}
	}
	t.Backend.inFlight.Add(-1)
	t.Backend.slots.ended(t.start, t.firstAt, now, o == OutcomeOK)
	switch o {
	case OutcomeCanceled, OutcomeNoVerdict:
		t.Backend.releaseTrial(t.trial, t.probe)
	case OutcomeFailed:
		t.Backend.reportOutcome(now, false, t.trial)
		t.s.sharedCooldowns(t.Backend, now)
		if t.probe {
			// A probe that failed before its first token did not meet the SLO.
			t.Backend.reportSLO(now, t.start, false, true, t.s.profile.predictive)
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

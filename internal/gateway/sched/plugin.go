package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Plugin is one step of a scheduling profile: a Filter, a Scorer or a
// Picker (exactly one of them).
type Plugin interface {
	// Type is the plugin's registered type name ("prefix-scorer"); it
	// labels the plugin's duration metric.
	Type() string
}

// Filter drops candidates that must not get the request.
type Filter interface {
	Plugin
	// Filter returns the candidates that pass, in their order. It may
	// compact cands in place and return a prefix of it; it must not
	// reorder or add candidates.
	Filter(cy *Cycle, cands []Candidate) []Candidate
}

// Scorer rates every candidate; the profile adds the scores up, each
// scorer's times its weight, and hands the totals to the picker.
type Scorer interface {
	Plugin
	// Score writes one score per candidate into scores (as long as
	// cands), higher is better. Built-in scorers score in [0, 1], so
	// that weights say how much each one counts.
	Score(cy *Cycle, cands []Candidate, scores []float64)
}

// Picker chooses one candidate from the weighted total scores.
type Picker interface {
	Plugin
	// Pick returns the chosen candidate's index and the decision's reason
	// (a metric label value, so from a small fixed set); an empty reason
	// lets the profile's scorers explain the choice (Explainer).
	Pick(cy *Cycle, cands []Candidate, scores []float64) (int, string)
}

// Explainer is implemented by scorers that can name the reason for a pick
// a picker did not name (the prefix scorer: prefix-hit, prefix-miss or
// prefix-overloaded). The first scorer of the profile that answers wins.
type Explainer interface {
	Explain(cy *Cycle, cands []Candidate, chosen int) string
}

// Plugin kinds, the kind label of the plugin duration metric.
const (
	KindFilter = "filter"
	KindScorer = "scorer"
	KindPicker = "picker"
)

// Observer receives one duration in seconds; a prometheus.Observer (a
// histogram or summary child) is one.
type Observer interface{ Observe(seconds float64) }

// Candidate is one backend being considered for a request, with what the
// profile's plugins learnt about it. Plugins get them as a slice and read
// them through Cycle's methods, which compute and cache what they need.
type Candidate struct {
	b     *Backend
	scope int32 // index in the cycle's scope

	matchDone, predDone, meetDone bool
	// overloaded: the prefix scorer's load guard discounted its prefix.
	overloaded bool
	matched    int // leading prefix blocks in the backend's index
	effective  int // of which its learnt cache capacity holds
	uncached   int // prompt tokens not covered by them
	meetP      float64
	feat       Features
	pred       Prediction
}

// Backend is the candidate's backend.
func (c *Candidate) Backend() *Backend { return c.b }

// load is in-flight requests per unit of weight: this gateway's, plus
// those other replicas report through shared state (ImportInFlight).
func load(b *Backend) float64 {
	return float64(b.inFlight.Load()+b.remoteInFlight.Load()) / b.Spec.Weight
}

// Cycle is one scheduling decision's state: the request, the clock
// reading, the backends that serve the request's model and API, and
// scratch space reused from decision to decision (a Cycle is pooled; do
// not keep it or its slices past the call).
type Cycle struct {
	s *Scheduler
	// req is a copy of the request: the pooled cycle holding the caller's
	// pointer would move every caller's Request to the heap.
	req   Request
	now   time.Time
	scope []*Backend
	cands []Candidate
	total []float64 // weighted score totals
	score []float64 // one scorer's scores
	flags []bool    // per scope backend, for filters
}

// Request is the request being scheduled.
func (cy *Cycle) Request() *Request { return &cy.req }

// Now is the decision's time on the scheduler's clock.
func (cy *Cycle) Now() time.Time { return cy.now }

// Scope is every backend that serves the request's model and API,
// including those the request excludes (already tried) and those that
// earlier filters dropped: the fleet the request could use.
func (cy *Cycle) Scope() []*Backend { return cy.scope }

// Float64 is a random number in [0, 1) from the scheduler's seeded source.
func (cy *Cycle) Float64() float64 { return cy.s.float() }

// IntN is a random number in [0, n) from the scheduler's seeded source.
func (cy *Cycle) IntN(n int) int { return cy.s.intn(n) }

// Match returns how many leading blocks of the request's prompt the
// candidate's prefix index holds (computed once per decision).
func (cy *Cycle) Match(c *Candidate) int {
	if !c.matchDone {
		cy.match(c)
	}
	return c.matched
}

func (cy *Cycle) match(c *Candidate) {
	c.matched = c.b.prefix.Match(cy.req.Blocks)
	// What the backend is predicted to compute is bounded by the cache
	// capacity learnt for it (capacityModel), not by the index alone.
	eff := c.matched
	if int(c.b.caps.active.Load()) != nCap-1 {
		eff = min(c.b.caps.activeMatch(cy.req.Blocks), eff)
	}
	c.effective = eff
	c.uncached = max(cy.req.PromptTokens-eff*cy.s.opts.BlockTokens, 0)
	c.matchDone = true
}

// Predict returns the candidate's TTFT prediction for the request, from
// its features now (computed once per decision).
func (cy *Cycle) Predict(c *Candidate) Prediction {
	if !c.predDone {
		cy.predict(c)
	}
	return c.pred
}

// predict fills in c.feat and c.pred (scorers read c.pred in place).
func (cy *Cycle) predict(c *Candidate) {
	if !c.matchDone {
		cy.match(c)
	}
	c.feat = c.b.features(cy.req.PromptTokens, c.uncached)
	c.b.slots.waits(cy.now, &c.feat.Waits)
	c.pred = c.b.preds.predict(c.feat)
	// A policy that predicts also reads the queue-aware bound
	// (queuedSpill), which learns only once asked for.
	if qb := c.b.preds.bound; !qb.on.Load() {
		qb.on.Store(true)
	}
	c.predDone = true
}

// MeetProbability is the predicted probability that the candidate meets
// the request's SLO: 1 without an SLO or without a ready prediction
// (optimism under uncertainty: an unmeasured backend is tried, which is
// how it gets measured).
func (cy *Cycle) MeetProbability(c *Candidate) float64 {
	if !c.meetDone {
		cy.meet(c)
	}
	return c.meetP
}

func (cy *Cycle) meet(c *Candidate) {
	if !c.predDone {
		cy.predict(c)
	}
	c.meetP = 1
	if c.pred.Ready {
		c.meetP = meetProbability(c.pred, cy.req.SLO)
	}
	c.meetDone = true
}

// bools returns n cleared scratch booleans.
func (cy *Cycle) bools(n int) []bool {
	if cap(cy.flags) < n {
		cy.flags = make([]bool, n)
	}
	cy.flags = cy.flags[:n]
	clear(cy.flags)
	return cy.flags
}

// floats returns scratch for n weighted totals and n scores (not cleared).
func (cy *Cycle) floats(n int) (total, score []float64) {
	if cap(cy.total) < n {
		cy.total, cy.score = make([]float64, n), make([]float64, n)
	}
	cy.total, cy.score = cy.total[:n], cy.score[:n]
	return cy.total, cy.score
}

// Params are a plugin's parameters, as decoded from YAML or JSON.
type Params map[string]any

// Float returns the number at key, def when absent.
func (p Params) Float(key string, def float64) (float64, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	default:
		return 0, fmt.Errorf("%s: want a number, got %v", key, v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: want a finite number, got %v", key, v)
	}
	return f, nil
}

// String returns the string at key, def when absent.
func (p Params) String(key, def string) (string, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: want a string, got %v", key, v)
	}
	return s, nil
}

// Only returns an error naming the first key (in sorted order) not among
// known: a misspelt parameter is an error, not silently ignored.
func (p Params) Only(known ...string) error {
	var unknown []string
	for k := range p {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	if len(known) == 0 {
		return fmt.Errorf("unknown parameter %q (it takes none)", unknown[0])
	}
	return fmt.Errorf("unknown parameter %q (want %s)", unknown[0], strings.Join(known, ", "))
}

// Factory builds a plugin from its parameters.
type Factory func(Params) (Plugin, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Factory{}
)

// Register makes a plugin type available to profiles (call it from an
// init function). It panics if the type is already registered.
func Register(typ string, f Factory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[typ]; dup {
		panic("sched: plugin type " + typ + " registered twice")
	}
	registry[typ] = f
}

// PluginTypes lists the registered plugin types, sorted.
func PluginTypes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var ts []string
	for t := range registry {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// PluginSpec configures one plugin of a profile.
type PluginSpec struct {
	Type string `yaml:"type" json:"type"`
	// Weight multiplies a scorer's scores (default 1; scorers only).
	Weight float64 `yaml:"weight,omitempty" json:"weight,omitempty"`
	Params Params  `yaml:"params,omitempty" json:"params,omitempty"`
}

// ProfileSpec is a scheduling profile as configuration: its name (the
// policy label of decisions) and its plugins. Filters run in the order
// listed, then every scorer, then the one picker.
type ProfileSpec struct {
	Name    string       `yaml:"name" json:"name"`
	Plugins []PluginSpec `yaml:"plugins" json:"plugins"`
}

// step is one built plugin with its duration observer (nil: not timed).
type step[P Plugin] struct {
	p   P
	obs Observer
}

type weightedScorer struct {
	step[Scorer]
	weight float64
}

// profile is a ProfileSpec built: its plugins, ready to run.
type profile struct {
	spec       ProfileSpec
	filters    []step[Filter]
	scorers    []weightedScorer
	picker     step[Picker]
	explainers []Explainer
	timed      bool // the plugins have duration observers
	// predictive: a plugin routes by TTFT predictions, so the backends'
	// cache capacities are learnt (capacityModel); it costs a few
	// microseconds per decision that other policies need not pay.
	predictive bool
	every      uint32 // time one decision in every
}

// buildProfile builds spec's plugins from their factories; latency, when
// not nil, gives each plugin's duration observer, and one decision in
// every is timed.
func buildProfile(spec ProfileSpec, latency func(kind, plugin string) Observer, every int) (*profile, error) {
	if spec.Name == "" {
		return nil, fmt.Errorf("profile: no name")
	}
	p := &profile{spec: spec, every: uint32(max(every, 1))}
	obs := func(kind, typ string) Observer {
		if latency == nil {
			return nil
		}
		o := latency(kind, typ)
		if o != nil {
			p.timed = true
		}
		return o
	}
	pickers := 0
	for i, ps := range spec.Plugins {
		registryMu.RLock()
		f := registry[ps.Type]
		registryMu.RUnlock()
		if f == nil {
			return nil, fmt.Errorf("profile %s: plugins[%d]: unknown plugin type %q (want one of %s)", spec.Name, i, ps.Type, strings.Join(PluginTypes(), ", "))
		}
		pl, err := f(ps.Params)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %s: %w", spec.Name, ps.Type, err)
		}
		if ps.Weight != 0 {
			if _, ok := pl.(Scorer); !ok {
				return nil, fmt.Errorf("profile %s: %s: only scorers take a weight", spec.Name, ps.Type)
			}
		}
		switch ps.Type {
		case SLOAffinityPickerType, SLOPickerType, LatencyScorerType, SLOComplianceScorerType:
			p.predictive = true
		case PrefixScorerType:
			if lc, _ := ps.Params.Float("learned_capacity", 0); lc != 0 {
				p.predictive = true
			}
		}
		switch x := pl.(type) {
		case Filter:
			p.filters = append(p.filters, step[Filter]{x, obs(KindFilter, ps.Type)})
		case Scorer:
			w := ps.Weight
			if w == 0 {
				w = 1
			}
			if !(w > 0) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("profile %s: %s: weight %v is not a positive number", spec.Name, ps.Type, ps.Weight)
			}
			p.scorers = append(p.scorers, weightedScorer{step[Scorer]{x, obs(KindScorer, ps.Type)}, w})
			if e, ok := pl.(Explainer); ok {
				p.explainers = append(p.explainers, e)
			}
		case Picker:
			pickers++
			p.picker = step[Picker]{x, obs(KindPicker, ps.Type)}
		default:
			return nil, fmt.Errorf("profile %s: %s is neither a filter, a scorer nor a picker", spec.Name, ps.Type)
		}
	}
	if pickers != 1 {
		return nil, fmt.Errorf("profile %s: want exactly one picker, got %d", spec.Name, pickers)
	}
	if p.timed {
		// Every step then reads the clock once, so that each one's
		// duration starts where the previous one's ended.
		for i := range p.filters {
			p.filters[i].obs = orNop(p.filters[i].obs)
		}
		for i := range p.scorers {
			p.scorers[i].obs = orNop(p.scorers[i].obs)
		}
		p.picker.obs = orNop(p.picker.obs)
	}
	return p, nil
}

type nopObserver struct{}

func (nopObserver) Observe(float64) {}

func orNop(o Observer) Observer {
	if o == nil {
		return nopObserver{}
	}
	return o
}

// describe is the profile in one line: "filter → filter → 0.6×scorer +
// 0.4×scorer → picker".
func (p *profile) describe() string {
	var parts []string
	for _, f := range p.filters {
		parts = append(parts, f.p.Type())
	}
	var scorers []string
	for _, sc := range p.scorers {
		scorers = append(scorers, fmt.Sprintf("%g×%s", sc.weight, sc.p.Type()))
	}
	if len(scorers) > 0 {
		parts = append(parts, strings.Join(scorers, " + "))
	}
	return strings.Join(append(parts, p.picker.p.Type()), " → ")
}

// run filters cands, scores what is left and picks one. It returns the
// remaining candidates and the chosen one's index (-1 when the filters
// left none).
func (p *profile) run(cy *Cycle, cands []Candidate) ([]Candidate, int, string) {
	// Reading the clock around every plugin of every decision costs
	// about 1 µs of a 16-backend slo-predictive decision's 5
	// (BenchmarkPickPluginTiming); a sample of the decisions (drawn from
	// the runtime's per-thread source, not the scheduler's seeded one)
	// costs nothing measurable and still gives each plugin's distribution.
	timed := p.timed && (p.every == 1 || rand.Uint32()%p.every == 0)
	var t0 time.Time
	if timed {
		t0 = time.Now()
	}
	for i := range p.filters {
		f := &p.filters[i]
		cands = f.p.Filter(cy, cands)
		if timed {
			t0 = since(f.obs, t0)
		}
		if len(cands) == 0 {
			return cands, -1, ""
		}
	}
	total, score := cy.floats(len(cands))
	if len(p.scorers) == 0 {
		clear(total)
	}
	for i := range p.scorers {
		sc := &p.scorers[i]
		sc.p.Score(cy, cands, score)
		w := sc.weight
		if i == 0 {
			for j, v := range score {
				total[j] = w * v
			}
		} else {
			for j, v := range score {
				total[j] += w * v
			}
		}
		if timed {
			t0 = since(sc.obs, t0)
		}
	}
	chosen, reason := p.picker.p.Pick(cy, cands, total)
	if timed {
		since(p.picker.obs, t0)
	}
	for _, e := range p.explainers {
		if reason != "" {
			break
		}
		reason = e.Explain(cy, cands, chosen)
	}
	return cands, chosen, reason
}

// since observes the time from t0 and returns now.
func since(o Observer, t0 time.Time) time.Time {
	t := time.Now()
	o.Observe(t.Sub(t0).Seconds())
	return t
}

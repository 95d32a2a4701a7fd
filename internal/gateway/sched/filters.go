package sched

import "slices"

// Filter plugin types.
const (
	ExcludeFilterType     = "exclude-filter"
	HealthFilterType      = "health-filter"
	CapacityFilterType    = "capacity-filter"
	BreakerFilterType     = "breaker-filter"
	SLODemotionFilterType = "slo-demotion-filter"
)

// DefaultPanicThreshold is the breaker filter's default panic threshold.
const DefaultPanicThreshold = 0.5

var (
	_ Filter = excludeFilter{}
	_ Filter = healthFilter{}
	_ Filter = capacityFilter{}
	_ Filter = (*breakerFilter)(nil)
	_ Filter = sloDemotionFilter{}
)

func init() {
	Register(ExcludeFilterType, noParams(excludeFilter{}))
	Register(HealthFilterType, noParams(healthFilter{}))
	Register(CapacityFilterType, noParams(capacityFilter{}))
	Register(BreakerFilterType, newBreakerFilter)
	Register(SLODemotionFilterType, noParams(sloDemotionFilter{}))
}

// noParams is the factory of a plugin without parameters.
func noParams(p Plugin) Factory {
	return func(ps Params) (Plugin, error) {
		if err := ps.Only(); err != nil {
			return nil, err
		}
		return p, nil
	}
}

// excludeFilter drops the backends the request already tried (retries).
type excludeFilter struct{}

func (excludeFilter) Type() string { return ExcludeFilterType }

func (excludeFilter) Filter(cy *Cycle, cands []Candidate) []Candidate {
	ex := cy.req.Exclude
	if len(ex) == 0 {
		return cands
	}
	n := 0
	for i := range cands {
		if !slices.Contains(ex, cands[i].b.Spec.Name) {
			keep(cands, n, i)
			n++
		}
	}
	return cands[:n]
}

// healthFilter drops backends the active health checks found down.
type healthFilter struct{}

func (healthFilter) Type() string { return HealthFilterType }

func (healthFilter) Filter(_ *Cycle, cands []Candidate) []Candidate {
	n := 0
	for i := range cands {
		if cands[i].b.Healthy() {
			keep(cands, n, i)
			n++
		}
	}
	return cands[:n]
}

// capacityFilter drops backends at their max_concurrency.
type capacityFilter struct{}

func (capacityFilter) Type() string { return CapacityFilterType }

func (capacityFilter) Filter(_ *Cycle, cands []Candidate) []Candidate {
	n := 0
	for i := range cands {
		b := cands[i].b
		if mc := b.Spec.MaxConcurrency; mc <= 0 || b.inFlight.Load() < int64(mc) {
			keep(cands, n, i)
			n++
		}
	}
	return cands[:n]
}

// breakerFilter drops backends whose circuit breaker is open (or
// half-open with its trial in flight) — unless fewer than panicThreshold
// of the request's scope (the backends serving its model and API, those it
// excludes included) are available (healthy, breaker admitting): then
// breakers are ignored, as with Envoy's healthy panic threshold. A burst
// of failures (many of them the requests' own) must not take a whole
// fleet out of rotation and answer 503 to requests that would succeed.
// A threshold ≤ 0 turns panic routing off.
type breakerFilter struct{ panicThreshold float64 }

func newBreakerFilter(ps Params) (Plugin, error) {
	if err := ps.Only("panic_threshold"); err != nil {
		return nil, err
	}
	pt, err := ps.Float("panic_threshold", DefaultPanicThreshold)
	if err != nil {
		return nil, err
	}
	return &breakerFilter{panicThreshold: pt}, nil
}

func (*breakerFilter) Type() string { return BreakerFilterType }

func (f *breakerFilter) Filter(cy *Cycle, cands []Candidate) []Candidate {
	// The threshold is a property of the fleet, not of this request's
	// retries: every backend of the scope counts.
	ok := cy.bools(len(cy.scope))
	avail := 0
	for i, b := range cy.scope {
		if ok[i] = b.admissible(cy.now); ok[i] {
			avail++
		}
	}
	if pt := f.panicThreshold; pt > 0 && float64(avail) < pt*float64(len(cy.scope)) {
		return cands
	}
	n := 0
	for i := range cands {
		if ok[cands[i].scope] {
			keep(cands, n, i)
			n++
		}
	}
	return cands[:n]
}

// sloDemotionFilter drops backends the SLO tracker demoted, unless that
// leaves fewer than half of them. A half-open backend with its probe
// slot free passes, and the request becomes its probe if picked.
//
// Not below half: demotion is for a backend that misses the SLO where it
// was predicted to meet it, while the others do not. When most of the
// fleet misses at once, the load is the cause (answers holding every
// slot, a burst), and moving all of it onto what is left makes that
// worse: on four stand-ins with long answers, three demoted together
// left one to take every request, fifteen deep, for a second or more
// (fleet long-decode, a per-seed P99 of 265 ms where the others were
// 55–110; docs/routing-evaluation.md).
type sloDemotionFilter struct{}

func (sloDemotionFilter) Type() string { return SLODemotionFilterType }

func (sloDemotionFilter) Filter(cy *Cycle, cands []Candidate) []Candidate {
	// One look at each backend's state (a lock each): the first 64 are
	// remembered, any further looked at again.
	var mask uint64
	ok := 0
	for i := range cands {
		if cands[i].b.sloOK(cy.now) {
			ok++
			if i < 64 {
				mask |= 1 << i
			}
		}
	}
	if 2*ok < len(cands) {
		return cands
	}
	n := 0
	for i := range cands {
		if i < 64 && mask&(1<<i) != 0 || i >= 64 && cands[i].b.sloOK(cy.now) {
			keep(cands, n, i)
			n++
		}
	}
	if n == 0 {
		return cands // nothing was moved (demoted since the count)
	}
	return cands[:n]
}

// keep moves candidate i to slot n (n ≤ i) of a filter's compaction. A
// Candidate is large and holds pointers, so a copy onto itself is worth
// skipping: in the common case a filter drops nothing and copies nothing.
func keep(cands []Candidate, n, i int) {
	if n != i {
		cands[n] = cands[i]
	}
}

package sched

import "time"

// Scorer plugin types.
const (
	LoadScorerType          = "load-scorer"
	PrefixScorerType        = "prefix-scorer"
	SLOComplianceScorerType = "slo-compliance-scorer"
	LatencyScorerType       = "latency-scorer"
)

var (
	_ Scorer    = loadScorer{}
	_ Explainer = loadScorer{}
	_ Scorer    = (*prefixScorer)(nil)
	_ Explainer = (*prefixScorer)(nil)
	_ Scorer    = sloComplianceScorer{}
	_ Scorer    = latencyScorer{}
)

func init() {
	Register(LoadScorerType, noParams(loadScorer{}))
	Register(PrefixScorerType, newPrefixScorer)
	Register(SLOComplianceScorerType, noParams(sloComplianceScorer{}))
	Register(LatencyScorerType, noParams(latencyScorer{}))
}

// loadScorer prefers the least loaded backend: 1/(1 + in-flight requests
// per unit of weight), 1 when idle.
type loadScorer struct{}

func (loadScorer) Type() string { return LoadScorerType }

func (loadScorer) Score(_ *Cycle, cands []Candidate, scores []float64) {
	for i := range cands {
		scores[i] = 1 / (1 + load(cands[i].b))
	}
}

func (loadScorer) Explain(*Cycle, []Candidate, int) string { return ReasonLeastLoad }

// prefixScorer prefers the backend holding the longest prefix of the
// prompt in its prefix index: the share of the prompt's blocks matched.
//
// With an overload guard (overload_factor > 0), a backend much busier than
// the least busy candidate — load > factor·least + slack — scores as a
// miss (0): a warm cache does not help behind a long queue.
//
// With learned_capacity, a backend is credited mainly with the blocks its
// learnt cache capacity still holds (capacityModel), not every block the
// index remembers sending it.
type prefixScorer struct {
	overloadFactor, overloadSlack float64
	learned                       bool
}

func newPrefixScorer(ps Params) (Plugin, error) {
	if err := ps.Only("overload_factor", "overload_slack", "learned_capacity"); err != nil {
		return nil, err
	}
	lc, err := ps.Float("learned_capacity", 0)
	if err != nil {
		return nil, err
	}
	f, err := ps.Float("overload_factor", 0)
	if err != nil {
		return nil, err
	}
	s, err := ps.Float("overload_slack", 0)
	if err != nil {
		return nil, err
	}
	return &prefixScorer{overloadFactor: f, overloadSlack: s, learned: lc != 0}, nil
}

func (*prefixScorer) Type() string { return PrefixScorerType }

func (p *prefixScorer) Score(cy *Cycle, cands []Candidate, scores []float64) {
	guard := p.overloadFactor > 0
	minLoad := -1.0
	for i := range cands {
		cy.Match(&cands[i])
		if guard {
			if l := load(cands[i].b); minLoad < 0 || l < minLoad {
				minLoad = l
			}
		}
	}
	n := float64(len(cy.req.Blocks))
	for i := range cands {
		c := &cands[i]
		c.overloaded = guard && c.matched > 0 && load(c.b) > p.overloadFactor*minLoad+p.overloadSlack
		if c.overloaded || c.matched == 0 {
			scores[i] = 0
			continue
		}
		if p.learned {
			// Mostly what the learnt capacity still holds; the rest of
			// the index breaks ties, so that a prompt group whose blocks
			// the capacity model counts as evicted everywhere still goes
			// back to where it was last sent rather than anywhere.
			scores[i] = (0.9*float64(c.effective) + 0.1*float64(c.matched)) / n
			continue
		}
		scores[i] = float64(c.matched) / n
	}
}

func (*prefixScorer) Explain(_ *Cycle, cands []Candidate, chosen int) string {
	if c := &cands[chosen]; c.matched > 0 && !c.overloaded {
		return ReasonPrefixHit
	}
	for i := range cands {
		if cands[i].overloaded {
			return ReasonOverloaded
		}
	}
	return ReasonPrefixMiss
}

// sloComplianceScorer is the compliance half of the article's sla-weighted
// score (§4.3): the backend's recent SLO attainment times the predicted
// probability of meeting this request's SLO (Cycle.MeetProbability).
type sloComplianceScorer struct{}

func (sloComplianceScorer) Type() string { return SLOComplianceScorerType }

func (sloComplianceScorer) Score(cy *Cycle, cands []Candidate, scores []float64) {
	for i := range cands {
		c := &cands[i]
		p := cy.MeetProbability(c)
		scores[i] = c.b.attainment() * p
	}
}

// latencyScorer is the latency half of the sla-weighted score: the inverse
// of the latency score, the fastest candidate's predicted mean TTFT over
// this one's (1 for the fastest, and for a prediction of 0).
type latencyScorer struct{}

func (latencyScorer) Type() string { return LatencyScorerType }

func (latencyScorer) Score(cy *Cycle, cands []Candidate, scores []float64) {
	minMean := time.Duration(-1)
	for i := range cands {
		c := &cands[i]
		if !c.predDone {
			cy.predict(c)
		}
		if m := c.pred.Mean; minMean < 0 || m < minMean {
			minMean = m
		}
	}
	for i := range cands {
		scores[i] = 1
		if m := cands[i].pred.Mean; m > 0 {
			scores[i] = float64(max(minMean, time.Microsecond)) / float64(m)
		}
	}
}

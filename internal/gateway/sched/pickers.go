package sched

import (
	"fmt"
	"sync/atomic"
)

// Picker plugin types.
const (
	RoundRobinPickerType = "round-robin-picker"
	RandomPickerType     = "random-picker"
	MaxScorePickerType   = "max-score-picker"
	TwoChoicesPickerType = "two-choices-picker"
	SLOPickerType        = "slo-picker"
)

// Tie-breaks of the max-score picker.
const (
	TieFirst     = "first"      // the first candidate (in the scheduler's backend order)
	TieRotation  = "rotation"   // the first from a rotating offset, so that ties spread
	TieLeastLoad = "least-load" // the least loaded, then as rotation
)

// DefaultExplore is the SLO picker's default exploration share.
const DefaultExplore = 0.03

// meetThreshold is the predicted probability of meeting the SLO above
// which a backend counts as having headroom.
const meetThreshold = 0.95

var (
	_ Picker = (*roundRobinPicker)(nil)
	_ Picker = randomPicker{}
	_ Picker = (*maxScorePicker)(nil)
	_ Picker = twoChoicesPicker{}
	_ Picker = (*sloPicker)(nil)
)

func init() {
	Register(RoundRobinPickerType, func(ps Params) (Plugin, error) {
		if err := ps.Only(); err != nil {
			return nil, err
		}
		return &roundRobinPicker{}, nil // a counter of its own
	})
	Register(RandomPickerType, noParams(randomPicker{}))
	Register(MaxScorePickerType, newMaxScorePicker)
	Register(TwoChoicesPickerType, noParams(twoChoicesPicker{}))
	Register(SLOPickerType, newSLOPicker)
}

// roundRobinPicker takes the candidates in turn, each as many times in a
// row as its weight (rounded, at least 1); scores are not used.
type roundRobinPicker struct{ rr atomic.Uint64 }

func (*roundRobinPicker) Type() string { return RoundRobinPickerType }

func (p *roundRobinPicker) Pick(_ *Cycle, cands []Candidate, _ []float64) (int, string) {
	total := 0
	for i := range cands {
		total += max(int(cands[i].b.Spec.Weight+0.5), 1)
	}
	k := int((p.rr.Add(1) - 1) % uint64(total))
	for i := range cands {
		k -= max(int(cands[i].b.Spec.Weight+0.5), 1)
		if k < 0 {
			return i, ReasonRotation
		}
	}
	return len(cands) - 1, ReasonRotation
}

// randomPicker picks at random, in proportion to the backends' weights;
// scores are not used.
type randomPicker struct{}

func (randomPicker) Type() string { return RandomPickerType }

func (randomPicker) Pick(cy *Cycle, cands []Candidate, _ []float64) (int, string) {
	total := 0.0
	for i := range cands {
		total += cands[i].b.Spec.Weight
	}
	x := cy.Float64() * total
	for i := range cands {
		x -= cands[i].b.Spec.Weight
		if x < 0 {
			return i, ReasonRandom
		}
	}
	return len(cands) - 1, ReasonRandom
}

// maxScorePicker picks the highest total score, breaking ties as tieBreak
// says (TieFirst, TieRotation, TieLeastLoad). Its reason comes from the
// profile's scorers.
type maxScorePicker struct {
	tieBreak string
	rr       atomic.Uint64
}

func newMaxScorePicker(ps Params) (Plugin, error) {
	if err := ps.Only("tie_break"); err != nil {
		return nil, err
	}
	tb, err := ps.String("tie_break", TieRotation)
	if err != nil {
		return nil, err
	}
	switch tb {
	case TieFirst, TieRotation, TieLeastLoad:
	default:
		return nil, fmt.Errorf("tie_break: %q is not %s, %s or %s", tb, TieFirst, TieRotation, TieLeastLoad)
	}
	return &maxScorePicker{tieBreak: tb}, nil
}

func (*maxScorePicker) Type() string { return MaxScorePickerType }

func (p *maxScorePicker) Pick(_ *Cycle, cands []Candidate, scores []float64) (int, string) {
	if p.tieBreak == TieFirst {
		return argmax(scores), ""
	}
	n := len(cands)
	off := int(p.rr.Add(1) % uint64(n))
	best := -1
	for k := range n {
		i := off + k
		if i >= n {
			i -= n
		}
		switch {
		case best < 0 || scores[i] > scores[best]:
			best = i
		case p.tieBreak == TieLeastLoad && scores[i] == scores[best] && load(cands[i].b) < load(cands[best].b):
			best = i
		}
	}
	return best, ""
}

// argmax is the index of the first highest score.
func argmax(scores []float64) int {
	best := 0
	for i, s := range scores {
		if s > scores[best] {
			best = i
		}
	}
	return best
}

// twoChoicesPicker is the power of two choices: of two candidates drawn at
// random, the one with the higher score (the first drawn on a tie). Its
// reason comes from the profile's scorers.
type twoChoicesPicker struct{}

func (twoChoicesPicker) Type() string { return TwoChoicesPickerType }

func (twoChoicesPicker) Pick(cy *Cycle, cands []Candidate, scores []float64) (int, string) {
	if len(cands) == 1 {
		return 0, ""
	}
	a := cy.IntN(len(cands))
	b := cy.IntN(len(cands) - 1)
	if b >= a {
		b++
	}
	if scores[b] > scores[a] {
		return b, ""
	}
	return a, ""
}

// sloPicker picks the highest score (the first on a tie) with reason
// headroom when some candidate is predicted to meet the SLO
// (Cycle.MeetProbability ≥ 0.95), no-headroom when none is. In a share
// explore of the decisions with headroom it picks instead a random
// candidate among those predicted to meet the SLO (reason explore), so
// that every backend's estimate stays fresh at no cost in violations.
type sloPicker struct{ explore float64 }

func newSLOPicker(ps Params) (Plugin, error) {
	e, err := exploreParam(ps)
	if err != nil {
		return nil, err
	}
	return &sloPicker{explore: e}, nil
}

// exploreParam is the one parameter of the pickers that explore: the
// share of decisions sent to a random eligible backend, in [0, 1].
func exploreParam(ps Params) (float64, error) {
	if err := ps.Only("explore"); err != nil {
		return 0, err
	}
	e, err := ps.Float("explore", DefaultExplore)
	if err != nil {
		return 0, err
	}
	if e > 1 {
		return 0, fmt.Errorf("explore: %v is above 1", e)
	}
	return e, nil
}

func (*sloPicker) Type() string { return SLOPickerType }

func (p *sloPicker) Pick(cy *Cycle, cands []Candidate, scores []float64) (int, string) {
	best, meets := 0, 0
	for i := range cands {
		if scores[i] > scores[best] {
			best = i
		}
		if cy.MeetProbability(&cands[i]) >= meetThreshold {
			meets++
		}
	}
	if meets == 0 {
		return best, ReasonNoHeadroom
	}
	if p.explore > 0 && len(cands) > 1 && cy.Float64() < p.explore {
		k := cy.IntN(meets)
		for i := range cands {
			if cands[i].meetP >= meetThreshold {
				if k == 0 {
					return i, ReasonExplore
				}
				k--
			}
		}
	}
	return best, ReasonHeadroom
}

package sched

import "sync/atomic"

// SLOAffinityPickerType is the picker of the default policy.
const SLOAffinityPickerType = "slo-affinity-picker"

var _ Picker = (*sloAffinityPicker)(nil)

// spillBelow is the predicted probability of meeting the SLO under which
// the affinity backend gives a request up: 0.5 is a predicted mean at the
// SLO (meetProbability).
const spillBelow = 0.5

// spillSlower is how many times slower than the fastest candidate the
// affinity backend must be predicted to be for a request to leave it
// while it still meets the SLO.
const spillSlower = 2

// replicaSlack: see Pick.
const replicaSlack = 1

func init() { Register(SLOAffinityPickerType, newSLOAffinityPicker) }

// sloAffinityPicker keeps each prompt where its prefix is cached while
// that backend is predicted to meet the SLO, and otherwise sends it to a
// backend predicted to meet it (the one holding most of the prompt, then
// the fastest) where the move pays for itself (spill). Its scores are the affinity: the prefix scorer's share of
// the prompt in each backend's index.
//
// Why not pick the predicted-fastest backend for every request, as the
// sla-weighted score does: that choice is myopic. A request sent away
// from its prefix's backend to save a few milliseconds of queueing pays a
// full prefill elsewhere and evicts another group's prefix there, a cost
// that the next requests pay and that no per-request prediction sees; on
// caches smaller than the working set, spreading every group over every
// backend made the P99 worse than round-robin's (issue 17). Affinity
// with an SLO-priced spill keeps the working set of each backend small
// and still moves work off a backend that has become slow or congested.
//
// The affinity backend is the one with the highest affinity score (ties:
// the least loaded; for a new prompt group then the least index
// footprint per unit of speed, tiedBetter; then in turn). New prompt
// groups are thereby spread by load first, as prefix affinity spreads
// them: placing them by predicted latency alone piled them onto the fast
// backends, whose caches then held more groups than fit (a cost no
// prediction of this request's TTFT sees). A
// share explore of the requests whose prefix is cached nowhere go to a
// random backend predicted to meet the SLO instead: new
// groups cost a prefill wherever they go, so exploring with them keeps
// every backend's predictions fresh without giving up a cached prefix.
type sloAffinityPicker struct {
	explore float64
	// rr counts picks.
	rr atomic.Uint64
}

func newSLOAffinityPicker(ps Params) (Plugin, error) {
	e, err := exploreParam(ps)
	if err != nil {
		return nil, err
	}
	return &sloAffinityPicker{explore: e}, nil
}

func (*sloAffinityPicker) Type() string { return SLOAffinityPickerType }

func (p *sloAffinityPicker) Pick(cy *Cycle, cands []Candidate, scores []float64) (int, string) {
	// Scan from a rotating offset, so that candidates tied on every
	// count (a cold start: no prefix, one prior prediction, no load)
	// take new prompt groups in turn rather than all on the first.
	//
	// Replicas that share state (sharedstate) start their scans rank·n/N
	// apart: on a cold fleet their simultaneous first picks then cover the
	// backends evenly instead of colliding as often as random placement
	// would — until each other's requests in flight are heard of (load
	// counts them), the only thing that keeps them apart. Behind a
	// round-robin balancer the replicas' pick counts advance together,
	// so the stagger holds.
	//
	// Replicas also count a backend as tied with a less loaded one when
	// it is within replicaSlack requests of it: the loads they share are
	// milliseconds old, and replicas that decide in the same instant on
	// the same view would otherwise all pick the same least-loaded
	// backend (clients that finish together send together).
	n := len(cands)
	r := p.rr.Add(1)
	slack := 0.0
	if rank, reps := cy.s.replicaSlot(); reps > 1 {
		r += uint64(rank * n / reps)
		slack = replicaSlack
	} else {
		// A gateway that knows of no other replica starts its rotation
		// where its scheduler's seed says (Options.Seed; from the clock
		// when unset): replicated gateways that all began at 0 sent
		// their first new groups to the same backends, whose cold
		// prefills then queued (sharedstate's replica test), while a
		// seeded gateway must place a run's groups alike every time it
		// is given the same seed (the live evaluation's reproducibility).
		r += rotationBase(cy.s.opts.Seed)
	}
	off := int(r % uint64(n))
	aff, fastest, meets := off, off, 0
	for k := range n {
		i := off + k
		if i >= n {
			i -= n
		}
		c := &cands[i]
		cy.Predict(c)
		if scores[i] > scores[aff] || (scores[i] == scores[aff] && tiedBetter(cy, c, &cands[aff], scores[i] == 0 && slack == 0, slack)) {
			aff = i
		}
		if cy.MeetProbability(c) >= meetThreshold {
			meets++
		}
		if better(cy, c, &cands[fastest]) {
			fastest = i
		}
	}
	if scores[aff] == 0 && meets > 0 && p.explore > 0 && len(cands) > 1 && cy.Float64() < p.explore {
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
	// Stay unless the affinity backend is predicted to miss the SLO more
	// likely than not (its predicted mean is over the SLO) and another
	// is predicted to meet it: the P95 margin of the headroom test would
	// spill on every queueing blip, which is what thrashes small caches,
	// and a request that misses its SLO anywhere (a long unique prompt)
	// would only evict another backend's prefixes by moving.
	//
	// Or when the affinity backend is predicted more than spillSlower
	// times slower than the fastest, which is predicted to meet the SLO:
	// a cached prefix on a much slower backend (an A10G beside H100s)
	// loses to a full prefill on a fast one, and the prompt group
	// follows the request there (its blocks are then indexed on both).
	//
	// Either way, only where the move pays for itself (spill).
	a, f := &cands[aff], &cands[fastest]
	slower := f.pred.Ready && a.pred.Ready && float64(a.pred.Mean) > spillSlower*float64(f.pred.Mean)
	if (a.meetP < spillBelow || slower) && f.meetP >= meetThreshold {
		if to := spill(cy, cands, scores, aff, slower); to >= 0 {
			return to, ReasonHeadroom
		}
	}
	switch {
	case scores[aff] > 0:
		return aff, ReasonPrefixHit
	case cands[aff].meetP >= meetThreshold:
		return aff, ReasonHeadroom
	}
	return aff, ReasonNoHeadroom
}

// tiedBetter reports whether c makes a better affinity backend than the
// current one, b, tied with it on the prefix score: less loaded (by more
// than slack), then — for a new prompt group (spread) — equally loaded
// and with the smaller footprint: fewer blocks in its prefix index per
// unit of speed. The scan's rotation breaks what remains tied.
//
// Placing new groups by load alone left their spread to the rotation's
// position when each arrived, in effect to chance: at a cold start every
// backend is idle, and a backend could take several groups while another
// took none — on an engine that keeps a few prompts (an Ollama instance's
// four cache slots) the groups then evict each other, and a slow
// backend's misses are the slowest. Among backends equally loaded, the
// one whose index holds least for its speed has the most room in its
// cache for one more prompt group and the most time to serve it. Replicas do not use it (spread is
// false): their indexes converge (sharedstate) and they would all place
// simultaneous new groups on the same backend instead of staggering.
func tiedBetter(cy *Cycle, c, b *Candidate, spread bool, slack float64) bool {
	lc, lb := load(c.b), load(b.b)
	if lc+slack < lb {
		return true
	}
	return spread && lc == lb && footprint(cy, c) < footprint(cy, b)
}

// footprint prices placing a new prompt group on c: the blocks c's index
// would then hold, times c's predicted TTFT for the request — its cache
// room per unit of its speed, so that a backend twice as fast takes
// about twice the groups before the two tie (the predictions of idle
// backends, before they have data, are one prior: the index alone).
func footprint(cy *Cycle, c *Candidate) float64 {
	return float64(c.b.prefix.Len()+len(cy.req.Blocks)) * max(c.pred.Mean.Seconds(), 1e-6)
}

// spill returns where a request leaves its affinity backend aff for, or
// -1 when no move pays for itself: the candidate predicted to meet the
// SLO (and, when leaving a slow home, more than spillSlower times faster
// counting the cost below) that holds the most of the prompt, then the
// fastest — so that a group that spills again goes back to its second
// home instead of evicting a third backend's prefixes.
//
// A move is priced at the destination's prediction for this request (a
// miss where it does not hold the prefix) plus what the move costs that
// backend's other prompt groups: the prompt's blocks displace others
// from its cache, whose next requests pay their prefill again — priced
// as the prefill the destination would save on this prompt had it held
// what home holds. The home's side is its prediction with its cache hit.
// Without that cost, per-request predictions (rough: observed/predicted
// TTFT 0.3–2.4) moved groups off backends that served them within the
// SLO; on engines with a few cache slots (Ollama keeps about its last
// four prompts) each such move cost the group and the evicted one a
// full prefill each.
func spill(cy *Cycle, cands []Candidate, scores []float64, aff int, slower bool) int {
	a := &cands[aff]
	home := float64(a.pred.Mean)
	to := -1
	for i := range cands {
		c := &cands[i]
		if i == aff || c.meetP < meetThreshold {
			continue
		}
		cost := float64(c.pred.Mean) + evictionCost(cy, c, a)
		if cost >= home || (slower && home <= spillSlower*cost) {
			continue
		}
		if to < 0 {
			to = i
			continue
		}
		if t := &cands[to]; scores[i] > scores[to] || (scores[i] == scores[to] && c.pred.Mean < t.pred.Mean) {
			to = i
		}
	}
	return to
}

// evictionCost is what sending a request to c rather than its home
// (which holds more of the prompt) is predicted to cost c's other prompt
// groups: c's prediction for the request minus its prediction had it
// held what home holds — the prefill of the prefix it lacks, which the
// prefixes it evicts to hold this one will pay again. Zero when c holds
// as much of the prompt as home does.
func evictionCost(cy *Cycle, c, home *Candidate) float64 {
	if c.uncached <= home.uncached {
		return 0
	}
	hit := c.b.preds.predict(c.b.features(cy.req.PromptTokens, home.uncached))
	return max(float64(c.pred.Mean-hit.Mean), 0)
}

// rotationBase scrambles a scheduler's seed into where its rotation
// starts (splitmix64's finaliser: nearby seeds start far apart).
func rotationBase(seed uint64) uint64 {
	x := seed + 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// better orders candidates for a spill: the higher probability of
// meeting the SLO, then the lower predicted mean.
func better(cy *Cycle, a, b *Candidate) bool {
	pa, pb := cy.MeetProbability(a), cy.MeetProbability(b)
	if pa != pb {
		return pa > pb
	}
	return a.pred.Mean < b.pred.Mean
}

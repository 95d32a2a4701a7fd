package sched

import (
	"sync/atomic"
	"time"
)

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

// missFaster is how many times slower than the fastest candidate the
// affinity backend must be predicted to be for a request that misses the
// SLO everywhere, and that its home holds less than half of, to leave it:
// a margin over the predictions' noise.
const missFaster = 1.25

// fillLimit is the share of a backend's cache (capacityModel.fill) that
// the prompt groups placed there may take before it takes no more new
// ones while a backend of about its speed has room (tiedBetter): the
// rest of the cache holds the prompts' unique parts, which evict the
// groups' prefixes between two uses of each.
const fillLimit = 0.8

// replicaSlack: see Pick.
const replicaSlack = 1

func init() { Register(SLOAffinityPickerType, newSLOAffinityPicker) }

// sloAffinityPicker keeps each prompt where its prefix is cached while
// that backend is predicted to meet the SLO, and otherwise sends it to a
// backend predicted to meet it (the one holding most of the prompt, then
// the fastest). Its scores are the affinity: the prefix scorer's share of
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
// for a new group one whose cache has room for it; the least loaded;
// then for a new group the one whose index holds least; then the
// faster; in turn: tiedBetter). New prompt groups are thereby spread by
// room, load and footprint, not by speed: placing them by predicted
// latency piled them onto the fast backends, whose caches then held more
// groups than fit (a cost no prediction of this request's TTFT sees). A
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
		// where its seed says (Options.Seed: from the clock unless set):
		// replicated gateways that all began at 0 sent their first new
		// groups to the same backends, whose cold prefills then queued
		// (sharedstate's replica test); replicas that know each other
		// stagger by rank instead (above). A seeded gateway places a
		// run's new groups alike every time, as its other random
		// choices are, so that runs given the same seed compare.
		r += chain(cy.s.opts.Seed, 0) // mixed: consecutive seeds start apart
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
		if cy.MeetProbability(c) >= meetThreshold {
			meets++
		}
		if scores[i] > scores[aff] || (scores[i] == scores[aff] && tiedBetter(c, &cands[aff], scores[i] == 0 && slack == 0, slack, len(cy.req.Blocks))) {
			aff = i
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
	a, f := &cands[aff], &cands[fastest]
	slower := f.pred.Ready && a.pred.Ready && float64(a.pred.Mean) > spillSlower*float64(f.pred.Mean)
	// A request predicted to miss the SLO everywhere, whose home holds
	// less than half of its prompt (a long unique document after a
	// group's instructions), goes where it is predicted fastest: its own
	// prefill dominates wherever it runs and its unique blocks evict as
	// much wherever they land, so staying home saves little of either,
	// and these requests are the tail (fleet mixed-length: documents on a
	// slow home took 124–164 ms, on a fast backend 60–85 ms; pooled P99
	// 0.70× with this rule, docs/routing-evaluation.md).
	if f.meetP < meetThreshold && a.meetP < spillBelow && scores[aff] > 0 && scores[aff] < 0.5 &&
		a.pred.Ready && f.pred.Ready && float64(a.pred.Mean) > missFaster*float64(f.pred.Mean) && f.b.withinReach() {
		return fastest, ReasonNoHeadroom
	}
	// A new prompt group stays where tiedBetter placed it, in a cache of
	// known size with room for it, while it is predicted to meet the SLO
	// there on average: the place is where the group's requests will go,
	// and a spill for speed or for the home's queue sends it into a cache
	// the groups already fill (tiedBetter chose the home for its room),
	// where it and a resident group then evict each other. On fleet
	// shared-prefill (2× stand-ins whose prefills share a processor)
	// new groups went so to a fast backend until it held six in room for
	// five, and its misses, each a full prefill shared with others, were
	// the P99 (docs/routing-evaluation.md, "Room for new groups, and the
	// price of an eviction").
	if scores[aff] == 0 && slack == 0 && a.meetP >= spillBelow {
		if f := a.b.caps.fill(len(cy.req.Blocks)); f > 0 && f <= fillLimit {
			return aff, stayReason(a, 0)
		}
	}
	if to := queuedSpill(cands, aff, scores, cy.req.SLO); to >= 0 {
		return to, ReasonHeadroom
	}
	if to := evictedHome(cands, aff, cy.req.SLO, len(cy.req.Blocks)); to >= 0 {
		return to, ReasonPrefixHit
	}
	if a.meetP >= spillBelow && !slower {
		return aff, stayReason(a, scores[aff])
	}
	// The home is predicted to miss the SLO (its mean is over it) or to
	// be spillSlower times slower than the fastest. Spill to a backend
	// predicted to meet the SLO with its P95 margin; failing that, to
	// one whose predicted mean meets it and is missFaster times below
	// the home's: of two backends that may miss, the one predicted to
	// miss on average is the worse bet. (Where answers are long, the
	// TTFTs behind them spread so wide that no backend's P95 met an
	// 80 ms SLO, and requests stayed at a home predicted at 110–140 ms
	// beside backends predicted at 30–40: fleet long-decode,
	// docs/routing-evaluation.md.)
	need := meetThreshold
	if f.meetP < meetThreshold {
		need = spillBelow
	}
	// Spill to the backend predicted to meet the SLO (and, when leaving
	// a slow home, at least spillSlower times faster) that holds the most
	// of the prompt, then the fastest counting its wait for a slot (the
	// price it was admitted at: the prediction alone chose full backends
	// beside free ones priced lower, fleet ten-small): a group that spills again goes
	// back to its second home instead of evicting a third backend's
	// prefixes. Only within the destination's reach (withinReach): a
	// prediction for a queue deeper than any it was shown does not count.
	to, toMean := -1, time.Duration(0)
	for i := range cands {
		c := &cands[i]
		if i == aff || c.meetP < need || (slower && float64(a.pred.Mean) <= spillSlower*float64(c.pred.Mean)) || !c.b.withinReach() {
			continue
		}
		// A destination is priced with its wait for a slot, as in
		// queuedSpill: a full backend predicted at 4–19 ms took five of
		// the eight slowest requests of fleet ten-small
		// (docs/routing-evaluation.md, "Waits scored against what was
		// served").
		dest := queuedMean(c)
		if cy.req.SLO > 0 && dest > cy.req.SLO {
			continue
		}
		// Not where the move, priced with the eviction it causes
		// (evictionPrice), costs more than staying.
		if ev := evictionPrice(c, scores[aff], scores[i], len(cy.req.Blocks)); ev > 0 {
			if dest += ev; a.pred.Ready && queuedMean(a) <= dest {
				continue
			}
		}
		if need < meetThreshold && !(a.pred.Ready && c.pred.Ready && float64(a.pred.Mean) > missFaster*float64(dest)) {
			continue
		}
		// Not for speed alone into a cache the groups living there fill
		// (fillLimit), when the home holds most of the prompt and the
		// destination none of it: the prompt group moves in and evicts a
		// resident group, whose next requests miss (on the 2× stand-in
		// fleets, four misses on a slow stand-in make a run's P99), and
		// then alternates between two caches that each lose it. A home
		// predicted to miss the SLO still leaves; a mostly unique prompt
		// (a long document) takes cache wherever it goes; a cache of
		// unknown size is never full (capacityModel.fill).
		if slower && a.meetP >= spillBelow && scores[aff] >= 0.5 && scores[i] == 0 && c.b.caps.fill(len(cy.req.Blocks)) > fillLimit {
			continue
		}
		if to < 0 || scores[i] > scores[to] || (scores[i] == scores[to] && dest < toMean) {
			to, toMean = i, dest
		}
	}
	if to >= 0 {
		return to, ReasonHeadroom
	}
	return aff, stayReason(a, scores[aff])
}

// queuedSpill is where a request goes whose home has more requests in
// flight than it has slots, so that it would wait there for one to
// finish: the candidate predicted to meet the SLO on average, holding
// the most of the prompt, then fastest (each priced with its own wait
// for a slot), whose predicted TTFT is missFaster times below the
// home's; -1 to stay.
//
// The slots and the wait come from the queue-aware model admission
// decides by (queueBound: slots believed from the TTFTs, the wait for
// one from how far along the answers holding them are, slotTracker),
// and each candidate's prediction is the largest of it, the routing
// predictor's, and the routing predictor's plus the wait for a slot
// counted in full (slotTracker.slotWait: under the slot count whose
// waits came true). The bound prices the wait by a coefficient it fits,
// and that fit believes the fewest slots that explain the TTFTs about
// as well as any: one on the four-slot stand-ins, whose waits for one
// slot are wrong, so the coefficient came out near zero, and a right
// wait behind two-slot homes went unpriced (fleet ten-small: the
// slowest requests were predicted at 4.5–39 ms at full backends and
// waited 34–67 ms for a slot; docs/routing-evaluation.md, "A wait for
// a slot counted in full"). The linear predictor prices
// every request in flight alike — too much within the slots, where none
// waits, and too little past them: where answers are
// long and hold the slots while they decode, a request joined a home
// four or five deep on four slots and waited 100–200 ms for its cached
// prefix while a backend with a free slot would have prefilled all of
// it in 25–50 ms (fleets long-decode and single-slot,
// docs/routing-evaluation.md). Where answers are short a slot frees
// within a few milliseconds, the wait is less than a prefill, and
// nothing moves.
//
// On average, not with the P95 margin the other spills ask: behind long
// answers the TTFTs spread so wide (a wait of nothing or of a whole
// decode) that no backend's P95 met the SLO, and a home eight deep kept
// its requests beside backends with free slots. The bound's mean is
// what knows the difference. It applies to a home spillSlower times
// slower too, whose own spill holds back from a full cache: that is
// for moving to a faster backend, not for leaving a queue. (Fleet
// long-decode, 8 seeds alternated: median P99 per seed 65–73 ms
// against 92–112 without the slots' waits, docs/routing-evaluation.md.)
func queuedSpill(cands []Candidate, aff int, scores []float64, slo time.Duration) int {
	a := &cands[aff]
	qa := a.b.preds.bound.estimate(a.feat)
	if !qa.Ready || !a.pred.Ready || a.feat.InFlight < float64(qa.Slots) {
		return -1
	}
	home := max(a.pred.Mean, qa.Mean, a.pred.Mean+secs(a.b.slots.slotWait(&a.feat.Waits, qa.slot)))
	to, toMean := -1, time.Duration(0)
	for i := range cands {
		c := &cands[i]
		if i == aff || !c.pred.Ready || !c.b.withinReach() {
			continue
		}
		dest := queuedMean(c)
		if slo > 0 && dest > slo || float64(home) <= missFaster*float64(dest) {
			continue
		}
		if to < 0 || scores[i] > scores[to] || (scores[i] == scores[to] && dest < toMean) {
			to, toMean = i, dest
		}
	}
	return to
}

// evictionPrice is what a request moving its prompt group to c costs
// the groups living there, added to c's price when deciding whether to
// leave a home that holds most of the prompt (homeScore ≥ 0.5), and is
// predicted over the SLO or much slower, for c, which holds none of it
// and whose cache the groups placed there fill (capacityModel.fill over
// fillLimit): one of them is evicted and its next request pays a whole
// prefill, priced as this request's predicted TTFT there (a full prefill
// too). Zero otherwise. Without it the move was decided on this
// request's TTFT alone, and on fleet shared-prefill groups moved into
// fast backends' full caches, where they and the residents then missed
// (docs/routing-evaluation.md, "Room for new groups, and the price of an
// eviction").
//
// Not for a home past its slots (queuedSpill): where the queues are
// real slots, a request waits there for a whole answer, and priced so
// it stayed: on the replay, ten-small went 1.01 → 1.13 of the best
// single signal, eight-slots-long 0.80 → 0.87.
func evictionPrice(c *Candidate, homeScore, score float64, blocks int) time.Duration {
	if homeScore < 0.5 || score > 0 || !c.pred.Ready || c.b.caps.fill(blocks) <= fillLimit {
		return 0
	}
	return c.pred.Mean
}

// evictedHome is where a request goes whose home (the backend whose
// prefix index holds most of the prompt) is believed, by the cache
// capacity learnt for it, to have evicted most of the prompt, while
// another backend's learnt capacity still holds at least half of it:
// the candidate holding the most, then the fastest, among those
// predicted faster than the home and within the SLO on average, each
// priced with its wait for a slot (queuedMean); -1 to stay.
//
// The index remembers every block it sent, so a group that moved and
// came back, or spilled once, is credited to backends whose caches have
// since dropped it, and the home was chosen by that credit. Staying there
// buys nothing the affinity is for: the prompt is prefilled in full and
// evicts a resident group. Going where it is still held costs no
// eviction and keeps that copy warm. Fleet remote-fast (two 2× backends
// 25 ms away beside two near ones): the near homes' caches, overfilled
// with groups that the fast-backend rule had moved there, were predicted
// to miss (≈ 50 ms) and kept their requests, under the SLO and less than
// spillSlower times the far copies' 29 ms; those misses were the P99,
// 1.55× prefix affinity's (docs/routing-evaluation.md, "A sixth
// held-out set").
func evictedHome(cands []Candidate, aff int, slo time.Duration, blocks int) int {
	a := &cands[aff]
	if blocks == 0 || 2*a.effective >= blocks || !a.pred.Ready {
		return -1
	}
	home := queuedMean(a)
	to, toMean := -1, time.Duration(0)
	for i := range cands {
		c := &cands[i]
		if i == aff || 2*c.effective < blocks || !c.pred.Ready || !c.b.withinReach() {
			continue
		}
		dest := queuedMean(c)
		if dest >= home || (slo > 0 && dest > slo) {
			continue
		}
		if to < 0 || c.effective > cands[to].effective || (c.effective == cands[to].effective && dest < toMean) {
			to, toMean = i, dest
		}
	}
	return to
}

// queuedMean is c's predicted mean TTFT with its wait for a slot counted
// in full where the queue bound is ready: the largest of the routing
// prediction, the bound's mean, and the prediction plus the slot
// tracker's wait (none while a slot is free).
func queuedMean(c *Candidate) time.Duration {
	m := c.pred.Mean
	if qc := c.b.preds.bound.estimate(c.feat); qc.Ready {
		m = max(m, qc.Mean, c.pred.Mean+secs(c.b.slots.slotWait(&c.feat.Waits, qc.slot)))
	}
	return m
}

// stayReason is why a request stays on its affinity backend a.
func stayReason(a *Candidate, score float64) string {
	switch {
	case score > 0:
		return ReasonPrefixHit
	case a.meetP >= meetThreshold:
		return ReasonHeadroom
	}
	return ReasonNoHeadroom
}

// tiedBetter reports whether c makes a better affinity backend than b,
// the current one, tied with it on the prefix score. For a new prompt
// group (spread), first the one whose cache the groups already placed
// there leave room for (fill within fillLimit), or the emptier of two
// that are full, unless one is predicted more than spillSlower times
// slower than the other; then less loaded (by more than slack); then,
// for a new group, equally loaded and holding fewer blocks in its prefix
// index; then, holding as many, predicted faster. The scan's rotation
// breaks what remains tied.
//
// Room first: by load, new groups went to the fast backends, which
// drain first, until their caches held more groups than fit (five of 16
// blocks each in 96) and every group there missed in turn, while a slow
// backend beside them held three (the stand-in fleets two and
// small-cache, docs/routing-evaluation.md). The fill is known only
// where the cache's size is, from the engine's metrics or learnt
// (capacityModel.fill); a cache of unknown size is never full, and the
// old order stands. Not across a speed gap of more than spillSlower: a
// backend at half speed that still has room takes a group's queue at
// twice the cost, and a miss on a backend four times as fast costs less
// (fleet eight).
//
// By load alone, where new groups went at a cold start (every backend
// idle) was the rotation's position when each arrived, so how many each
// backend held was left to chance; on Ollama instances of four cache
// slots, one holding more groups evicts them from its slots, and a slow
// one then pays full prefills over the SLO (docs/routing-evaluation.md,
// fleet ollama-three). Counting what each index holds keeps the
// groups' footprints even, which is what caches of one size need; the
// speed only decides between backends holding as much, so that the odd
// group goes to a faster one. Weighting the count by speed instead —
// twice the groups on a backend twice as fast — overfilled the fast
// backends' small caches (the stand-in fleet small-cache). Replicas do
// not use it (spread is false): their indexes converge (sharedstate), and
// simultaneous new groups would all go to the same backend instead of
// staggering by rank.
func tiedBetter(c, b *Candidate, spread bool, slack float64, blocks int) bool {
	if spread && !speedOverRoom(c, b) {
		fc, fb := c.b.caps.fill(blocks), b.b.caps.fill(blocks)
		if okc, okb := fc <= fillLimit, fb <= fillLimit; okc != okb {
			return okc
		} else if !okc && fc != fb {
			return fc < fb
		}
	}
	lc, lb := load(c.b), load(b.b)
	if lc+slack < lb {
		return true
	}
	if !spread || lc != lb {
		return false
	}
	if nc, nb := c.b.prefix.Len(), b.b.prefix.Len(); nc != nb {
		return nc < nb
	}
	return c.pred.Mean < b.pred.Mean
}

// fartherApart reports whether one of c and b is predicted more than
// spillSlower times slower than the other for the request (both
// predictions ready).
func fartherApart(c, b *Candidate) bool {
	if !c.pred.Ready || !b.pred.Ready {
		return false
	}
	mc, mb := float64(c.pred.Mean), float64(b.pred.Mean)
	return mc > spillSlower*mb || mb > spillSlower*mc
}

// speedOverRoom reports whether c and b are so far apart in speed for
// the request (fartherApart) that the slower is also predicted to miss
// the SLO on average: only then does speed decide a new group's place
// over the room in the caches. A backend twice as slow that still meets
// the SLO serves the group's hits there, where the faster one's full
// cache would serve it misses: on fleet shared-prefill a full prefill
// was predicted 2.0–2.3 times slower on a slow stand-in with room than
// on a fast one without, both within the 80 ms SLO, and the group went
// to the full cache (docs/routing-evaluation.md, "Room for new groups,
// and the price of an eviction"). (meetP is computed before tiedBetter
// reads it.)
func speedOverRoom(c, b *Candidate) bool {
	if !fartherApart(c, b) {
		return false
	}
	slow := c
	if b.pred.Mean > c.pred.Mean {
		slow = b
	}
	return slow.meetP < spillBelow
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

package sched

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Admission's queue-aware bound (admit.go) is open loop: its margin is a
// quantile of each backend's recent fit errors, which says nothing of
// what the fits cannot see — a machine that stalls (GC, a noisy
// neighbour, an engine hiccup) delays every request in flight at once,
// on every backend, and the requests queued at the edge of the SLO miss
// together. admitLoop closes the loop on the outcome the bound is for:
// whether admitted requests kept their SLO (as the gateway measures
// their TTFT: from dispatch to first token).
//
// It works per route (the requested model; a gateway route is one
// model), not per backend, for three reasons: the target is stated of a
// route's admitted requests; the misses it is for are common-mode (a
// stall slows every backend at once), while what is particular to one
// backend is already in that backend's own error quantile; and a route
// sees its backends' outcomes together, k backends' worth, which is what
// makes a miss rate of 1% measurable in seconds rather than minutes. The
// price is that one badly modelled backend widens every backend's margin
// on the route.
//
// Two signals, on two time scales:
//
//   - use, the share of its SLO an admitted request's bound may take: an
//     AIMD controller on the admitted requests' observed misses. When
//     their miss rate is shown above the target (the lower end of its
//     Wilson interval over a sliding window is above 1 − AdmitQuantile),
//     use is multiplied by loopBackoff; when shown below it (the upper
//     end over everything since the last change), use rises by
//     loopRelax, up to 1. Only the outcomes of requests admitted since
//     the last change count toward the next: the requests one stall
//     delayed are one event, not one per miss, and a change is judged
//     by the requests it admitted (as TCP halves its window once per
//     round trip).
//   - lateness, how much later than the bounds' means the last
//     loopLateN first tokens of the route came back (their median, when
//     positive): the fresh signal that every backend is slower now than
//     its fit knows. It adds to every bound at once and is gone as soon
//     as first tokens come back on time, where the fits (≈ 100 TTFTs of
//     memory per backend) and use (hundreds of outcomes) take seconds.
//
// Neither applies to a backend with nothing of the gateway's in flight:
// a request alone there is judged by the open-loop bound, so that the
// loop cannot lock into refusing everything (its outcomes are what
// relaxes it) and a route always serves what an idle backend can. (The
// bound itself is kept from that lock by probes: queueBound.probeDue.)
type admitLoop struct {
	mu    sync.Mutex
	use   float64
	epoch uint64
	// Outcomes of requests admitted in the current epoch: win the last
	// loopWindow (true: missed), nw of them filled, missW the misses
	// among them; n and miss since the epoch began.
	win   [loopWindow]bool
	nw    int
	missW int
	n     int
	miss  int
	// late is a ring of the last loopLateN latenesses (TTFT − the
	// bound's mean at admission, seconds) and when they came back.
	late   [loopLateN]float64
	lateAt [loopLateN]time.Time
	nl     int
	tmp    [loopLateN]float64
	// slo is the SLO of the last outcome, by which AdmissionRoutes
	// judges the lateness stale; backoffs and relaxes count use's moves.
	slo               time.Duration
	backoffs, relaxes uint64
}

const (
	// loopTarget is the admitted requests' miss rate admission aims
	// under: what AdmitQuantile leaves.
	loopTarget = 1 - AdmitQuantile
	// loopZ is the normal quantile of the Wilson intervals (one-sided
	// 95%): use moves only when the window shows, at that confidence,
	// the miss rate on the side of the target it moves for. With few
	// outcomes that needs many misses (or long clean runs): one miss
	// among the first 22 outcomes backs off, one in 23 does not; with
	// no miss, relaxing needs 268 outcomes (TestWilson).
	loopZ = 1.645
	// loopWindow is how many recent outcomes the back-off judges by:
	// enough that a 1% miss rate is 2–3 misses (a full window backs
	// off from its sixth), few enough that an old run of clean
	// outcomes does not dilute a burst of misses now.
	loopWindow = 256
	// loopBackoff is use's multiplicative decrease: a tenth of the
	// SLO per event — under overload a backend's queue stays busy with
	// a tenth less of it (what is refused is replaced by the next
	// arrival), so a false alarm costs little, and seven events take
	// use from 1 to its floor. A relaxation gives back half of one
	// (AIMD: back-off is the stronger side).
	loopBackoff = 0.9
	// loopRelax is use's additive increase once a clean epoch shows the
	// miss rate under the target: half a back-off.
	loopRelax = (1 - loopBackoff) / 2
	// loopStart is use before any outcome: one back-off.
	loopStart = loopBackoff
	// loopMinUse is use's floor: a bound that must leave more than half
	// the SLO unused is wrong by more than its own prediction, which no
	// margin mends; the floor also bounds how long relaxing takes.
	loopMinUse = 0.5
	// loopLateN is how many recent first tokens the lateness is the
	// median of: odd, so that a majority — more than one backend's
	// worth on a route of several, whose first tokens come back
	// interleaved — must be late for the bounds to move, and short, so
	// that it follows a stall within a few first tokens.
	loopLateN = 9
	// loopLateAge, in SLOs: a lateness older than this says nothing
	// about now — any request admitted since would have come back
	// within its SLO and been counted.
	loopLateAge = 2
)

// newAdmitLoop starts a route's loop backed off once (use = loopStart):
// nothing yet shows that its bounds keep the target. Their margins are
// quantiles of at most a few hundred errors per backend, which say
// nothing of how misses bunch (a stall, or a long prompt, delays every
// request queued behind it, and those at the edge of the SLO miss
// together), so the whole SLO is earned, by a first epoch shown under
// the target, not granted.
func newAdmitLoop() *admitLoop { return &admitLoop{use: loopStart} }

// admitLoops holds a scheduler's loops, one per route (model).
type admitLoops struct {
	mu sync.Mutex
	m  map[string]*admitLoop
	// off: admission is open loop (the bound alone); tests compare.
	off bool
}

func (ls *admitLoops) get(model string) *admitLoop {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.off {
		return nil
	}
	l := ls.m[model]
	if l == nil {
		if ls.m == nil {
			ls.m = map[string]*admitLoop{}
		}
		l = newAdmitLoop()
		ls.m[model] = l
	}
	return l
}

// AdmissionFeedback is the state of a route's admission loop (its
// model's), for metrics and logs: Use, the share of the SLO an admitted
// request's bound may take; Late, what is added to every bound now, for
// a request with SLO slo; ok false when no request of the model has
// asked for admission yet.
func (s *Scheduler) AdmissionFeedback(model string, slo time.Duration) (use float64, late time.Duration, ok bool) {
	s.loops.mu.Lock()
	l := s.loops.m[model]
	s.loops.mu.Unlock()
	if l == nil {
		return 1, 0, false
	}
	st := l.state(s.opts.Now(), slo)
	return st.use, st.late, true
}

// AdmissionRoute is one route's admission loop, as metrics export it.
type AdmissionRoute struct {
	Model string
	// Use is the share of its SLO an admitted request's bound may take.
	Use float64
	// Late is what every bound is raised by now, judged by the SLO of
	// the route's last first token (0 while fewer than a majority of
	// recent first tokens came back, or when they are stale).
	Late time.Duration
	// Backoffs and Relaxes count use's decreases and increases.
	Backoffs, Relaxes uint64
}

// AdmissionRoutes is the state of every route's admission loop, in
// model order (none while admission is open loop).
func (s *Scheduler) AdmissionRoutes() []AdmissionRoute {
	s.loops.mu.Lock()
	ls := make(map[string]*admitLoop, len(s.loops.m))
	for m, l := range s.loops.m {
		ls[m] = l
	}
	s.loops.mu.Unlock()
	now := s.opts.Now()
	out := make([]AdmissionRoute, 0, len(ls))
	for m, l := range ls {
		l.mu.Lock()
		slo, b, r := l.slo, l.backoffs, l.relaxes
		l.mu.Unlock()
		st := l.state(now, slo)
		out = append(out, AdmissionRoute{Model: m, Use: st.use, Late: st.late, Backoffs: b, Relaxes: r})
	}
	slices.SortFunc(out, func(a, b AdmissionRoute) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// loopState is what admission decides by at one moment.
type loopState struct {
	use   float64       // share of the SLO a bound may take
	late  time.Duration // added to every bound (≥ 0)
	epoch uint64
}

// state is the loop's current use and lateness, judged at now for a
// request with SLO slo.
func (l *admitLoop) state(now time.Time, slo time.Duration) loopState {
	if l == nil {
		return loopState{use: 1}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := loopState{use: l.use, epoch: l.epoch}
	k := min(l.nl, loopLateN)
	if k < loopLateN {
		// Fewer first tokens than a majority needs.
		return st
	}
	cut := now.Add(-loopLateAge * slo)
	for i := range k {
		if l.lateAt[i].Before(cut) {
			return st // stale: a quiet route's last stall is history
		}
	}
	tmp := l.tmp[:k]
	copy(tmp, l.late[:k])
	slices.Sort(tmp)
	if m := tmp[k/2]; m > 0 {
		st.late = secs(m)
	}
	return st
}

// adjust is e as admission judges it under st: the bound raised by the
// lateness and divided by use, so that Fits(slo) holds when bound +
// lateness ≤ use × slo. A backend with nothing in flight is judged by
// the open-loop bound (see admitLoop).
func (st loopState) adjust(e QueueEstimate) QueueEstimate {
	if e.Ahead <= 0 || !e.Ready || st.use >= 1 && st.late <= 0 {
		return e
	}
	e.Bound = time.Duration(float64(e.Bound+st.late) / st.use)
	e.use = st.use
	return e
}

// outcome records the first token, at now and ttft after dispatch, of a
// request admitted as a says, with SLO slo. Only requests whose
// admission use decided count toward use: a miss of a request admitted
// by the routing prediction (its backend's bound not ready) or alone on
// its backend says nothing of the share of the SLO bounds may take.
func (l *admitLoop) outcome(now time.Time, a admission, ttft, slo time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slo = slo
	if a.mean > 0 {
		i := l.nl % loopLateN
		l.late[i], l.lateAt[i] = (ttft - a.mean).Seconds(), now
		l.nl++
	}
	if !a.judged || a.epoch != l.epoch {
		return // or admitted under a use since changed: judged already
	}
	missed := ttft > slo
	if l.nw == loopWindow {
		i := l.n % loopWindow
		if l.win[i] {
			l.missW--
		}
		l.win[i] = missed
	} else {
		l.win[l.nw] = missed
		l.nw++
	}
	l.n++
	if missed {
		l.missW++
		l.miss++
	}
	switch {
	case missed && wilsonLower(l.missW, l.nw, loopZ) > loopTarget:
		if l.use > loopMinUse {
			l.use = max(loopMinUse, l.use*loopBackoff)
			l.backoffs++
			l.next()
		}
	case !missed && l.use < 1 && wilsonUpper(l.miss, l.n, loopZ) < loopTarget:
		l.use = min(1, l.use+loopRelax)
		l.relaxes++
		l.next()
	}
}

// next starts an epoch: outcomes of requests admitted before it no
// longer count.
func (l *admitLoop) next() {
	l.epoch++
	l.nw, l.missW, l.n, l.miss = 0, 0, 0, 0
}

// wilsonLower and wilsonUpper are the ends of the Wilson score interval
// of a proportion, x of n, at normal quantile z: where the true rate may
// lie, given n outcomes, without the normal approximation's collapse to
// a point at x = 0.
func wilsonLower(x, n int, z float64) float64 {
	c, h := wilson(x, n, z)
	return max(0, c-h)
}

func wilsonUpper(x, n int, z float64) float64 {
	c, h := wilson(x, n, z)
	return min(1, c+h)
}

func wilson(x, n int, z float64) (centre, half float64) {
	if n <= 0 {
		return 0.5, 0.5
	}
	nf, p := float64(n), float64(x)/float64(n)
	d := 1 + z*z/nf
	centre = (p + z*z/(2*nf)) / d
	half = z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / d
	return centre, half
}

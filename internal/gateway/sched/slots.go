package sched

import (
	"math"
	"slices"
	"sync"
	"time"
)

// slotTracker follows this gateway's requests in flight on one backend
// closely enough to say when its slots free: when each was dispatched,
// when each that is decoding sent its first token, and how long decoding
// takes there (first token to end, on average). A request that finds
// every slot taken waits until one of the requests holding them ends;
// how long that is depends on how far along they are, which the
// gateway sees in their streams. The queue bound's count of requests
// ahead (queueBound) prices every finish alike, one mean drain time
// each: right on average, and wrong just where it matters. Where answers
// are long, a request joining a full home behind four answers that had
// only begun waited most of a decode, 100–150 ms, while the count
// predicted a quarter of it (fleet long-decode,
// docs/routing-evaluation.md).
type slotTracker struct {
	mu sync.Mutex
	// pend: dispatch times of requests without a first token, in
	// dispatch order (first in, first served); dec: the requests
	// decoding, in the order their first tokens came. Times are Unix
	// nanoseconds. A request is found again by its time alone: two
	// requests of the same time are interchangeable here.
	pend []pending
	dec  []decoding
	// abs is the last slotDecodeWindow requests' times from first token
	// to end, seconds (decodeWindow: sorted, for the mean time left to an
	// answer of a given age, residual). Answers end where they end: with
	// lengths spread from 8 to 96 tokens, an answer 100 ms along has more
	// time left than the mean less 100 ms (fleet varied-answers,
	// docs/routing-evaluation.md).
	abs decodeWindow
	// perToken is the same window for the answers that had a token
	// budget (max_tokens): each one's decode time over its budget less
	// the first token. An answer's time left is then read against its own
	// budget: where budgets differ (8 to 96 tokens), an answer with 90
	// tokens to go has far more time left than the mean decode says, and
	// one whose budget is nearly spent far less. Where every answer runs
	// to its budget (a benchmark's ignore_eos, a length limit), the time
	// left is its tokens to go at the backend's pace; where answers stop
	// early, the ratios spread and the estimate is the residual life of
	// that spread, as for decode times.
	perToken decodeWindow
	// byBudget: the budgets explain the decode times (the per-token
	// window's spread is clearly under the decode times' own,
	// budgetExplains), so an answer's time left is read against its
	// budget. Where answers stop at EOS whatever their max_tokens, a
	// budget of 32k beside one of 512 says nothing of how long either
	// runs, the ratios spread more than the times, and the times decide.
	byBudget bool
	// fastest is the least TTFT seen, the service time before a request
	// has found nothing else in flight (svc, from then on). (The mean
	// TTFT of all requests counts the waits for slots that the
	// simulation adds itself.)
	fastest float64
	// svc is each request's own time to its first token once it has a
	// slot: the alone requests' TTFTs against their uncached tokens. A
	// request dispatched with its prefix cached holds its slot a few
	// milliseconds before it decodes, one whose prefix is not a whole
	// prefill. One service time for both (the alone requests'
	// mean, mostly cached prompts where groups stay home) ended a
	// miss's prefill too soon, and with it the wait behind it (fleet
	// ten-small; docs/routing-evaluation.md, "A wait for a slot counted
	// in full").
	svc serviceFit
	// svcTrue is the same line against the uncached tokens the backend
	// reported in its answers (their cached tokens), where it reports
	// them: the service time a request had, which the slot hypotheses
	// are scored against. svc maps the uncached tokens predicted at
	// dispatch to the time a request will hold its slot, prediction
	// errors and all: where small caches evict a prefix between the
	// prediction and the prefill, a "hit" pays a whole prefill, so svc's
	// line lifts at few uncached tokens (one of 141 tokens at 40 ms where
	// a cached prompt took 5), every wait behind such a request looked
	// shorter than it was, and the hypothesis of twice the slots, whose
	// wait is none, scored best on backends of two (fleet ten-small,
	// docs/routing-evaluation.md, "Waits scored against what was
	// served").
	svcTrue serviceFit
	// peak is the most requests seen decoding at once: the backend has
	// at least that many slots.
	peak int
	// werr is each slot hypothesis's waits' error against the waits
	// the requests had (their TTFT less their own service time), a
	// moving mean of absolute errors over nw first tokens: slotWait
	// believes the hypothesis whose waits came true.
	werr [nSlots]float64
	nw   int
	// held is the decoding answers' mean times left, sorted, svcs the
	// pending requests' service times, and rel the simulation's scratch.
	held, svcs, rel []float64
}

// pending is a request without its first token: dispatched at (Unix
// nanoseconds), with u of its prompt's tokens predicted uncached there.
type pending struct {
	at int64
	u  float64
}

// decoding is a request decoding on the backend: when its first token
// came (Unix nanoseconds) and its budget, the tokens after the first that
// max_tokens allows (0: none given).
type decoding struct {
	first  int64
	budget float64
}

// decodeWindow is the last slotDecodeWindow values, sorted, with the sums
// of their tails, for residual lives.
type decodeWindow struct {
	xs    [slotDecodeWindow]float64
	above [slotDecodeWindow + 1]float64
	ring  [slotDecodeWindow]float64
	n     int
}

// learn adds d, in place of the oldest value when the window is full.
func (w *decodeWindow) learn(d float64) {
	k := min(w.n, slotDecodeWindow)
	xs := w.xs[:k]
	if k == slotDecodeWindow {
		old := w.ring[w.n%slotDecodeWindow]
		i, _ := slices.BinarySearch(xs, old)
		xs = slices.Delete(xs, i, i+1)
	}
	w.ring[w.n%slotDecodeWindow] = d
	i, _ := slices.BinarySearch(xs, d)
	xs = slices.Insert(xs, i, d)
	copy(w.xs[:], xs)
	w.above[len(xs)] = 0
	for j := len(xs) - 1; j >= 0; j-- {
		w.above[j] = w.above[j+1] + xs[j]
	}
	w.n++
}

// residual is the mean of the values above x, less x (0 if none is).
func (w *decodeWindow) residual(x float64) float64 {
	k := min(w.n, slotDecodeWindow)
	i, _ := slices.BinarySearch(w.xs[:k], x)
	for i < k && w.xs[i] <= x {
		i++
	}
	if i == k {
		return 0
	}
	return w.above[i]/float64(k-i) - x
}

// budgetMinSamples is how many budgeted answers the per-token window
// needs before an answer's budget is read.
const budgetMinSamples = 8

// budgetExplains is how much less spread (coefficient of variation) the
// decode times per budgeted token must have than the decode times for
// the budgets to be read: clearly less, so that answers of one budget
// (whose two spreads are equal) keep the decode times' estimate exactly.
const budgetExplains = 0.9

// cv is the window's coefficient of variation (0 while it is empty or
// its mean is 0).
func (w *decodeWindow) cv() float64 {
	k := min(w.n, slotDecodeWindow)
	if k == 0 || w.above[0] <= 0 {
		return 0
	}
	mean := w.above[0] / float64(k)
	ss := 0.0
	for _, x := range w.xs[:k] {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss/float64(k)) / mean
}

// slotWaitMaxSlots is the largest slot hypothesis the tracker
// simulates, and slotWaitMaxInFlight the most requests in flight it
// simulates at all. Where slots are many, finishes come often and their
// count prices the wait well (the queue bound's drain time); where
// requests in flight are more than that, the count is what is left.
const (
	slotWaitMaxSlots    = 16
	slotWaitMaxInFlight = 64
)

// slotDecodeWindow is how many recent decode times a tracker keeps.
const slotDecodeWindow = 64

// slotTrackerMax is the most requests a tracker follows: past it (a
// data plane that never ends its requests), new ones are not followed,
// which waits already ignores past slotWaitMaxInFlight.
const slotTrackerMax = 4096

func (s *slotTracker) dispatched(at time.Time, uncached float64) {
	s.mu.Lock()
	if len(s.pend)+len(s.dec) < slotTrackerMax {
		s.pend = append(s.pend, pending{at.UnixNano(), uncached})
	}
	s.mu.Unlock()
}

// firstToken moves the request dispatched at start, which found ahead
// requests in flight, from pending to decoding; its answer may run to
// budget tokens after this first one (0: no limit known).
func (s *slotTracker) firstToken(start, at time.Time, ahead, budget float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := removePending(&s.pend, start.UnixNano())
	if !ok {
		return
	}
	s.dec = append(s.dec, decoding{at.UnixNano(), budget})
	s.peak = max(s.peak, len(s.dec))
	ttft := at.Sub(start).Seconds()
	if ahead == 0 {
		s.svc.learn(u, ttft)
	}
	if s.fastest == 0 || ttft < s.fastest {
		s.fastest = ttft
	}
}

// decoding counts a request as decoding since at without its TTFT (one
// whose first token came from another backend before a redirect).
func (s *slotTracker) decoding(at time.Time, budget float64) {
	s.mu.Lock()
	if len(s.pend)+len(s.dec) < slotTrackerMax {
		s.dec = append(s.dec, decoding{at.UnixNano(), budget})
	}
	s.mu.Unlock()
}

// ended removes the request dispatched at start (and decoding since
// first, when it had a first token). A request that completed after its
// first token teaches the decode time; one that failed or was cancelled
// does not (it was cut short).
func (s *slotTracker) ended(start, first, at time.Time, completed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first.IsZero() {
		removePending(&s.pend, start.UnixNano())
		return
	}
	budget, ok := removeDecoding(&s.dec, first.UnixNano())
	if !ok || !completed {
		return
	}
	d := at.Sub(first).Seconds()
	s.learnDecode(d)
	if budget > 0 {
		s.perToken.learn(d / budget)
	}
	s.byBudget = s.perToken.n >= budgetMinSamples && s.perToken.cv() < budgetExplains*s.abs.cv()
}

// removeDecoding deletes the first request decoding since first,
// keeping the order, and returns its budget.
func removeDecoding(xs *[]decoding, first int64) (float64, bool) {
	for i, x := range *xs {
		if x.first == first {
			*xs = append((*xs)[:i], (*xs)[i+1:]...)
			return x.budget, true
		}
	}
	return 0, false
}

// learnDecode adds one decode time d to the window, in place of the
// oldest when it is full.
func (s *slotTracker) learnDecode(d float64) { s.abs.learn(d) }

// residual is the mean time left, seconds, to an answer decoding for
// age seconds: the mean of the recent decode times longer than age, less
// age; 0 when none was (it is due).
func (s *slotTracker) residual(age float64) float64 { return s.abs.residual(age) }

// meanDecode is the mean of the recent decode times.
func (s *slotTracker) meanDecode() float64 {
	return s.abs.above[0] / float64(min(s.abs.n, slotDecodeWindow))
}

// removePending deletes the first request dispatched at, keeping the
// order, and returns its uncached tokens.
func removePending(xs *[]pending, at int64) (float64, bool) {
	for i, x := range *xs {
		if x.at == at {
			*xs = append((*xs)[:i], (*xs)[i+1:]...)
			return x.u, true
		}
	}
	return 0, false
}

// serviceFit is a least-squares line through the (uncached tokens, TTFT)
// of requests that found nothing else in flight, its sums exponentially
// forgotten (serviceForget): a fixed time plus a prefill time per
// uncached token.
type serviceFit struct {
	w, u, t, uu, ut float64
}

// serviceForget is the service line's forgetting factor per alone
// request (about twenty of memory).
const serviceForget = 0.95

func (f *serviceFit) learn(u, t float64) {
	const l = serviceForget
	f.w = l*f.w + 1
	f.u = l*f.u + u
	f.t = l*f.t + t
	f.uu = l*f.uu + u*u
	f.ut = l*f.ut + u*t
}

// at is the fitted TTFT of a request with u uncached tokens; ok false
// before any was learnt. Until the uncached counts have varied, it is
// their mean TTFT; a slope is never negative (a longer prefill is not
// faster), and a line that would cross zero goes through it instead.
func (f *serviceFit) at(u float64) (float64, bool) {
	a, slope, ok := f.line()
	return a + slope*u, ok
}

// line is at's fixed time and time per uncached token.
func (f *serviceFit) line() (a, slope float64, ok bool) {
	if f.w < 0.5 {
		return 0, 0, false
	}
	mu, mt := f.u/f.w, f.t/f.w
	vu := f.uu/f.w - mu*mu
	if vu > 1 { // tokens²: the uncached counts varied
		slope = max((f.ut/f.w-mu*mt)/vu, 0)
	}
	a = mt - slope*mu
	if a < 0 {
		a, slope = 0, max(mt/max(mu, 1), 0)
	}
	return a, slope, true
}

// waits fills out[i] with how long a request sent now would wait for a
// slot, seconds, were the backend's slots slotHypotheses[i]: the
// requests in flight worked through first in, first out, each
// decoding one ending when an answer of its age does on average
// (residual), each pending one taking its service time and a mean
// decode once a slot is free.
// Zero where the request would find a free slot, beyond the hypotheses
// simulated, or before a decode time has been learnt.
func (s *slotTracker) waits(now time.Time, out *[nSlots]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pend) + len(s.dec)
	if s.abs.n == 0 || n == 0 || n > slotWaitMaxInFlight {
		return
	}
	t := now.UnixNano()
	held := s.held[:0]
	for _, f := range s.dec {
		age := float64(t-f.first) / 1e9
		var left float64
		if f.budget > 0 && s.byBudget {
			left = f.budget * s.perToken.residual(age/f.budget)
		} else {
			left = s.residual(age)
		}
		held = insertSorted(held, 0, left)
	}
	s.held = held
	// Each pending request's own service time, once for every
	// hypothesis.
	svc := s.svcs[:0]
	a, slope, ok := s.svc.line()
	for _, d := range s.pend {
		v := s.fastest
		if ok {
			v = a + slope*d.u
		}
		svc = append(svc, v)
	}
	s.svcs = svc
	for i, m := range slotHypotheses {
		if m > slotWaitMaxSlots {
			break
		}
		if m > n {
			continue // a free slot
		}
		out[i] = s.simulate(t, m)
	}
}

// simulate is waits for m slots, the decoding answers' times left in
// s.held. rel holds the times from now at which the slots held free,
// sorted; the first len(rel)−m+1 of them must pass before one is free
// for the next request in line (more requests may be decoding than m:
// then m is wrong, and it is scored by how wrong).
func (s *slotTracker) simulate(now int64, m int) float64 {
	rel := append(s.rel[:0], s.held...)
	decode := s.meanDecode()
	lo := 0
	for k, d := range s.pend {
		svc := s.svcs[k]
		var end float64
		if held := len(rel) - lo; held < m {
			// A free slot: in prefill since it came.
			end = max(0, svc-float64(now-d.at)/1e9) + decode
		} else {
			// Its slot frees when held−m+1 of those holding them end.
			lo += held - m
			end = rel[lo] + svc + decode
			lo++
		}
		rel = insertSorted(rel, lo, end)
	}
	s.rel = rel
	if held := len(rel) - lo; held >= m {
		return rel[lo+held-m]
	}
	return 0
}

// insertSorted inserts v into the sorted xs[lo:].
func insertSorted(xs []float64, lo int, v float64) []float64 {
	xs = append(xs, v)
	i := len(xs) - 1
	for i > lo && xs[i-1] > v {
		xs[i] = xs[i-1]
		i--
	}
	xs[i] = v
	return xs
}

// slotWaitMinScored is how many first tokens score the slot hypotheses'
// waits before slotWait believes the best of them.
const slotWaitMinScored = 8

// slotWaitAlpha is the weight of each new error in a hypothesis's score.
const slotWaitAlpha = 0.05

// learnWaits scores each slot hypothesis's wait w (slotTracker.waits,
// when the request was sent) against the wait the request had: its
// TTFT less its own service time for u uncached tokens. reported: u is
// what the backend reported it did not have cached (else what was
// predicted at dispatch); a request that found nothing else in flight
// (alone) then teaches the reported service line.
func (s *slotTracker) learnWaits(w *[nSlots]float64, u, ttft float64, reported, alone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fit := &s.svc
	if reported {
		if alone {
			s.svcTrue.learn(u, ttft)
		}
		if _, _, ok := s.svcTrue.line(); ok {
			fit = &s.svcTrue
		}
	}
	v, ok := fit.at(u)
	if !ok {
		return
	}
	had := max(ttft-v, 0)
	for i := range w {
		e := math.Abs(had - w[i])
		if s.nw == 0 {
			s.werr[i] = e
		} else {
			s.werr[i] += slotWaitAlpha * (e - s.werr[i])
		}
	}
	s.nw++
}

// slotWait is the wait for a slot, seconds, out of w (waits, for a
// request sent now) under the hypothesis whose waits came truest
// (learnWaits; of equals, the fewest slots), or before enough were
// scored under the larger of believed (an index into slotHypotheses:
// the queue bound's) and the fewest slots that hold the most answers
// seen decoding at once.
func (s *slotTracker) slotWait(w *[nSlots]float64, believed int) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nw >= slotWaitMinScored {
		best := 0
		for i := range s.werr {
			if s.werr[i] < s.werr[best] {
				best = i
			}
		}
		return w[best]
	}
	i := believed
	for i < nSlots-1 && slotHypotheses[i] < s.peak {
		i++
	}
	return w[i]
}

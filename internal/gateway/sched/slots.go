package sched

import (
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
	// dispatch order (first in, first served); dec: first-token times of
	// requests decoding, in the order their first tokens came. Both
	// Unix nanoseconds. A request is found again by its time alone: two
	// requests of the same time are interchangeable here.
	pend, dec []int64
	// decodes are the last slotDecodeWindow requests' times from first
	// token to end, seconds, sorted, and above[k] the sum of
	// decodes[k:], for the mean time left to an answer of a given age
	// (residual); ring is the same in the order they came, nDecode how
	// many have come. Answers end where they end: with lengths spread
	// from 8 to 96 tokens, an answer 100 ms along has more time left
	// than the mean less 100 ms (fleet varied-answers,
	// docs/routing-evaluation.md).
	decodes [slotDecodeWindow]float64
	above   [slotDecodeWindow + 1]float64
	ring    [slotDecodeWindow]float64
	nDecode int
	// service is the time a request takes to its first token once it
	// has a slot: the mean TTFT of the requests that found nothing else
	// in flight, or before there is one, the least TTFT seen. (The mean
	// TTFT of all requests counts the waits for slots that the
	// simulation adds itself.)
	service float64
	nAlone  int
	// held is the decoding answers' mean times left, sorted, and rel
	// the simulation's scratch.
	held, rel []float64
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

// slotTrackerAlpha is the weight of each new TTFT in the service time.
const slotTrackerAlpha = 0.1

// slotDecodeWindow is how many recent decode times a tracker keeps.
const slotDecodeWindow = 64

// slotTrackerMax is the most requests a tracker follows: past it (a
// data plane that never ends its requests), new ones are not followed,
// which waits already ignores past slotWaitMaxInFlight.
const slotTrackerMax = 4096

func (s *slotTracker) dispatched(at time.Time) {
	s.mu.Lock()
	if len(s.pend)+len(s.dec) < slotTrackerMax {
		s.pend = append(s.pend, at.UnixNano())
	}
	s.mu.Unlock()
}

// firstToken moves the request dispatched at start, which found ahead
// requests in flight, from pending to decoding.
func (s *slotTracker) firstToken(start, at time.Time, ahead float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !remove(&s.pend, start.UnixNano()) {
		return
	}
	s.dec = append(s.dec, at.UnixNano())
	ttft := at.Sub(start).Seconds()
	switch {
	case ahead == 0 && s.nAlone == 0:
		s.service = ttft
		s.nAlone++
	case ahead == 0:
		s.service += slotTrackerAlpha * (ttft - s.service)
		s.nAlone++
	case s.nAlone == 0 && (s.service == 0 || ttft < s.service):
		s.service = ttft
	}
}

// decoding counts a request as decoding since at without its TTFT (one
// whose first token came from another backend before a redirect).
func (s *slotTracker) decoding(at time.Time) {
	s.mu.Lock()
	if len(s.pend)+len(s.dec) < slotTrackerMax {
		s.dec = append(s.dec, at.UnixNano())
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
		remove(&s.pend, start.UnixNano())
		return
	}
	if !remove(&s.dec, first.UnixNano()) || !completed {
		return
	}
	s.learnDecode(at.Sub(first).Seconds())
}

// learnDecode adds one decode time d to the window, in place of the
// oldest when it is full.
func (s *slotTracker) learnDecode(d float64) {
	k := min(s.nDecode, slotDecodeWindow)
	xs := s.decodes[:k]
	if k == slotDecodeWindow {
		old := s.ring[s.nDecode%slotDecodeWindow]
		i, _ := slices.BinarySearch(xs, old)
		xs = slices.Delete(xs, i, i+1)
	}
	s.ring[s.nDecode%slotDecodeWindow] = d
	i, _ := slices.BinarySearch(xs, d)
	xs = slices.Insert(xs, i, d)
	copy(s.decodes[:], xs)
	s.above[len(xs)] = 0
	for j := len(xs) - 1; j >= 0; j-- {
		s.above[j] = s.above[j+1] + xs[j]
	}
	s.nDecode++
}

// residual is the mean time left, seconds, to an answer decoding for
// age seconds: the mean of the recent decode times longer than age, less
// age; 0 when none was (it is due).
func (s *slotTracker) residual(age float64) float64 {
	k := min(s.nDecode, slotDecodeWindow)
	i, _ := slices.BinarySearch(s.decodes[:k], age)
	for i < k && s.decodes[i] <= age {
		i++
	}
	if i == k {
		return 0
	}
	return s.above[i]/float64(k-i) - age
}

// meanDecode is the mean of the recent decode times.
func (s *slotTracker) meanDecode() float64 {
	return s.above[0] / float64(min(s.nDecode, slotDecodeWindow))
}

// remove deletes the first element equal to v, keeping the order.
func remove(xs *[]int64, v int64) bool {
	for i, x := range *xs {
		if x == v {
			*xs = append((*xs)[:i], (*xs)[i+1:]...)
			return true
		}
	}
	return false
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
	if s.nDecode == 0 || n == 0 || n > slotWaitMaxInFlight {
		return
	}
	t := now.UnixNano()
	held := s.held[:0]
	for _, f := range s.dec {
		held = insertSorted(held, 0, s.residual(float64(t-f)/1e9))
	}
	s.held = held
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
	for _, d := range s.pend {
		var end float64
		if held := len(rel) - lo; held < m {
			// A free slot: in prefill since it came.
			end = max(0, s.service-float64(now-d)/1e9) + decode
		} else {
			// Its slot frees when held−m+1 of those holding them end.
			lo += held - m
			end = rel[lo] + s.service + decode
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

package sched

import (
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
	// decode is the exponentially weighted mean of a request's first
	// token to its end, seconds; service the time a request takes to its
	// first token once it has a slot: the mean TTFT of the requests that
	// found nothing else in flight, or before there is one, the least
	// TTFT seen. (The mean TTFT of all requests counts the waits for
	// slots that the simulation adds itself.)
	decode, service float64
	nDecode, nAlone int
	// rel is the simulation's scratch.
	rel []float64
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

// slotTrackerAlpha is the weight of each new decode or TTFT in the means.
const slotTrackerAlpha = 0.1

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
	d := at.Sub(first).Seconds()
	if s.nDecode == 0 {
		s.decode = d
	} else {
		s.decode += slotTrackerAlpha * (d - s.decode)
	}
	s.nDecode++
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
// decoding one ending a mean decode time after its first token, each
// pending one taking its service time and a mean decode once a slot is
// free.
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

// simulate is waits for m slots. rel holds the times from now at which
// the slots held free, sorted; the first len(rel)−m+1 of them must pass
// before one is free for the next request in line (more requests may be
// decoding than m: then m is wrong, and it is scored by how wrong).
func (s *slotTracker) simulate(now int64, m int) float64 {
	rel := s.rel[:0]
	for _, f := range s.dec {
		rel = append(rel, max(0, s.decode-float64(now-f)/1e9))
	}
	// rel is sorted: first tokens came in order.
	lo := 0
	for _, d := range s.pend {
		var end float64
		if held := len(rel) - lo; held < m {
			// A free slot: in prefill since it came.
			end = max(0, s.service-float64(now-d)/1e9) + s.decode
		} else {
			// Its slot frees when held−m+1 of those holding them end.
			lo += held - m
			end = rel[lo] + s.service + s.decode
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

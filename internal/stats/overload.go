package stats

import (
	"fmt"
	"slices"

	"github.com/ttft-dev/ttft/internal/record"
)

// Overload says why a finished run looks overloaded, or "". Three signs,
// each a queue growing without bound rather than a merely slow server:
//   - open loop: achieved throughput below 80% of the offered rate
//     (offeredRate > 0, requests per second);
//   - schedule lag P99 above 1 s (the client itself could not keep up, or
//     a cap on requests in flight held them back);
//   - TTFT rising through the run: the median of the last quarter of
//     requests (by send time) above twice the first quarter's and at least
//     50 ms higher.
//
// An overloaded run's latencies grow with its length: they describe how
// long it ran, not a steady state.
//
// A closed loop (ClosedLoop) holds a fixed number of requests in flight, so
// its queue cannot grow without bound: a TTFT that climbs after its first
// burst is the burst settling, not overload, and is not flagged.
func Overload(s *record.Summary, recs []record.Record, offeredRate float64) string {
	if offeredRate > 0 && s.Requests.Completed >= 10 {
		if got := s.Throughput.RequestsPerS; got < 0.8*offeredRate {
			return fmt.Sprintf("throughput %.2f req/s is below 80%% of the offered %.4g req/s", got, offeredRate)
		}
	}
	if s.ScheduleLag.Count > 0 && s.ScheduleLag.P99 > 1000 {
		return fmt.Sprintf("schedule lag P99 %.0f ms: requests queued before they could be sent", s.ScheduleLag.P99)
	}
	if first, last, ok := ttftTrend(recs); ok && !ClosedLoop(recs) && last > 2*first && last-first >= 50 {
		return fmt.Sprintf("TTFT median rose from %.0f ms (first quarter) to %.0f ms (last quarter): the queue grows", first, last)
	}
	return ""
}

// ttftTrend is the median TTFT of the first and the last quarter of the
// measured, completed requests by send time (at least 20 of them).
func ttftTrend(recs []record.Record) (first, last float64, ok bool) {
	var rs []record.Record
	for _, r := range recs {
		if !r.Warmup && r.OK() && r.TTFTMs > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) < 20 {
		return 0, 0, false
	}
	slices.SortFunc(rs, func(a, b record.Record) int { return a.Sent.Compare(b.Sent) })
	q := len(rs) / 4
	med := func(part []record.Record) float64 {
		xs := make([]float64, len(part))
		for i, r := range part {
			xs[i] = r.TTFTMs
		}
		slices.Sort(xs)
		return Quantile(xs, 0.5)
	}
	return med(rs[:q]), med(rs[len(rs)-q:]), true
}

// ClosedLoop reports whether recs are known to come from a closed loop:
// every measured request was sent at its intended time exactly, as the
// closed-loop runners record it (an open loop's intended times come from a
// schedule, and the send follows). Records without intended times (older
// files) are not known to be closed.
func ClosedLoop(recs []record.Record) bool {
	n := 0
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			continue
		}
		if r.Intended.IsZero() || !r.Intended.Equal(r.Sent) {
			return false
		}
		n++
	}
	return n > 0
}

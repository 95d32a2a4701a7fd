package stats

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// ParetoPoint is one configuration on the cost/latency plane.
type ParetoPoint struct {
	Name string `json:"name"`
	// Cost is what the front minimises on its x axis: USD per million
	// output tokens in `ttft pareto`.
	Cost float64 `json:"cost"`
	// Latency is the y axis in ms (TTFT P95 by default).
	Latency float64 `json:"latency_ms"`
	// Throughput in requests per second, for the table and plot labels.
	Throughput float64 `json:"throughput_rps,omitempty"`
	// TokensPerS is output tokens per second.
	TokensPerS float64 `json:"output_tokens_per_s,omitempty"`
	// CostPerRequest and CostPerHour in USD.
	CostPerRequest float64 `json:"cost_per_request,omitempty"`
	CostPerHour    float64 `json:"cost_per_hour,omitempty"`
	// Optimal is set by MarkPareto: no other point is at least as cheap and
	// as fast and strictly better in one of them.
	Optimal bool              `json:"optimal"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// dominates reports whether p is at least as good as q on both axes and
// strictly better on one.
func dominates(p, q ParetoPoint) bool {
	return p.Cost <= q.Cost && p.Latency <= q.Latency && (p.Cost < q.Cost || p.Latency < q.Latency)
}

func validPoint(p ParetoPoint) bool {
	return !math.IsNaN(p.Cost) && !math.IsNaN(p.Latency) && !math.IsInf(p.Cost, 0) && !math.IsInf(p.Latency, 0)
}

// MarkPareto returns a copy of points, in the same order, with Optimal set
// on the non-dominated ones. Points with a NaN or infinite coordinate are
// never optimal and dominate nothing. Identical points are both optimal.
func MarkPareto(points []ParetoPoint) []ParetoPoint {
	out := slices.Clone(points)
	// Sort indices by cost, then latency: a point is optimal when its
	// latency is below every earlier (cheaper or equal) point's.
	idx := make([]int, 0, len(out))
	for i := range out {
		out[i].Optimal = false
		if validPoint(out[i]) {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		pa, pb := out[a], out[b]
		if c := cmp.Compare(pa.Cost, pb.Cost); c != 0 {
			return c
		}
		return cmp.Compare(pa.Latency, pb.Latency)
	})
	best := math.Inf(1)
	var prev *ParetoPoint
	for _, i := range idx {
		p := &out[i]
		switch {
		case p.Latency < best:
			p.Optimal = true
			best = p.Latency
		case prev != nil && prev.Optimal && p.Cost == prev.Cost && p.Latency == prev.Latency:
			p.Optimal = true // a duplicate of an optimal point
		}
		prev = p
	}
	return out
}

// ParetoFront returns the Pareto-optimal points sorted by cost (then
// latency, then name): the staircase a plot draws.
func ParetoFront(points []ParetoPoint) []ParetoPoint {
	var front []ParetoPoint
	for _, p := range MarkPareto(points) {
		if p.Optimal {
			front = append(front, p)
		}
	}
	slices.SortStableFunc(front, func(a, b ParetoPoint) int {
		if c := cmp.Compare(a.Cost, b.Cost); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Latency, b.Latency); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return front
}

// CheapestWithin returns the cheapest point whose latency is at most
// limitMs, and false when none is: the configuration to buy for a latency
// SLO. It is always on the front.
func CheapestWithin(points []ParetoPoint, limitMs float64) (ParetoPoint, bool) {
	var best ParetoPoint
	found := false
	for _, p := range ParetoFront(points) {
		if p.Latency <= limitMs && (!found || p.Cost < best.Cost) {
			best, found = p, true
		}
	}
	return best, found
}

// GPUCost prices a self-hosted configuration: gpus GPUs at usdPerGPUHour
// serving the measured throughput. Cost per million output tokens and per
// request follow from the hourly cost; they assume the GPUs are paid for
// all the time and the measured throughput is what they sustain, so runs
// at saturation give capacity costs and runs at light load overstate them.
func GPUCost(usdPerGPUHour float64, gpus int, requestsPerS, outputTokensPerS float64) (perHour, perMTokens, perRequest float64) {
	perHour = usdPerGPUHour * float64(gpus)
	perS := perHour / 3600
	perMTokens, perRequest = math.NaN(), math.NaN()
	if outputTokensPerS > 0 {
		perMTokens = perS / outputTokensPerS * 1e6
	}
	if requestsPerS > 0 {
		perRequest = perS / requestsPerS
	}
	return perHour, perMTokens, perRequest
}

// APICost prices a hosted API billed per million input and output tokens.
// It returns USD per million output tokens including the input share (so
// that it compares with GPUCost's figure, which pays for prompts too), per
// request, and per hour at the measured rate.
func APICost(usdPerMInput, usdPerMOutput float64, requests int, inputTokens, outputTokens, requestsPerS float64) (perHour, perMTokens, perRequest float64) {
	total := (inputTokens*usdPerMInput + outputTokens*usdPerMOutput) / 1e6
	perMTokens, perRequest, perHour = math.NaN(), math.NaN(), math.NaN()
	if outputTokens > 0 {
		perMTokens = total / outputTokens * 1e6
	}
	if requests > 0 {
		perRequest = total / float64(requests)
		perHour = perRequest * requestsPerS * 3600
	}
	return perHour, perMTokens, perRequest
}

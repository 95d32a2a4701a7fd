package sweep

import (
	"fmt"
	"math"
	"strconv"
)

// AutoRates are the open-loop rates an automatic sweep measures between a
// synchronous run's throughput (one request at a time: the lowest load that
// keeps the server busy) and the maximum throughput (a saturating closed
// loop): k rates spaced evenly strictly inside (sync, max), as GuideLLM's
// sweep profile spaces them. Below sync the server idles between requests
// and above max the queue can only grow, so neither end is worth a rate.
func AutoRates(sync, max float64, k int) ([]float64, error) {
	switch {
	case !(sync > 0) || math.IsInf(sync, 0):
		return nil, fmt.Errorf("synchronous throughput %v req/s: the single-request run completed nothing", sync)
	case !(max > sync) || math.IsInf(max, 0):
		return nil, fmt.Errorf("maximum throughput %.3g req/s is not above the synchronous %.3g req/s: the server does not serve more at higher concurrency, so there are no rates to sweep between", max, sync)
	case k < 1:
		return nil, fmt.Errorf("number of rates %d must be at least 1", k)
	}
	out := make([]float64, k)
	step := (max - sync) / float64(k+1)
	for i := range out {
		out[i] = roundRate(sync + step*float64(i+1))
	}
	return out, nil
}

// roundRate keeps three significant digits: rates read in tables and are
// passed on command lines, and more digits measure nothing.
func roundRate(r float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 3, 64), 64)
	if err != nil {
		return r
	}
	return v
}

package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// SearchOptions bounds the SLO search.
type SearchOptions struct {
	Lo, Hi float64 // the bracket; Lo > 0
	// Integer rounds probes (concurrency).
	Integer bool
	// Tolerance stops when (hi-lo)/lo is below it (default 0.05).
	Tolerance float64
	// Repeats runs a probe this many times once the bracket is within
	// 4×Tolerance, passing it on a strict majority (default 3), since a
	// single noisy run near the boundary decides the answer.
	Repeats int
	// MaxRuns caps the total number of runs (default 30).
	MaxRuns int
}

// Probe is one evaluation of the search.
type Probe struct {
	Value  float64
	Passes int
	Runs   int
	Pass   bool
}

// SearchResult is the highest passing value found.
type SearchResult struct {
	Best   float64 // 0 when even Lo fails
	Probes []Probe
	// Note explains an edge: Lo failing, Hi passing, or the run cap.
	Note string
}

// PassFunc runs one benchmark at value and reports whether every SLO held.
type PassFunc func(ctx context.Context, value float64) (bool, error)

// Search finds, by bisection, the highest value in [Lo, Hi] at which pass
// holds, assuming it holds below some threshold and fails above it.
func Search(ctx context.Context, opt SearchOptions, pass PassFunc) (SearchResult, error) {
	if !(opt.Lo > 0) || !(opt.Hi > opt.Lo) {
		return SearchResult{}, fmt.Errorf("search bracket needs 0 < lo < hi, got %v..%v", opt.Lo, opt.Hi)
	}
	if opt.Tolerance <= 0 {
		opt.Tolerance = 0.05
	}
	if opt.Repeats <= 0 {
		opt.Repeats = 3
	}
	if opt.MaxRuns <= 0 {
		opt.MaxRuns = 30
	}
	var res SearchResult
	runs := 0
	probe := func(v float64, repeats int) (bool, error) {
		p := Probe{Value: v}
		for i := 0; i < repeats; i++ {
			if runs >= opt.MaxRuns {
				return false, errRunCap
			}
			runs++
			ok, err := pass(ctx, v)
			if err != nil {
				return false, err
			}
			p.Runs++
			if ok {
				p.Passes++
			}
			// Stop early once the majority is decided.
			if p.Passes*2 > repeats || (p.Runs-p.Passes)*2 >= repeats {
				break
			}
		}
		p.Pass = p.Passes*2 > p.Runs
		res.Probes = append(res.Probes, p)
		return p.Pass, nil
	}
	round := func(v float64) float64 {
		if opt.Integer {
			return math.Round(v)
		}
		return v
	}
	lo, hi := round(opt.Lo), round(opt.Hi)
	ok, err := probe(lo, 1)
	if err != nil {
		return res, err
	}
	if !ok {
		res.Note = fmt.Sprintf("the SLOs fail already at the lower bound %g", lo)
		return res, nil
	}
	ok, err = probe(hi, 1)
	if err != nil {
		return res, err
	}
	if ok {
		res.Best = hi
		res.Note = fmt.Sprintf("the SLOs still hold at the upper bound %g; raise --hi", hi)
		return res, nil
	}
	for {
		if (hi-lo)/lo <= opt.Tolerance || (opt.Integer && hi-lo <= 1) {
			break
		}
		mid := round((lo + hi) / 2)
		if mid <= lo || mid >= hi {
			break
		}
		reps := 1
		if (hi-lo)/lo <= 4*opt.Tolerance || (opt.Integer && hi-lo <= 4) {
			reps = opt.Repeats
		}
		ok, err := probe(mid, reps)
		if errors.Is(err, errRunCap) {
			res.Note = fmt.Sprintf("stopped after %d runs (--max-runs); the answer is within [%g, %g]", opt.MaxRuns, lo, hi)
			break
		}
		if err != nil {
			return res, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	res.Best = lo
	return res, nil
}

var errRunCap = errors.New("run cap reached")

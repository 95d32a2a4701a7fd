package sim

import (
	"context"
	"fmt"
	"math"
)

// FitServed calibrates an engine profile to measured operating points of one
// deployment (typically a short `ttft bench` sweep of a real endpoint): it
// starts from the catalog profile base and searches, by coordinate descent
// in log space, the factors a black-box endpoint reveals — compute and
// memory efficiency, attention's efficiency relative to the GEMMs, the
// per-step overhead, and the front end's fixed cost per request and
// contention per request in flight — minimising the mean absolute log
// error of TTFT, inter-token time and throughput over rows. Absolute, not
// squared: a run disturbed by something outside the endpoint (another
// process on a shared host) then pulls the fit by its count, not by the
// square of its error. Every row is
// simulated for every candidate, so keep rows few (a sweep of 3–6 points).
// The returned profile keeps base's name; rename it before writing it out.
func FitServed(ctx context.Context, cat *Catalog, base string, rows []CorpusRow) (EngineProfile, float64, error) {
	bp, err := cat.Engine(base)
	if err != nil {
		return EngineProfile{}, 0, err
	}
	type resolved struct {
		row *CorpusRow
		d   *Deployment
	}
	var rs []resolved
	for i := range rows {
		r := &rows[i]
		r.Profile = base
		d, err := resolveRow(cat, r)
		if err != nil {
			return EngineProfile{}, 0, err
		}
		rs = append(rs, resolved{r, d})
	}
	if len(rs) == 0 {
		return *bp, 0, fmt.Errorf("calibrate: no measured points")
	}
	// Parameters: multiplicative scales on the physics, absolute values
	// (with a floor, so a factor at 0 can move) for the front end.
	type param struct {
		get func(*EngineProfile) *float64
		lo  float64
		hi  float64
	}
	params := []param{
		{func(p *EngineProfile) *float64 { return &p.ComputeEffMax }, 0.1, 0.95},
		{func(p *EngineProfile) *float64 { return &p.MemEff }, 0.2, 0.95},
		{func(p *EngineProfile) *float64 { return &p.AttnEff }, 0.02, 1},
		{func(p *EngineProfile) *float64 { return &p.StepOverheadMs }, 0.05, 50},
		{func(p *EngineProfile) *float64 { return &p.APIOverheadMs }, 0.2, 500},
		{func(p *EngineProfile) *float64 { return &p.APIInflightMs }, 0.01, 100},
	}
	loss := func(p EngineProfile) (float64, error) {
		var sum float64
		var n int
		for _, r := range rs {
			d := *r.d
			d.Profile = p
			if r.row.Frontend == "offline" {
				d.Profile.APIOverheadMs, d.Profile.APIInflightMs = 0, 0
			}
			pr, err := predictRow(ctx, &d, r.row)
			if err != nil {
				return 0, err
			}
			for _, pm := range [][2]float64{{pr.TTFTMs, r.row.TTFTMs}, {pr.ITLMs, r.row.ITLMs}, {pr.Tput, r.row.Tput}} {
				if e, ok := logErr(pm[0], pm[1]); ok {
					sum += math.Abs(e)
					n++
				}
			}
		}
		if n == 0 {
			return 0, fmt.Errorf("calibrate: the points publish no TTFT, ITL or throughput")
		}
		return sum / float64(n), nil
	}
	cur := *bp
	if cur.AttnEff <= 0 {
		cur.AttnEff = 1 // 0 means "as the GEMMs": start the search there
	}
	best, err := loss(cur)
	if err != nil {
		return cur, 0, err
	}
	// The front end's two factors interact (a fixed cost and a cost per
	// request in flight trade off at low load) and may start at 0, where a
	// multiplicative search cannot move: start from the best point of a
	// coarse grid.
	for _, fixed := range []float64{bp.APIOverheadMs, 2, 5, 10, 20, 40} {
		for _, inflight := range []float64{0, 0.3, 1, 3, 10} {
			t := cur
			t.APIOverheadMs, t.APIInflightMs = fixed, inflight
			l, err := loss(t)
			if err != nil {
				return cur, 0, err
			}
			if l < best {
				cur, best = t, l
			}
		}
	}
	for _, step := range []float64{1, 0.5, 0.25, 0.1} {
		for round := 0; round < 3; round++ {
			improved := false
			for _, pa := range params {
				for _, dir := range []float64{1, -1} {
					for k := 0; k < 8; k++ {
						t := cur
						q := pa.get(&t)
						v := math.Max(*q, pa.lo) * math.Exp2(dir*step)
						if v < pa.lo || v > pa.hi {
							break
						}
						*q = v
						l, err := loss(t)
						if err != nil {
							return cur, 0, err
						}
						if l >= best-1e-12 {
							break
						}
						cur, best, improved = t, l, true
					}
				}
			}
			if !improved {
				break
			}
			if err := ctx.Err(); err != nil {
				return cur, best, err
			}
		}
	}
	return cur, best, nil
}

// PredictRows predicts rows on cat with their named profiles (no scaling).
func PredictRows(ctx context.Context, cat *Catalog, rows []CorpusRow) ([]CorpusResult, error) {
	return evalRows(ctx, cat, rows, UnitScales())
}

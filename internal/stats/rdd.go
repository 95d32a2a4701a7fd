package stats

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// RDDOptions configures a regression-discontinuity analysis.
type RDDOptions struct {
	// Cutoff on the running variable (TTFT ms); sessions at or above it are
	// "treated" (slow). Default 300.
	Cutoff float64
	// Bandwidth of the local regressions; 0 picks the Imbens–Kalyanaraman
	// MSE-optimal bandwidth.
	Bandwidth float64
	// Donut drops sessions within ±Donut of the cutoff (the article's
	// "±20 ms fuzzy band"): where TTFT is measured with error or users
	// cannot tell 295 from 305 ms, the sessions nearest the cutoff say
	// least about the jump.
	Donut float64
	// Placebos are fake cutoffs at which no jump should appear; nil picks
	// the median and the quartile nearer the cutoff of each side's TTFT.
	// Each uses only the sessions on its own side of the real cutoff.
	Placebos []float64
	// NoPlacebos skips them.
	NoPlacebos bool
	// Treatment, when set (one value per session, 0/1 or a probability),
	// makes the design fuzzy: crossing the cutoff changes the chance of
	// treatment (say, the user actually seeing a slow answer, or a
	// fallback being served) rather than deciding it, and the effect is
	// the outcome's jump divided by the treatment's jump (Wald / local
	// IV). Sessions with a NaN treatment are dropped.
	Treatment []float64
}

// Estimate is a point estimate with its standard error, 95% interval and
// two-sided p-value (normal).
type Estimate struct {
	Value  float64    `json:"value"`
	SE     float64    `json:"se"`
	CI95   [2]float64 `json:"ci95"`
	PValue float64    `json:"p_value"`
}

func newEstimate(v, se float64) Estimate {
	e := Estimate{Value: v, SE: se, CI95: [2]float64{v - 1.959964*se, v + 1.959964*se}, PValue: math.NaN()}
	if se > 0 {
		e.PValue = 2 * distuv.UnitNormal.Survival(math.Abs(v/se))
	}
	return e
}

// McCrary is the density-discontinuity test (McCrary 2008): a jump in the
// density of the running variable at the cutoff suggests sorting or
// manipulation, which invalidates the design.
type McCrary struct {
	// Theta is log f(c+) − log f(c−).
	Theta     float64 `json:"theta"`
	SE        float64 `json:"se"`
	PValue    float64 `json:"p_value"`
	BinWidth  float64 `json:"bin_width"`
	Bandwidth float64 `json:"bandwidth"`
}

// Balance compares a covariate just above and just below the cutoff.
// Raw means within the bandwidth differ whenever the covariate trends with
// TTFT, even in a valid design, so the SMD is the covariate's own
// local-linear jump at the cutoff divided by its pooled standard deviation
// within the bandwidth; |SMD| < 0.1 is the usual sign of balance.
type Balance struct {
	Name      string   `json:"name"`
	MeanBelow float64  `json:"mean_below"` // within the bandwidth
	MeanAbove float64  `json:"mean_above"`
	SMD       float64  `json:"smd"`
	Jump      Estimate `json:"jump"`
}

func balance(name string, col, xs []float64, c, h, donut float64) Balance {
	b := Balance{Name: name, MeanBelow: math.NaN(), MeanAbove: math.NaN(), SMD: math.NaN(), Jump: newEstimate(math.NaN(), math.NaN())}
	var lo, hi, jx, jy []float64
	for i, v := range xs {
		if math.IsNaN(col[i]) || math.Abs(v-c) > h || (donut > 0 && math.Abs(v-c) < donut) {
			continue
		}
		jx = append(jx, v)
		jy = append(jy, col[i])
		if v < c {
			lo = append(lo, col[i])
		} else {
			hi = append(hi, col[i])
		}
	}
	if len(lo) < 2 || len(hi) < 2 {
		return b
	}
	ml, vl := stat.MeanVariance(lo, nil)
	mh, vh := stat.MeanVariance(hi, nil)
	b.MeanBelow, b.MeanAbove = ml, mh
	j, err := rdJump(jx, jy, c, h, 1)
	if err != nil {
		return b
	}
	b.Jump = newEstimate(j.tau, j.se)
	if s := math.Sqrt((vl + vh) / 2); s > 0 {
		b.SMD = j.tau / s
	} else {
		b.SMD = 0
	}
	return b
}

// Placebo is the estimate at a fake cutoff.
type Placebo struct {
	Cutoff    float64  `json:"cutoff"`
	Bandwidth float64  `json:"bandwidth"`
	Estimate  Estimate `json:"estimate"`
	N         int      `json:"n"`
}

// RDDResult is the article's §4.1 table.
type RDDResult struct {
	Cutoff float64 `json:"cutoff"`
	// Design is "sharp" or "fuzzy".
	Design    string  `json:"design"`
	Bandwidth float64 `json:"bandwidth"`
	// BandwidthRule says how Bandwidth was chosen.
	BandwidthRule string  `json:"bandwidth_rule"`
	Donut         float64 `json:"donut,omitempty"`
	N             int     `json:"n"`
	NBelow        int     `json:"n_below"` // sessions within the bandwidth
	NAbove        int     `json:"n_above"`
	// LevelBelow and LevelAbove are the outcome's fitted values at the
	// cutoff from each side.
	LevelBelow float64 `json:"level_below"`
	LevelAbove float64 `json:"level_above"`
	// Conventional is the local-linear jump with its conventional
	// (heteroskedasticity-robust) interval; Robust is the bias-corrected
	// estimate with the robust interval of Calonico, Cattaneo and
	// Titiunik (2014) with pilot bandwidth equal to the main one (ρ = 1),
	// which is the local-quadratic fit and its sandwich variance.
	Conventional Estimate `json:"conventional"`
	// FirstStage is the fuzzy design's jump in treatment at the cutoff
	// (local linear); nil in a sharp design.
	FirstStage *Estimate `json:"first_stage,omitempty"`
	Robust     Estimate  `json:"robust"`
	Density    McCrary   `json:"density"`
	Balance    []Balance `json:"balance,omitempty"`
	Placebos   []Placebo `json:"placebos,omitempty"`
	// Naive is the average marginal effect of being above the cutoff (of
	// being treated, in a fuzzy design) from a regression on the whole sample (logistic for a 0/1 outcome, linear
	// otherwise) with the covariates: what one gets without the design.
	Naive       Estimate `json:"naive"`
	NaiveMethod string   `json:"naive_method"`
	Warnings    []string `json:"warnings,omitempty"`
}

// Column is a named covariate.
type Column struct {
	Name string
	Data []float64
}

// RDD estimates the jump in outcome y at opt.Cutoff of running variable x.
// Rows where x or y is NaN are dropped (a covariate's NaN drops the row
// from that covariate's balance and from the naive regression only).
func RDD(x, y []float64, covs []Column, opt RDDOptions) (RDDResult, error) {
	if err := checkRDDInput(x, y, covs, &opt); err != nil {
		return RDDResult{}, err
	}
	d := newRDDSample(x, y, opt)
	res := RDDResult{Cutoff: d.c, Design: "sharp", Donut: opt.Donut, N: len(d.xs)}
	if d.fuzzy {
		res.Design = "fuzzy"
	}
	if below, above := d.sides(); below < 20 || above < 20 {
		return res, fmt.Errorf("rdd: need at least 20 sessions on each side of the cutoff %g, got %d below and %d above", d.c, below, above)
	}
	h, err := d.bandwidth(opt, &res)
	if err != nil {
		return res, err
	}
	res.Bandwidth = h
	if err := d.estimate(h, &res); err != nil {
		return res, err
	}
	d.diagnose(covs, h, opt, &res)
	// The naive comparison regresses on what the design is about: being
	// above the cutoff (sharp) or being treated (fuzzy).
	treated := make([]float64, len(x))
	for i := range x {
		switch {
		case d.fuzzy:
			treated[i] = opt.Treatment[i]
		case math.IsNaN(x[i]):
			treated[i] = math.NaN()
		case x[i] >= d.c:
			treated[i] = 1
		}
	}
	res.Naive, res.NaiveMethod, err = naiveEffect(treated, y, covs)
	if err != nil {
		res.Warnings = append(res.Warnings, "naive regression unavailable: "+err.Error())
	}
	return res, nil
}

// checkRDDInput refuses inputs of unequal lengths and impossible options,
// and sets the default cutoff.
func checkRDDInput(x, y []float64, covs []Column, opt *RDDOptions) error {
	if len(x) != len(y) {
		return fmt.Errorf("rdd: %d running-variable values but %d outcomes", len(x), len(y))
	}
	for _, c := range covs {
		if len(c.Data) != len(x) {
			return fmt.Errorf("rdd: covariate %q has %d values, want %d", c.Name, len(c.Data), len(x))
		}
	}
	if opt.Treatment != nil && len(opt.Treatment) != len(x) {
		return fmt.Errorf("rdd: treatment has %d values, want %d", len(opt.Treatment), len(x))
	}
	if opt.Cutoff == 0 {
		opt.Cutoff = 300
	}
	if !(opt.Donut >= 0) || !(opt.Bandwidth >= 0) || math.IsInf(opt.Donut+opt.Bandwidth, 0) || math.IsNaN(opt.Cutoff) || math.IsInf(opt.Cutoff, 0) {
		return errors.New("rdd: the cutoff must be finite and the bandwidth and donut finite and not negative")
	}
	return nil
}

// rddSample is the data of an RDD: the rows kept (xs, ys, ds) and, outside
// the donut, the rows that estimate the jump (ex, ey, ed).
type rddSample struct {
	c          float64
	fuzzy      bool
	keep       []int
	xs, ys, ds []float64
	ex, ey, ed []float64
}

func newRDDSample(x, y []float64, opt RDDOptions) *rddSample {
	d := &rddSample{c: opt.Cutoff, fuzzy: opt.Treatment != nil}
	for i := range x {
		if !math.IsNaN(x[i]) && !math.IsNaN(y[i]) && (!d.fuzzy || !math.IsNaN(opt.Treatment[i])) {
			d.keep = append(d.keep, i)
		}
	}
	d.xs, d.ys = pick(x, d.keep), pick(y, d.keep)
	if d.fuzzy {
		d.ds = pick(opt.Treatment, d.keep)
	}
	// The donut removes sessions from the estimation, not from the density
	// test (manipulation would show exactly there).
	d.ex, d.ey, d.ed = d.xs, d.ys, d.ds
	if opt.Donut > 0 {
		d.ex, d.ey, d.ed = nil, nil, nil
		for i, v := range d.xs {
			if math.Abs(v-d.c) >= opt.Donut {
				d.ex = append(d.ex, v)
				d.ey = append(d.ey, d.ys[i])
				if d.fuzzy {
					d.ed = append(d.ed, d.ds[i])
				}
			}
		}
	}
	return d
}

func (d *rddSample) sides() (below, above int) {
	for _, v := range d.xs {
		if v < d.c {
			below++
		} else {
			above++
		}
	}
	return below, above
}

// bandwidth is the user's, or the MSE-optimal one, widened to clear the
// donut.
func (d *rddSample) bandwidth(opt RDDOptions, res *RDDResult) (float64, error) {
	h := opt.Bandwidth
	res.BandwidthRule = "user"
	if h == 0 {
		// On all sessions: the rule's pilot estimates of the density and
		// variance at the cutoff need the sessions the donut removes.
		var err error
		h, err = ikBandwidth(d.xs, d.ys, d.c)
		if err != nil {
			return 0, fmt.Errorf("rdd: choosing the bandwidth: %w", err)
		}
		res.BandwidthRule = "Imbens–Kalyanaraman (2012) MSE-optimal, triangular kernel"
		if opt.Donut > 0 && h < 3*opt.Donut {
			res.Warnings = append(res.Warnings, fmt.Sprintf("the optimal bandwidth %.3g is under three donut widths; widened to %.3g", h, 3*opt.Donut))
			h = 3 * opt.Donut
		}
	}
	if opt.Donut > 0 && h <= 2*opt.Donut {
		return 0, fmt.Errorf("rdd: bandwidth %.3g leaves too little data outside the ±%g donut", h, opt.Donut)
	}
	return h, nil
}

// estimate fits the jump at bandwidth h: local-linear (conventional), its
// bias-robust local-quadratic interval, and in a fuzzy design the first
// stage.
func (d *rddSample) estimate(h float64, res *RDDResult) error {
	estimate := func(p int) (jumpFit, error) { return rdJump(d.ex, d.ey, d.c, h, p) }
	if d.fuzzy {
		_, first, err := fuzzyJump(d.ex, d.ey, d.ed, d.c, h, 1)
		res.FirstStage = &first
		if err != nil {
			return fmt.Errorf("rdd: %w", err)
		}
		if z := math.Abs(first.Value / first.SE); z < 3.2 {
			res.Warnings = append(res.Warnings, fmt.Sprintf("weak first stage: the treatment jumps by %.3g (z = %.1f, F < 10); the fuzzy estimate is unreliable", first.Value, z))
		}
		estimate = func(p int) (jumpFit, error) {
			j, _, err := fuzzyJump(d.ex, d.ey, d.ed, d.c, h, p)
			return j, err
		}
	}
	jump, err := estimate(1)
	if err != nil {
		return fmt.Errorf("rdd: local-linear fit: %w", err)
	}
	res.NBelow, res.NAbove = jump.nBelow, jump.nAbove
	res.LevelBelow, res.LevelAbove = jump.levelBelow, jump.levelAbove
	res.Conventional = newEstimate(jump.tau, jump.se)
	if rb, err := estimate(2); err == nil {
		res.Robust = newEstimate(rb.tau, rb.se)
	} else {
		res.Warnings = append(res.Warnings, "robust interval unavailable: "+err.Error())
		res.Robust = newEstimate(math.NaN(), math.NaN())
	}
	if jump.nBelow < 50 || jump.nAbove < 50 {
		res.Warnings = append(res.Warnings, fmt.Sprintf("few sessions within the bandwidth (%d below, %d above): the intervals are unreliable", jump.nBelow, jump.nAbove))
	}
	return nil
}

// diagnose adds the checks of the design: the density test, covariate
// balance and placebo cutoffs.
func (d *rddSample) diagnose(covs []Column, h float64, opt RDDOptions, res *RDDResult) {
	if m, err := mcCrary(d.xs, d.c); err == nil {
		res.Density = m
	} else {
		res.Warnings = append(res.Warnings, "density test unavailable: "+err.Error())
		res.Density = McCrary{Theta: math.NaN(), SE: math.NaN(), PValue: math.NaN()}
	}
	for _, cv := range covs {
		res.Balance = append(res.Balance, balance(cv.Name, pick(cv.Data, d.keep), d.xs, d.c, h, opt.Donut))
		if b := res.Balance[len(res.Balance)-1]; math.Abs(b.SMD) >= 0.1 {
			res.Warnings = append(res.Warnings, fmt.Sprintf("covariate %s jumps at the cutoff (SMD %.3f): sessions just above differ from those just below", cv.Name, b.SMD))
		}
	}
	if opt.NoPlacebos {
		return
	}
	placebos := opt.Placebos
	if placebos == nil {
		placebos = defaultPlacebos(d.xs, d.c)
	}
	for _, pc := range placebos {
		if pc != d.c {
			res.Placebos = append(res.Placebos, d.placebo(pc))
		}
	}
}

// placebo estimates a jump at a cutoff where there is none, on the
// sessions on its side of the real cutoff only, so that the real jump
// cannot leak into it.
func (d *rddSample) placebo(pc float64) Placebo {
	var px, py []float64
	for i, v := range d.ex {
		if (pc < d.c && v < d.c) || (pc > d.c && v >= d.c) {
			px = append(px, v)
			py = append(py, d.ey[i])
		}
	}
	p := Placebo{Cutoff: pc, Estimate: newEstimate(math.NaN(), math.NaN())}
	ph, err := ikBandwidth(px, py, pc)
	if err == nil {
		p.Bandwidth = ph
		if j, err := rdJump(px, py, pc, ph, 1); err == nil {
			p.Estimate = newEstimate(j.tau, j.se)
			p.N = j.nBelow + j.nAbove
		}
	}
	return p
}

func pick(xs []float64, idx []int) []float64 {
	out := make([]float64, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

type jumpFit struct {
	tau, se                float64
	levelBelow, levelAbove float64
	nBelow, nAbove         int
}

// rdJump fits a local polynomial of order p on each side of c with a
// triangular kernel of bandwidth h and returns the difference of the
// intercepts with its sandwich standard error.
func rdJump(x, y []float64, c, h float64, p int) (jumpFit, error) {
	lo, err := localPolyMulti(x, [][]float64{y}, c, h, p, false)
	if err != nil {
		return jumpFit{}, fmt.Errorf("below the cutoff: %w", err)
	}
	hi, err := localPolyMulti(x, [][]float64{y}, c, h, p, true)
	if err != nil {
		return jumpFit{}, fmt.Errorf("above the cutoff: %w", err)
	}
	return jumpFit{
		tau: hi.b0[0] - lo.b0[0], se: math.Sqrt(hi.cov[0][0] + lo.cov[0][0]),
		levelBelow: lo.b0[0], levelAbove: hi.b0[0],
		nBelow: lo.n, nAbove: hi.n,
	}, nil
}

// fuzzyJump is the fuzzy-design (Wald) estimate: the jump in the outcome
// divided by the jump in the treatment probability, with the delta-method
// standard error that uses the covariance of the two jumps. It also
// returns the first stage (the treatment jump).
func fuzzyJump(x, y, d []float64, c, h float64, p int) (jumpFit, Estimate, error) {
	lo, err := localPolyMulti(x, [][]float64{y, d}, c, h, p, false)
	if err != nil {
		return jumpFit{}, Estimate{}, fmt.Errorf("below the cutoff: %w", err)
	}
	hi, err := localPolyMulti(x, [][]float64{y, d}, c, h, p, true)
	if err != nil {
		return jumpFit{}, Estimate{}, fmt.Errorf("above the cutoff: %w", err)
	}
	dy, dd := hi.b0[0]-lo.b0[0], hi.b0[1]-lo.b0[1]
	vy, vd := hi.cov[0][0]+lo.cov[0][0], hi.cov[1][1]+lo.cov[1][1]
	cyd := hi.cov[0][1] + lo.cov[0][1]
	first := newEstimate(dd, math.Sqrt(vd))
	if dd == 0 {
		return jumpFit{}, first, errors.New("the treatment does not jump at the cutoff: a fuzzy design needs it to")
	}
	tau := dy / dd
	v := (vy - 2*tau*cyd + tau*tau*vd) / (dd * dd)
	return jumpFit{tau: tau, se: math.Sqrt(math.Max(v, 0)), levelBelow: lo.b0[0], levelAbove: hi.b0[0], nBelow: lo.n, nAbove: hi.n}, first, nil
}

type sideFit struct {
	b0  []float64   // intercept per outcome
	cov [][]float64 // HC1 sandwich covariance of the intercepts
	n   int
}

// localPolyMulti is weighted least squares of each outcome in ys on
// (x−c)^0..p over the sessions on one side within h, with triangular
// weights 1 − |x−c|/h. The intercept is a linear combination Σ ℓᵢ·yᵢ of
// the outcomes, so its sandwich (HC1) variance is Σ ℓᵢ²·êᵢ² · n/(n−k), and
// the covariance between two outcomes' intercepts Σ ℓᵢ²·êᵢ·ê'ᵢ · n/(n−k).
func localPolyMulti(x []float64, ys [][]float64, c, h float64, p int, above bool) (sideFit, error) {
	k := p + 1
	m := len(ys)
	var idx []int
	var rows [][]float64
	var ws []float64
	for i, v := range x {
		d := v - c
		if (above && d < 0) || (!above && d >= 0) || math.Abs(d) >= h {
			continue
		}
		row := make([]float64, k)
		row[0] = 1
		for j := 1; j < k; j++ {
			row[j] = row[j-1] * d / h // scaled by h for conditioning
		}
		idx = append(idx, i)
		rows = append(rows, row)
		ws = append(ws, 1-math.Abs(d)/h)
	}
	n := len(rows)
	if n < k+3 {
		return sideFit{}, fmt.Errorf("%d sessions within bandwidth %.3g, need at least %d", n, h, k+3)
	}
	xtwx := make([]float64, k*k)
	xtwy := make([]float64, m*k)
	for i, r := range rows {
		w := ws[i]
		for a := range k {
			for b := a; b < k; b++ {
				xtwx[a*k+b] += w * r[a] * r[b]
			}
			for o := range m {
				xtwy[o*k+a] += w * r[a] * ys[o][idx[i]]
			}
		}
	}
	A := mat.NewSymDense(k, nil)
	for a := range k {
		for b := a; b < k; b++ {
			A.SetSym(a, b, xtwx[a*k+b])
		}
	}
	var chol mat.Cholesky
	if !chol.Factorize(A) {
		return sideFit{}, errors.New("the local design is singular (all sessions at one value?)")
	}
	var inv mat.SymDense
	if err := chol.InverseTo(&inv); err != nil && !isCondition(err) {
		return sideFit{}, err
	}
	beta := make([][]float64, m)
	for o := range m {
		beta[o] = make([]float64, k)
		for a := range k {
			for b := range k {
				beta[o][a] += inv.At(a, b) * xtwy[o*k+b]
			}
		}
	}
	out := sideFit{b0: make([]float64, m), cov: make([][]float64, m), n: n}
	for o := range m {
		out.b0[o] = beta[o][0]
		out.cov[o] = make([]float64, m)
	}
	e := make([]float64, m)
	for i, r := range rows {
		l := 0.0
		for a := range k {
			l += inv.At(0, a) * r[a]
		}
		l *= ws[i]
		for o := range m {
			e[o] = ys[o][idx[i]]
			for a := range k {
				e[o] -= r[a] * beta[o][a]
			}
		}
		for o := range m {
			for q := range m {
				out.cov[o][q] += l * l * e[o] * e[q]
			}
		}
	}
	hc1 := float64(n) / float64(n-k)
	for o := range m {
		for q := range m {
			out.cov[o][q] *= hc1
		}
	}
	return out, nil
}

// ikBandwidth is the Imbens–Kalyanaraman (2012, Review of Economic Studies)
// MSE-optimal bandwidth for the local-linear RD estimator with a
// triangular kernel:
//
//	h = 3.4375·[(σ²₋+σ²₊) / (f(c)·((m₂₊−m₂₋)² + r₊ + r₋))]^{1/5}·N^{−1/5}
//
// with a pilot bandwidth 1.84·S·N^{−1/5} for the density f(c) and the
// variances σ², a global cubic for the third derivative, local quadratics
// for the second derivatives m₂, and the regularisation terms r that keep
// h finite when the curvatures happen to agree.
func ikBandwidth(x, y []float64, c float64) (float64, error) {
	n := len(x)
	if n < 20 {
		return 0, fmt.Errorf("%d sessions are too few to choose a bandwidth", n)
	}
	sx := stat.StdDev(x, nil)
	if !(sx > 0) {
		return 0, errors.New("the running variable does not vary")
	}
	N := float64(n)
	h1 := 1.84 * sx * math.Pow(N, -0.2)
	var yl, yr []float64
	var nl, nr int
	for i, v := range x {
		if v < c {
			nl++
		} else {
			nr++
		}
		if math.Abs(v-c) < h1 {
			if v < c {
				yl = append(yl, y[i])
			} else {
				yr = append(yr, y[i])
			}
		}
	}
	if len(yl) < 3 || len(yr) < 3 || nl < 10 || nr < 10 {
		return 0, fmt.Errorf("too few sessions near the cutoff (%d below and %d above within the pilot bandwidth %.3g)", len(yl), len(yr), h1)
	}
	f := float64(len(yl)+len(yr)) / (2 * N * h1)
	vl, vr := stat.Variance(yl, nil), stat.Variance(yr, nil)
	if vl+vr == 0 {
		// A constant outcome near the cutoff: any bandwidth estimates a
		// zero jump; the pilot is as good as any.
		return h1, nil
	}

	// Third derivative from a global cubic with a jump, on the sessions
	// between the medians of each side.
	var left, right []float64
	for _, v := range x {
		if v < c {
			left = append(left, v)
		} else {
			right = append(right, v)
		}
	}
	slices.Sort(left)
	slices.Sort(right)
	lo, hi := Quantile(left, 0.5), Quantile(right, 0.5)
	var X [][]float64
	var Y []float64
	for i, v := range x {
		if v < lo || v > hi {
			continue
		}
		d := v - c
		t := 0.0
		if v >= c {
			t = 1
		}
		X = append(X, []float64{1, t, d, d * d, d * d * d})
		Y = append(Y, y[i])
	}
	m3 := 0.0
	if g, err := OLS([]string{"g0", "jump", "g1", "g2", "g3"}, X, Y); err == nil {
		m3 = 6 * g.Params[4].Value
	}
	if m3 == 0 || math.IsNaN(m3) {
		m3 = 1e-12
	}
	h2l := 3.56 * math.Pow(vl/(f*m3*m3), 1.0/7) * math.Pow(float64(nl), -1.0/7)
	h2r := 3.56 * math.Pow(vr/(f*m3*m3), 1.0/7) * math.Pow(float64(nr), -1.0/7)
	curv := func(h2 float64, above bool) (m2 float64, n2 int) {
		var X [][]float64
		var Y []float64
		for i, v := range x {
			d := v - c
			if (above && d < 0) || (!above && d >= 0) || math.Abs(d) > h2 {
				continue
			}
			X = append(X, []float64{1, d, d * d})
			Y = append(Y, y[i])
		}
		g, err := OLS([]string{"g0", "g1", "g2"}, X, Y)
		if err != nil {
			return 0, len(X)
		}
		return 2 * g.Params[2].Value, len(X)
	}
	m2l, n2l := curv(h2l, false)
	m2r, n2r := curv(h2r, true)
	rl, rr := 0.0, 0.0
	if n2l > 0 {
		rl = 2160 * vl / (float64(n2l) * math.Pow(h2l, 4))
	}
	if n2r > 0 {
		rr = 2160 * vr / (float64(n2r) * math.Pow(h2r, 4))
	}
	d2 := (m2r-m2l)*(m2r-m2l) + rl + rr
	h := 3.4375 * math.Pow((vl+vr)/(f*d2), 0.2) * math.Pow(N, -0.2)
	if math.IsNaN(h) || math.IsInf(h, 0) || h <= 0 {
		return 0, fmt.Errorf("the bandwidth rule gave %v", h)
	}
	return h, nil
}

// mcCrary is McCrary's (2008) density test: a histogram with bin width
// b = 2·S·n^{−1/2}, bins never straddling the cutoff, smoothed on each side
// by a local-linear regression with a triangular kernel; the bandwidth is
// his rule of thumb from global quartic fits to each side.
func mcCrary(x []float64, c float64) (McCrary, error) {
	n := len(x)
	N := float64(n)
	sx := stat.StdDev(x, nil)
	b := 2 * sx / math.Sqrt(N)
	if !(b > 0) {
		return McCrary{}, errors.New("the running variable does not vary")
	}
	mn, mx := slices.Min(x), slices.Max(x)
	// Bins aligned on the cutoff: bin j covers [c + j·b, c + (j+1)·b).
	jlo := int(math.Floor((mn - c) / b))
	jhi := int(math.Floor((mx - c) / b))
	if jhi-jlo > 2_000_000 {
		return McCrary{}, errors.New("too many histogram bins (the running variable has extreme outliers)")
	}
	counts := make([]float64, jhi-jlo+1)
	for _, v := range x {
		counts[int(math.Floor((v-c)/b))-jlo]++
	}
	var mids, heights []float64
	for k, cnt := range counts {
		j := k + jlo
		mids = append(mids, c+(float64(j)+0.5)*b)
		heights = append(heights, cnt/(N*b))
	}
	// Rule-of-thumb bandwidth per side, then averaged (McCrary 2008, §III).
	side := func(above bool) (float64, error) {
		var X [][]float64
		var Y []float64
		for k, m := range mids {
			if (m >= c) != above {
				continue
			}
			d := m - c
			X = append(X, []float64{1, d, d * d, d * d * d, d * d * d * d})
			Y = append(Y, heights[k])
		}
		g, err := OLS([]string{"a0", "a1", "a2", "a3", "a4"}, X, Y)
		if err != nil {
			return 0, err
		}
		v := g.Values()
		sumf2 := 0.0
		for _, row := range X {
			d := row[1]
			f2 := 2*v[2] + 6*v[3]*d + 12*v[4]*d*d
			sumf2 += f2 * f2
		}
		width := 0.0
		if len(X) > 0 {
			width = math.Abs(X[len(X)-1][1]-X[0][1]) + b
		}
		s2 := g.SSE / float64(g.DoF)
		if sumf2 == 0 {
			return 0, errors.New("flat density")
		}
		return 3.348 * math.Pow(s2*width/sumf2, 0.2), nil
	}
	hl, err1 := side(false)
	hr, err2 := side(true)
	var h float64
	switch {
	case err1 == nil && err2 == nil:
		h = (hl + hr) / 2
	case err1 == nil:
		h = hl
	case err2 == nil:
		h = hr
	default:
		return McCrary{}, fmt.Errorf("density bandwidth: %v", err1)
	}
	h = math.Max(h, 5*b)
	lo, err := localPolyMulti(mids, [][]float64{heights}, c, h, 1, false)
	if err != nil {
		return McCrary{}, fmt.Errorf("density below the cutoff: %w", err)
	}
	hi, err := localPolyMulti(mids, [][]float64{heights}, c, h, 1, true)
	if err != nil {
		return McCrary{}, fmt.Errorf("density above the cutoff: %w", err)
	}
	fl, fr := lo.b0[0], hi.b0[0]
	if !(fl > 0) || !(fr > 0) {
		return McCrary{}, fmt.Errorf("estimated density at the cutoff is not positive (%.3g below, %.3g above)", fl, fr)
	}
	theta := math.Log(fr) - math.Log(fl)
	se := math.Sqrt(1 / (N * h) * 24 / 5 * (1/fr + 1/fl))
	return McCrary{Theta: theta, SE: se, PValue: 2 * distuv.UnitNormal.Survival(math.Abs(theta/se)), BinWidth: b, Bandwidth: h}, nil
}

// naiveEffect regresses y on [1, treated, covariates] over every session
// with complete data and returns the average marginal effect of treated
// (0 → 1): logistic (IRLS) when y is 0/1, least squares otherwise.
func naiveEffect(treated, y []float64, covs []Column) (Estimate, string, error) {
	var X [][]float64
	var Y []float64
	binary := true
rows:
	for i := range treated {
		if math.IsNaN(treated[i]) || math.IsNaN(y[i]) {
			continue
		}
		row := []float64{1, treated[i]}
		for _, cv := range covs {
			if math.IsNaN(cv.Data[i]) {
				continue rows
			}
			row = append(row, cv.Data[i])
		}
		X = append(X, row)
		Y = append(Y, y[i])
		if y[i] != 0 && y[i] != 1 {
			binary = false
		}
	}
	names := []string{"intercept", "treated"}
	for _, cv := range covs {
		names = append(names, cv.Name)
	}
	if !binary {
		r, err := OLS(names, X, Y)
		if err != nil {
			return newEstimate(math.NaN(), math.NaN()), "linear", err
		}
		return newEstimate(r.Params[1].Value, r.Params[1].SE), "linear regression", nil
	}
	beta, cov, err := logistic(X, Y)
	if err != nil {
		return newEstimate(math.NaN(), math.NaN()), "logistic", err
	}
	k := len(beta)
	ame := 0.0
	grad := make([]float64, k)
	for _, row := range X {
		r1 := slices.Clone(row)
		r0 := slices.Clone(row)
		r1[1], r0[1] = 1, 0
		p1, p0 := sigmoid(dot(beta, r1)), sigmoid(dot(beta, r0))
		ame += p1 - p0
		for j := range k {
			grad[j] += p1*(1-p1)*r1[j] - p0*(1-p0)*r0[j]
		}
	}
	m := float64(len(X))
	ame /= m
	v := 0.0
	for a := range k {
		grad[a] /= m
	}
	for a := range k {
		for b := range k {
			v += grad[a] * cov.At(a, b) * grad[b]
		}
	}
	return newEstimate(ame, math.Sqrt(math.Max(v, 0))), "logistic regression (average marginal effect)", nil
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// logistic fits a logistic regression by iteratively reweighted least
// squares and returns the coefficients and their covariance (X'WX)⁻¹.
func logistic(X [][]float64, y []float64) ([]float64, *mat.SymDense, error) {
	n := len(X)
	if n == 0 {
		return nil, nil, errors.New("no complete rows")
	}
	k := len(X[0])
	if n <= k {
		return nil, nil, fmt.Errorf("%d rows for %d coefficients", n, k)
	}
	beta := make([]float64, k)
	var inv mat.SymDense
	for iter := 0; iter < 50; iter++ {
		H := mat.NewSymDense(k, nil)
		g := mat.NewVecDense(k, nil)
		for i, row := range X {
			p := sigmoid(dot(beta, row))
			w := math.Max(p*(1-p), 1e-12)
			for a := range k {
				g.SetVec(a, g.AtVec(a)+(y[i]-p)*row[a])
				for b := a; b < k; b++ {
					H.SetSym(a, b, H.At(a, b)+w*row[a]*row[b])
				}
			}
		}
		var chol mat.Cholesky
		if !chol.Factorize(H) {
			return nil, nil, errors.New("the logistic design is singular (a covariate is constant or collinear)")
		}
		var step mat.VecDense
		if err := chol.SolveVecTo(&step, g); err != nil && !isCondition(err) {
			return nil, nil, err
		}
		if err := chol.InverseTo(&inv); err != nil && !isCondition(err) {
			return nil, nil, err
		}
		maxStep := 0.0
		for a := range k {
			beta[a] += step.AtVec(a)
			maxStep = math.Max(maxStep, math.Abs(step.AtVec(a)))
		}
		if maxStep < 1e-9 {
			return beta, &inv, nil
		}
	}
	return beta, &inv, errors.New("logistic regression did not converge (separation?)")
}

// defaultPlacebos are the median and the quartile nearer the cutoff of
// the running variable on each side: inside the data, and far enough from
// the real cutoff that its jump cannot leak in.
func defaultPlacebos(x []float64, c float64) []float64 {
	var lo, hi []float64
	for _, v := range x {
		if v < c {
			lo = append(lo, v)
		} else {
			hi = append(hi, v)
		}
	}
	slices.Sort(lo)
	slices.Sort(hi)
	var out []float64
	for _, q := range []float64{0.5, 0.75} {
		if p := Quantile(lo, q); p < c {
			out = append(out, p)
		}
	}
	for _, q := range []float64{0.25, 0.5} {
		if p := Quantile(hi, q); p > c {
			out = append(out, p)
		}
	}
	return out
}

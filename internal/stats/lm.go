package stats

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"
)

// NLSProblem is a nonlinear least-squares problem: find p minimising
// Σ (Y[i] − F(p, X[i]))².
type NLSProblem struct {
	// Names of the parameters, in order.
	Names []string
	X     [][]float64
	Y     []float64
	// F is the model.
	F func(p, x []float64) float64
	// Grad, when set, writes ∂F/∂p into grad; otherwise central finite
	// differences are used.
	Grad func(p, x, grad []float64)
}

// LMOptions tunes LevenbergMarquardt; zero values pick the defaults.
type LMOptions struct {
	MaxIter int     // default 1000
	Tol     float64 // relative SSE change that counts as converged, default 1e-10
}

// Param is one fitted parameter with its standard error and 95% interval.
type Param struct {
	Name  string     `json:"name"`
	Value float64    `json:"value"`
	SE    float64    `json:"se"`
	CI95  [2]float64 `json:"ci95"`
}

// FitResult is a least-squares fit.
type FitResult struct {
	Model  string  `json:"model"`
	Params []Param `json:"params"`
	N      int     `json:"n"`
	DoF    int     `json:"dof"`
	SSE    float64 `json:"sse"`
	RMSE   float64 `json:"rmse"` // sqrt(SSE / DoF)
	R2     float64 `json:"r2"`
	AdjR2  float64 `json:"adj_r2"`
	// Fitted and Residuals (observed − fitted) follow the input order.
	Fitted     []float64 `json:"fitted"`
	Residuals  []float64 `json:"residuals"`
	Iterations int       `json:"iterations,omitempty"`
	Converged  bool      `json:"converged"`
	// Cov is the parameters' covariance s²·(JᵀJ)⁻¹ at the optimum (row
	// major, len(Params)²); nil when JᵀJ is singular.
	Cov      []float64 `json:"cov,omitempty"`
	Warnings []string  `json:"warnings,omitempty"`
}

// Values returns the parameter values in order.
func (r *FitResult) Values() []float64 {
	v := make([]float64, len(r.Params))
	for i, p := range r.Params {
		v[i] = p.Value
	}
	return v
}

// LevenbergMarquardt minimises the problem's SSE from p0 with Marquardt's
// diagonal scaling (so parameters of very different magnitudes, such as an
// exponent near 1 and a scale near 20000, are damped alike), then derives
// standard errors from the Jacobian at the optimum: Cov = s²·(JᵀJ)⁻¹ with
// s² = SSE/(n − k), and Student-t 95% intervals.
func LevenbergMarquardt(pr NLSProblem, p0 []float64, opt LMOptions) (FitResult, error) {
	n, k := len(pr.Y), len(p0)
	if len(pr.X) != n {
		return FitResult{}, fmt.Errorf("fitting: %d x rows for %d observations", len(pr.X), n)
	}
	if len(pr.Names) != k {
		return FitResult{}, fmt.Errorf("fitting: %d parameter names for %d parameters", len(pr.Names), k)
	}
	if n <= k {
		return FitResult{}, fmt.Errorf("fitting %d parameters needs more than %d points, got %d", k, k, n)
	}
	if opt.MaxIter <= 0 {
		opt.MaxIter = 1000
	}
	if opt.Tol <= 0 {
		opt.Tol = 1e-10
	}
	p := append([]float64(nil), p0...)
	sse := func(p []float64) float64 {
		s := 0.0
		for i := range n {
			r := pr.Y[i] - pr.F(p, pr.X[i])
			s += r * r
		}
		return s
	}
	cur := sse(p)
	if math.IsNaN(cur) || math.IsInf(cur, 0) {
		return FitResult{}, errors.New("fitting: the model is not finite at the starting point")
	}
	J := mat.NewDense(n, k, nil)
	res := mat.NewVecDense(n, nil)
	grad := make([]float64, k)
	scale := make([]float64, k)
	lambda := 1e-3
	converged := false
	iter := 0
	var JtJ mat.SymDense
	var g mat.VecDense
	for iter = 1; iter <= opt.MaxIter; iter++ {
		jacobian(pr, p, J, grad)
		for i := range n {
			res.SetVec(i, pr.Y[i]-pr.F(p, pr.X[i]))
		}
		JtJ.SymOuterK(1, J.T())
		g.MulVec(J.T(), res)
		// Solve in parameters scaled to unit curvature: D·(JᵀJ)·D has a unit
		// diagonal, so damping treats every parameter alike and the system
		// stays well conditioned when scales differ by 1e5.
		for j := range k {
			d := JtJ.At(j, j)
			if d <= 0 {
				d = 1e-300
			}
			scale[j] = 1 / math.Sqrt(d)
		}
		improved := false
		for range 40 {
			A := mat.NewSymDense(k, nil)
			rhs := mat.NewVecDense(k, nil)
			for i := range k {
				rhs.SetVec(i, scale[i]*g.AtVec(i))
				for j := i; j < k; j++ {
					A.SetSym(i, j, scale[i]*JtJ.At(i, j)*scale[j])
				}
				A.SetSym(i, i, A.At(i, i)*(1+lambda))
			}
			var chol mat.Cholesky
			var step mat.VecDense
			if ok := chol.Factorize(A); !ok {
				lambda *= 10
				continue
			}
			if err := chol.SolveVecTo(&step, rhs); err != nil && !isCondition(err) {
				lambda *= 10
				continue
			}
			trial := make([]float64, k)
			for j := range k {
				trial[j] = p[j] + scale[j]*step.AtVec(j)
			}
			next := sse(trial)
			if !math.IsNaN(next) && next < cur {
				rel := (cur - next) / math.Max(cur, 1e-300)
				// Relative size of the step in the scaled parameters.
				small := true
				for j := range k {
					if math.Abs(trial[j]-p[j]) > 1e-9*(math.Abs(p[j])+1e-12) {
						small = false
						break
					}
				}
				p, cur = trial, next
				lambda = math.Max(lambda/10, 1e-12)
				improved = true
				if rel < opt.Tol || small {
					converged = true
				}
				break
			}
			lambda *= 10
		}
		if !improved {
			// No step lowers the SSE: a (local) minimum to working precision.
			converged = true
		}
		if converged || cur == 0 {
			converged = true
			break
		}
	}
	if iter > opt.MaxIter {
		iter = opt.MaxIter
	}
	return finishFit(pr, p, cur, iter, converged, J, grad)
}

func jacobian(pr NLSProblem, p []float64, J *mat.Dense, grad []float64) {
	n, k := len(pr.Y), len(p)
	if pr.Grad != nil {
		for i := range n {
			pr.Grad(p, pr.X[i], grad)
			J.SetRow(i, grad)
		}
		return
	}
	q := append([]float64(nil), p...)
	for j := range k {
		h := 1e-6 * math.Max(math.Abs(p[j]), 1e-6)
		for i := range n {
			q[j] = p[j] + h
			up := pr.F(q, pr.X[i])
			q[j] = p[j] - h
			down := pr.F(q, pr.X[i])
			J.Set(i, j, (up-down)/(2*h))
		}
		q[j] = p[j]
	}
}

func finishFit(pr NLSProblem, p []float64, sse float64, iter int, converged bool, J *mat.Dense, grad []float64) (FitResult, error) {
	n, k := len(pr.Y), len(p)
	jacobian(pr, p, J, grad)
	r := FitResult{N: n, DoF: n - k, SSE: sse, Iterations: iter, Converged: converged}
	mean := 0.0
	for _, y := range pr.Y {
		mean += y
	}
	mean /= float64(n)
	sst := 0.0
	for i, y := range pr.Y {
		f := pr.F(p, pr.X[i])
		r.Fitted = append(r.Fitted, f)
		r.Residuals = append(r.Residuals, y-f)
		sst += (y - mean) * (y - mean)
	}
	s2 := sse / float64(r.DoF)
	r.RMSE = math.Sqrt(s2)
	if sst > 0 {
		r.R2 = 1 - sse/sst
		r.AdjR2 = 1 - (1-r.R2)*float64(n-1)/float64(r.DoF)
	}
	cov, ok := scaledInverse(J)
	t := studentT975(r.DoF)
	for j := range k {
		prm := Param{Name: pr.Names[j], Value: p[j], SE: math.Inf(1), CI95: [2]float64{math.Inf(-1), math.Inf(1)}}
		if ok {
			prm.SE = math.Sqrt(s2 * cov.At(j, j))
			prm.CI95 = [2]float64{p[j] - t*prm.SE, p[j] + t*prm.SE}
		}
		r.Params = append(r.Params, prm)
	}
	if ok {
		r.Cov = make([]float64, k*k)
		for i := range k {
			for j := range k {
				r.Cov[i*k+j] = s2 * cov.At(i, j)
			}
		}
	} else {
		r.Warnings = append(r.Warnings, "the parameters are not identifiable from these points (JᵀJ is singular): their intervals are unbounded")
	}
	if !converged {
		r.Warnings = append(r.Warnings, fmt.Sprintf("did not converge in %d iterations", iter))
	}
	return r, nil
}

// OLS fits y = X·c by least squares (QR), with standard errors and
// Student-t 95% intervals, as a FitResult.
func OLS(names []string, X [][]float64, y []float64) (FitResult, error) {
	n, k := len(y), len(names)
	if len(X) != n {
		return FitResult{}, fmt.Errorf("least squares: %d rows for %d observations", len(X), n)
	}
	if n <= k {
		return FitResult{}, fmt.Errorf("least squares with %d coefficients needs more than %d points, got %d", k, k, n)
	}
	A := mat.NewDense(n, k, nil)
	for i, row := range X {
		if len(row) != k {
			return FitResult{}, fmt.Errorf("least squares: row %d has %d columns, want %d", i, len(row), k)
		}
		A.SetRow(i, row)
	}
	var qr mat.QR
	qr.Factorize(A)
	var c mat.Dense
	if err := qr.SolveTo(&c, false, mat.NewDense(n, 1, append([]float64(nil), y...))); err != nil {
		return FitResult{}, fmt.Errorf("least squares: %w", err)
	}
	p := make([]float64, k)
	for j := range k {
		p[j] = c.At(j, 0)
	}
	pr := NLSProblem{Names: names, X: X, Y: y, F: func(p, x []float64) float64 {
		s := 0.0
		for j, v := range x {
			s += p[j] * v
		}
		return s
	}, Grad: func(_, x, g []float64) { copy(g, x) }}
	sse := 0.0
	for i := range n {
		d := y[i] - pr.F(p, X[i])
		sse += d * d
	}
	return finishFit(pr, p, sse, 0, true, mat.NewDense(n, k, nil), make([]float64, k))
}

// studentT975 is the 97.5% quantile of Student's t with dof degrees of
// freedom: the half-width multiplier of a 95% interval.
func studentT975(dof int) float64 {
	if dof <= 0 {
		return math.Inf(1)
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(dof)}.Quantile(0.975)
}

func isCondition(err error) bool {
	var c mat.Condition
	return errors.As(err, &c)
}

// scaledInverse returns (JᵀJ)⁻¹ computed as D·(D·JᵀJ·D)⁻¹·D with D the
// inverse square root of the diagonal, so that parameters of very
// different magnitudes do not make a well-determined problem look
// singular. ok is false when the scaled matrix is singular to working
// precision (a parameter the data cannot determine).
func scaledInverse(J *mat.Dense) (*mat.SymDense, bool) {
	_, k := J.Dims()
	var JtJ mat.SymDense
	JtJ.SymOuterK(1, J.T())
	d := make([]float64, k)
	for j := range k {
		v := JtJ.At(j, j)
		if !(v > 0) {
			return nil, false
		}
		d[j] = 1 / math.Sqrt(v)
	}
	S := mat.NewSymDense(k, nil)
	for i := range k {
		for j := i; j < k; j++ {
			S.SetSym(i, j, d[i]*JtJ.At(i, j)*d[j])
		}
	}
	var chol mat.Cholesky
	if !chol.Factorize(S) || chol.Cond() > 1e12 {
		return nil, false
	}
	var inv mat.SymDense
	if err := chol.InverseTo(&inv); err != nil && !isCondition(err) {
		return nil, false
	}
	out := mat.NewSymDense(k, nil)
	for i := range k {
		for j := i; j < k; j++ {
			out.SetSym(i, j, d[i]*inv.At(i, j)*d[j])
		}
	}
	return out, true
}

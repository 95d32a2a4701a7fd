package analysis

import (
	"math"
	"strings"

	"github.com/ttft-dev/ttft/internal/stats"
)

// RDDRequest names the columns of a sessions table for a regression
// discontinuity design.
type RDDRequest struct {
	// Running is the running variable's column (TTFT in ms), Outcome the
	// outcome's (e.g. retained, 0/1).
	Running, Outcome string
	// Covariates is a comma-separated list of covariate columns; empty
	// means every column but the running variable, the outcome and the
	// treatment; "none" means none.
	Covariates string
	// Treatment, when set, is the treatment's column: the design is fuzzy.
	Treatment string
	// Options are the cutoff, bandwidth, donut and placebos (its
	// Treatment is filled from the Treatment column).
	Options stats.RDDOptions
}

// RDDResult is stats.RDD's answer and whether the outcome is binary (its
// effects then read as percentage points).
type RDDResult struct {
	Result        stats.RDDResult
	BinaryOutcome bool
}

// RDD estimates the jump in the outcome where the running variable crosses
// the cutoff (stats.RDD). An unknown column is an *OptionError naming
// "running", "outcome", "covariates" or "treatment"; stats.RDD's errors are
// returned as they are.
func RDD(t *stats.Table, req RDDRequest) (*RDDResult, error) {
	x, err := t.MustCol(req.Running)
	if err != nil {
		return nil, optionErr("running", err)
	}
	y, err := t.MustCol(req.Outcome)
	if err != nil {
		return nil, optionErr("outcome", err)
	}
	covs, err := rddCovariates(t, req)
	if err != nil {
		return nil, optionErr("covariates", err)
	}
	opt := req.Options
	if req.Treatment != "" {
		if opt.Treatment, err = t.MustCol(req.Treatment); err != nil {
			return nil, optionErr("treatment", err)
		}
	}
	r, err := stats.RDD(x, y, covs, opt)
	if err != nil {
		return nil, err
	}
	return &RDDResult{Result: r, BinaryOutcome: isBinary(y)}, nil
}

func rddCovariates(t *stats.Table, req RDDRequest) ([]stats.Column, error) {
	var covs []stats.Column
	switch {
	case strings.EqualFold(req.Covariates, "none"):
	case req.Covariates != "":
		for _, c := range strings.Split(req.Covariates, ",") {
			c = strings.TrimSpace(c)
			d, err := t.MustCol(c)
			if err != nil {
				return nil, err
			}
			covs = append(covs, stats.Column{Name: c, Data: d})
		}
	default:
		for j, c := range t.Columns {
			if !strings.EqualFold(c, req.Running) && !strings.EqualFold(c, req.Outcome) && !strings.EqualFold(c, req.Treatment) {
				covs = append(covs, stats.Column{Name: c, Data: t.Data[j]})
			}
		}
	}
	return covs, nil
}

// isBinary reports whether every present value is 0 or 1.
func isBinary(y []float64) bool {
	for _, v := range y {
		if !math.IsNaN(v) && v != 0 && v != 1 {
			return false
		}
	}
	return true
}

package analysis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/stats"
)

// Labels read from a run's manifest for its sweep point, in order of
// preference.
var (
	BatchLabels   = []string{"batch", "batch_size", "concurrency", "max_num_seqs"}
	ContextLabels = []string{"context", "context_tokens", "ctx", "prompt_tokens"}
)

// CSV column names accepted for sweep points, in order of preference.
var (
	BatchColumns   = []string{"batch", "batch_size", "b", "concurrency"}
	ContextColumns = []string{"context", "ctx", "context_tokens", "prompt_tokens"}
	LatencyColumns = []string{"latency_ms", "latency", "ttft_ms", "ttft_p50_ms", "p50_ms"}
)

// FitPoint is a (batch, context) at which to predict latency.
type FitPoint struct{ Batch, Context float64 }

// FitResult is a latency fit and its predictions; it is also the JSON of
// `ttft fit --json`.
type FitResult struct {
	Fit         stats.LatencyFit   `json:"fit"`
	Predictions []stats.Prediction `json:"predictions,omitempty"`
}

// ReadFitPoints reads sweep points from each input in turn: a run (a run
// directory, or — when it is neither an existing file nor looks like a
// path — a stored run through in.Store) is one point, placed by its labels
// (BatchLabels, ContextLabels; else its recorded flags) at the latency q
// reads from its summary; anything else is a CSV file ("-": in.Stdin) of
// points in the columns BatchColumns, ContextColumns and LatencyColumns.
// A directory of run directories must already be expanded into them.
func ReadFitPoints(ctx context.Context, in Inputs, args []string, q Statistic) ([]stats.LatencyPoint, error) {
	var pts []stats.LatencyPoint
	for _, a := range args {
		st, statErr := os.Stat(a)
		if (statErr == nil && st.IsDir()) || (statErr != nil && a != "-" && !LooksLikePath(a)) {
			p, err := runFitPoint(ctx, in.Store, a, q)
			if err != nil {
				return nil, err
			}
			pts = append(pts, p)
			continue
		}
		more, err := csvFitPoints(in, a)
		if err != nil {
			return nil, err
		}
		pts = append(pts, more...)
	}
	return pts, nil
}

// runFitPoint places one run on the sweep grid.
func runFitPoint(ctx context.Context, st Store, arg string, q Statistic) (stats.LatencyPoint, error) {
	r, err := ResolveRun(ctx, st, arg)
	if err != nil {
		return stats.LatencyPoint{}, err
	}
	bk, bv, ok1 := r.Label(BatchLabels)
	ck, cv, ok2 := r.Label(ContextLabels)
	if !ok1 || !ok2 {
		return stats.LatencyPoint{}, fmt.Errorf("run %s: manifest.json labels (or flags) need a batch (%s) and a context (%s); labels are %v",
			arg, strings.Join(BatchLabels, "/"), strings.Join(ContextLabels, "/"), r.Labels)
	}
	b, err := strconv.ParseFloat(bv, 64)
	if err != nil {
		return stats.LatencyPoint{}, fmt.Errorf("run %s: %s=%q is not a number", arg, bk, bv)
	}
	c, err := strconv.ParseFloat(cv, 64)
	if err != nil {
		return stats.LatencyPoint{}, fmt.Errorf("run %s: %s=%q is not a number", arg, ck, cv)
	}
	v, n, err := q.Of(&r.Summary)
	if err != nil {
		return stats.LatencyPoint{}, err
	}
	if n == 0 {
		return stats.LatencyPoint{}, fmt.Errorf("run %s: summary.json has no %s measurements", arg, q.Metric)
	}
	return stats.LatencyPoint{Batch: b, Context: c, LatencyMs: v, Label: arg}, nil
}

// csvFitPoints reads the points of one CSV file.
func csvFitPoints(in Inputs, path string) ([]stats.LatencyPoint, error) {
	t, err := in.ReadTable(path)
	if err != nil {
		return nil, err
	}
	bc, err := firstCol(t, BatchColumns, "batch")
	if err != nil {
		return nil, err
	}
	cc, err := firstCol(t, ContextColumns, "context")
	if err != nil {
		return nil, err
	}
	lc, err := firstCol(t, LatencyColumns, "latency")
	if err != nil {
		return nil, err
	}
	pts := make([]stats.LatencyPoint, 0, t.Rows())
	for i := range t.Rows() {
		pts = append(pts, stats.LatencyPoint{Batch: bc[i], Context: cc[i], LatencyMs: lc[i], Label: fmt.Sprintf("%s row %d", t.Name, i+1)})
	}
	return pts, nil
}

func firstCol(t *stats.Table, names []string, what string) ([]float64, error) {
	for _, n := range names {
		if c, ok := t.Col(n); ok {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no %s column (want one of %s; columns: %s)", t.Name, what, strings.Join(names, ", "), strings.Join(t.Columns, ", "))
}

// Fit fits latency(batch, context) to the article's nonlinear model and
// the linear baseline (stats.FitLatency) and predicts at each of at.
func Fit(pts []stats.LatencyPoint, at []FitPoint) (*FitResult, error) {
	fit, err := stats.FitLatency(pts)
	if err != nil {
		return nil, err
	}
	res := &FitResult{Fit: fit}
	for _, p := range at {
		res.Predictions = append(res.Predictions, fit.Predict(p.Batch, p.Context))
	}
	return res, nil
}

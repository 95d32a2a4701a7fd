package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// Param is one swept flag and its values, in order.
type Param struct {
	Name   string
	Values []string
}

// ParseParam reads "name=v1,v2,v3".
func ParseParam(spec string) (Param, error) {
	name, vals, ok := strings.Cut(spec, "=")
	name = strings.TrimPrefix(strings.TrimSpace(name), "--")
	if !ok || name == "" || strings.TrimSpace(vals) == "" {
		return Param{}, fmt.Errorf("--over %q: want NAME=V1,V2,... (e.g. concurrency=1,8,16,32)", spec)
	}
	p := Param{Name: name}
	for _, v := range strings.Split(vals, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return Param{}, fmt.Errorf("--over %q: empty value", spec)
		}
		p.Values = append(p.Values, v)
	}
	return p, nil
}

// Setting is one parameter's value at a point.
type Setting struct {
	Name, Value string
}

// Point is one run of the sweep.
type Point struct {
	Index    int
	Settings []Setting
}

// Get returns a setting's value.
func (p Point) Get(name string) (string, bool) {
	for _, s := range p.Settings {
		if s.Name == name {
			return s.Value, true
		}
	}
	return "", false
}

// Label is "concurrency=8 prompt-tokens=1024".
func (p Point) Label() string {
	var parts []string
	for _, s := range p.Settings {
		parts = append(parts, s.Name+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// Args are the flags that set the point: "--name=value" each.
func (p Point) Args() []string {
	var out []string
	for _, s := range p.Settings {
		out = append(out, "--"+s.Name+"="+s.Value)
	}
	return out
}

// Grid is the Cartesian product of params, the first varying slowest.
func Grid(params []Param) []Point {
	if len(params) == 0 {
		return nil
	}
	points := []Point{{}}
	for _, p := range params {
		var next []Point
		for _, base := range points {
			for _, v := range p.Values {
				s := append(slices.Clone(base.Settings), Setting{p.Name, v})
				next = append(next, Point{Settings: s})
			}
		}
		points = next
	}
	for i := range points {
		points[i].Index = i
	}
	return points
}

// Outcome is what one run yields.
type Outcome struct {
	Summary record.Summary
	Records []record.Record // optional: enables the queue-growth check
	Dir     string          // where the run's files are
	// StoppedEarly says why the run was cut short by EarlySaturation.
	StoppedEarly string
	// Incomplete: the sweep was interrupted during this run, whose
	// summary covers the requests that completed before.
	Incomplete bool
}

// RunFunc runs one point.
type RunFunc func(ctx context.Context, p Point) (Outcome, error)

// Result is one point's outcome.
type Result struct {
	Point     Point
	Outcome   Outcome
	Err       error
	Saturated string // why the point is saturated; "" if not
	Skipped   bool   // not run: an earlier point saturated
}

// Options tunes Run.
type Options struct {
	// StopOnSaturation skips the remaining values of the last parameter
	// once a point saturates (loads only grow along it).
	StopOnSaturation bool
	// OnResult is called after each point.
	OnResult func(Result)
}

// Run runs every point in order. A point's error is kept in its result and
// the sweep goes on, unless ctx ends: then the point cut short is kept
// (Outcome.Incomplete) and Run returns ctx's error.
func Run(ctx context.Context, points []Point, run RunFunc, opt Options) ([]Result, error) {
	var out []Result
	skipPrefix := ""
	for _, p := range points {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r := Result{Point: p}
		prefix := outerLabel(p)
		if skipPrefix != "" && prefix == skipPrefix {
			r.Skipped = true
			out = append(out, r)
			if opt.OnResult != nil {
				opt.OnResult(r)
			}
			continue
		}
		r.Outcome, r.Err = run(ctx, p)
		if r.Err == nil {
			r.Saturated = Saturation(p, r.Outcome)
			if why := r.Outcome.StoppedEarly; why != "" {
				r.Saturated = why + " (stopped early)"
			}
			if r.Saturated != "" && opt.StopOnSaturation {
				skipPrefix = prefix
			}
		}
		if ctx.Err() != nil {
			// Interrupted during this point: keep what it measured,
			// marked incomplete, and stop.
			if r.Err == nil {
				r.Outcome.Incomplete = true
				out = append(out, r)
				if opt.OnResult != nil {
					opt.OnResult(r)
				}
			}
			return out, ctx.Err()
		}
		out = append(out, r)
		if opt.OnResult != nil {
			opt.OnResult(r)
		}
	}
	return out, nil
}

// outerLabel names the point without its last (innermost) setting.
func outerLabel(p Point) string {
	if len(p.Settings) <= 1 {
		return "*"
	}
	return Point{Settings: p.Settings[:len(p.Settings)-1]}.Label()
}

// Saturation says why a point's run looks saturated, or "": stats.Overload
// with the point's --rate as the offered load.
func Saturation(p Point, o Outcome) string {
	var rate float64
	if v, ok := p.Get("rate"); ok {
		rate, _ = strconv.ParseFloat(v, 64)
	}
	return stats.Overload(&o.Summary, o.Records, rate)
}

// Cell is one grid cell of the batch × context table.
type Cell struct {
	X, Y      float64 // e.g. concurrency, context tokens
	P50, P95  float64 // measured TTFT, ms
	PredP50   float64 // linear prediction, ms
	PredP95   float64
	DevP50Pct float64 // (measured - predicted) / predicted * 100
	DevP95Pct float64
	Missing   bool
}

// LinearDeviation builds the article's §2.4 table: for each (x, y) cell the
// measured TTFT P50/P95 and its deviation from a linear prediction. The
// prediction is latency = a + b·x·y (work in flight), fitted by least
// squares on the edge cells (smallest x or smallest y), where batching
// effects are weakest; growing positive deviations elsewhere are the
// non-linearity the article reports (+4.2% at 16×1024, +63.1% at 32×2048).
func LinearDeviation(results []Result, xName, yName string) ([]Cell, error) {
	var cells []Cell
	for _, r := range results {
		xs, okx := r.Point.Get(xName)
		ys, oky := r.Point.Get(yName)
		if !okx || !oky {
			return nil, fmt.Errorf("point %q lacks %s or %s", r.Point.Label(), xName, yName)
		}
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("point %q: %s and %s must be numbers", r.Point.Label(), xName, yName)
		}
		c := Cell{X: x, Y: y}
		if ttft := r.Outcome.Summary.JudgedTTFT(); r.Err != nil || r.Skipped || ttft.Count == 0 {
			c.Missing = true
		} else {
			c.P50, c.P95 = ttft.P50, ttft.P95
		}
		cells = append(cells, c)
	}
	minX, minY := math.Inf(1), math.Inf(1)
	for _, c := range cells {
		minX, minY = math.Min(minX, c.X), math.Min(minY, c.Y)
	}
	var ex, e50, e95 []float64
	for _, c := range cells {
		if !c.Missing && (c.X == minX || c.Y == minY) {
			ex = append(ex, c.X*c.Y)
			e50 = append(e50, c.P50)
			e95 = append(e95, c.P95)
		}
	}
	a50, b50, ok1 := fitLine(ex, e50)
	a95, b95, ok2 := fitLine(ex, e95)
	if !ok1 || !ok2 {
		return nil, errors.New("linear prediction needs at least two edge cells with distinct x·y (vary both parameters over at least two values)")
	}
	for i := range cells {
		c := &cells[i]
		w := c.X * c.Y
		c.PredP50, c.PredP95 = a50+b50*w, a95+b95*w
		if !c.Missing {
			c.DevP50Pct = pct(c.P50, c.PredP50)
			c.DevP95Pct = pct(c.P95, c.PredP95)
		}
	}
	return cells, nil
}

func pct(got, pred float64) float64 {
	if pred == 0 {
		return 0
	}
	return (got - pred) / pred * 100
}

// fitLine is ordinary least squares y = a + b·x.
func fitLine(x, y []float64) (a, b float64, ok bool) {
	n := float64(len(x))
	if len(x) < 2 {
		return 0, 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, 0, false
	}
	b = (n*sxy - sx*sy) / d
	a = (sy - b*sx) / n
	return a, b, true
}

// EarlySaturation is the in-run check a live point uses to stop before its
// planned end. With at least 60 measured requests completed, split by send
// time into quarters q1..q4: the run is saturated when the median TTFT of q4
// is more than 3× q1's and 100 ms higher, and still climbing — q4's above
// 1.2× q3's and q3's above q2's. (Start-up transients rise once and level
// off; an unbounded queue keeps rising.) The same test applies to the
// schedule lag with q4's median above 1 s. It is stricter than Saturation,
// which judges a finished run.
func EarlySaturation(recs []record.Record) string {
	var rs []record.Record
	for _, r := range recs {
		if !r.Warmup && r.OK() {
			rs = append(rs, r)
		}
	}
	if len(rs) < 60 {
		return ""
	}
	slices.SortFunc(rs, func(a, b record.Record) int { return a.Sent.Compare(b.Sent) })
	q := len(rs) / 4
	quarters := func(f func(*record.Record) float64) [4]float64 {
		var m [4]float64
		for k := 0; k < 4; k++ {
			part := rs[k*q : (k+1)*q]
			if k == 3 {
				part = rs[len(rs)-q:]
			}
			xs := make([]float64, len(part))
			for i := range part {
				xs[i] = f(&part[i])
			}
			slices.Sort(xs)
			m[k] = stats.Quantile(xs, 0.5)
		}
		return m
	}
	climbing := func(m [4]float64) bool { return m[3] > 1.2*m[2] && m[2] > m[1] }
	if m := quarters(func(r *record.Record) float64 { return r.TTFTMs }); !stats.ClosedLoop(rs) && m[3] > 3*m[0] && m[3]-m[0] >= 100 && climbing(m) {
		return fmt.Sprintf("TTFT median rose from %.0f ms to %.0f ms during the run and is still rising: the queue grows without bound", m[0], m[3])
	}
	if m := quarters(func(r *record.Record) float64 { return r.ScheduleLagMs }); m[3] > 1000 && m[3] > 3*m[0] && climbing(m) {
		return fmt.Sprintf("schedule lag median rose from %.0f ms to %.0f ms during the run and is still rising: requests queue before they can be sent", m[0], m[3])
	}
	return ""
}

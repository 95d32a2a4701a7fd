package report

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
)

// canvas is what a chart is drawn on: SVG text or a PNG raster. Coordinates
// are pixels from the top left.
type canvas interface {
	line(x1, y1, x2, y2 float64, c color.RGBA, width float64, dashed bool)
	polyline(pts [][2]float64, c color.RGBA, width float64)
	rect(x, y, w, h float64, fill color.RGBA)
	circle(x, y, r float64, fill color.RGBA)
	// text draws s with its baseline at y; anchor is -1 left, 0 middle,
	// 1 right; vertical rotates it 90° counter-clockwise about (x, y).
	text(x, y float64, s string, anchor int, c color.RGBA, vertical bool)
}

// Chart size in pixels, shared by SVG and PNG so they look alike.
const (
	chartW = 760
	chartH = 400
	padL   = 70
	padR   = 20
	padT   = 34
	padB   = 60
)

// palette is colour-blind safe (Okabe–Ito), then greys.
var palette = []color.RGBA{
	{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 0, 0, 255}, {120, 120, 120, 255},
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{110, 110, 110, 255}
	light = color.RGBA{225, 225, 225, 255}
	white = color.RGBA{255, 255, 255, 255}
	// failRed marks what failed (the report's .fail colour).
	failRed = color.RGBA{176, 0, 32, 255}
)

func seriesColor(i int) color.RGBA { return palette[i%len(palette)] }

// colorOf is series i's colour: its own Color if set, else by position.
func colorOf(i int, s Series) color.RGBA {
	if s.Color > 0 {
		return seriesColor(s.Color - 1)
	}
	return seriesColor(i)
}

// drawChart lays out and draws one chart.
func drawChart(cv canvas, ch *Chart) {
	cv.rect(0, 0, chartW, chartH, white)
	if sub := ch.CoverageShort; sub != "" {
		// What the chart leaves out, under the title, where a reader of
		// the PNG alone sees it too. Browsers' monospace fonts are a
		// little wider than the bitmap font: keep a margin.
		cv.text(chartW/2, 15, ch.Title, 0, black, false)
		cv.text(chartW/2, 29, fitText(sub, (chartW-2*padL)/(fontAdvance+1)), 0, failRed, false)
	} else {
		cv.text(chartW/2, 20, ch.Title, 0, black, false)
	}
	if ch.Kind == "heatmap" && ch.Heat != nil {
		drawHeatmap(cv, ch)
		return
	}
	x0, x1, y0, y1 := bounds(ch)
	px := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*(chartW-padL-padR) }
	py := func(y float64) float64 { return chartH - padB - (y-y0)/(y1-y0)*(chartH-padT-padB) }

	// Grid, ticks and labels.
	xt := ticks(x0, x1, 8)
	if ch.XInteger {
		xt = intTicks(x0, x1, 10)
	}
	for _, t := range xt {
		x := px(t)
		cv.line(x, padT, x, chartH-padB, light, 1, false)
		cv.text(x, chartH-padB+16, fmtTick(t), 0, grey, false)
	}
	for _, t := range ticks(y0, y1, 6) {
		y := py(t)
		cv.line(padL, y, chartW-padR, y, light, 1, false)
		cv.text(padL-6, y+4, fmtTick(t), 1, grey, false)
	}
	cv.line(padL, chartH-padB, chartW-padR, chartH-padB, black, 1, false)
	cv.line(padL, padT, padL, chartH-padB, black, 1, false)
	cv.text((padL+chartW-padR)/2, chartH-padB+36, ch.XLabel, 0, black, false)
	cv.text(16, (padT+chartH-padB)/2, ch.YLabel, 0, black, true)
	drawLimit(cv, ch, py)

	nSeries := len(ch.Series)
	for i, s := range ch.Series {
		c := colorOf(i, s)
		switch {
		case s.Line && ch.Kind == "scatter":
			pts := make([][2]float64, len(s.Points))
			for j, p := range s.Points {
				pts[j] = [2]float64{px(p[0]), py(p[1])}
			}
			// A dark outline keeps the line visible over its own points.
			cv.polyline(pts, black, 4)
			cv.polyline(pts, c, 2)
			continue
		}
		switch ch.Kind {
		case "bars":
			// Overlaid translucent bars, narrower for later series so all show.
			if len(s.Points) == 0 {
				continue
			}
			bw := (px(x1) - px(x0)) / float64(len(s.Points))
			shrink := 1 - 0.6*float64(i)/float64(max(nSeries, 1))
			fill := c
			fill.A = 150
			for _, p := range s.Points {
				if p[1] <= 0 {
					continue
				}
				w := bw * shrink
				cv.rect(px(p[0])-w/2, py(p[1]), w, py(y0)-py(p[1]), fill)
			}
		case "scatter":
			for _, p := range s.Points {
				cv.circle(px(p[0]), py(p[1]), 1.6, c)
			}
		default: // line, pareto
			pts := make([][2]float64, len(s.Points))
			for j, p := range s.Points {
				pts[j] = [2]float64{px(p[0]), py(p[1])}
			}
			switch {
			case ch.Kind != "pareto":
				cv.polyline(pts, c, 2)
			case i > 0 && len(pts) > 0:
				// The front as a staircase: what is attainable at each cost
				// is the best latency of any cheaper configuration.
				stairs := [][2]float64{pts[0]}
				for j := 1; j < len(pts); j++ {
					stairs = append(stairs, [2]float64{pts[j][0], pts[j-1][1]}, pts[j])
				}
				cv.polyline(stairs, c, 2)
			}
			if s.Markers {
				for j, p := range pts {
					cv.circle(p[0], p[1], 3.5, c)
					if j < len(s.Labels) && ch.Kind == "pareto" && i == 0 {
						cv.text(p[0]+6, p[1]-6, s.Labels[j], -1, grey, false)
					}
				}
			}
		}
	}
	// Pixel positions of the data, for the legend to stay off them.
	var drawn [][2]float64
	for _, se := range ch.Series {
		for _, p := range se.Points {
			drawn = append(drawn, [2]float64{px(p[0]), py(p[1])})
		}
	}
	drawLegend(cv, ch, drawn)
	if ch.Note != "" {
		cv.text(chartW-padR, chartH-6, ch.Note, 1, grey, false)
	}
}

// drawLimit draws the chart's Limit (an SLO) as a dashed line across the
// plot, labelled at its right end.
func drawLimit(cv canvas, ch *Chart, py func(float64) float64) {
	if ch.Limit <= 0 {
		return
	}
	y := py(ch.Limit)
	cv.line(padL, y, chartW-padR, y, failRed, 1.5, true)
	cv.text(chartW-padR-4, y-4, ch.LimitLabel, 1, failRed, false)
}

// drawLegend draws the series names in the corner of the plot that covers
// the fewest data points (the bottom right first for a CDF, which rises to
// the top right; the top right first otherwise).
func drawLegend(cv canvas, ch *Chart, drawn [][2]float64) {
	if len(ch.Series) == 0 {
		return
	}
	const maxName = 44 // longer names would cover the plot
	short := func(s string) string {
		if r := []rune(s); len(r) > maxName {
			return string(r[:maxName-1]) + "…"
		}
		return s
	}
	longest := 0
	for _, s := range ch.Series {
		longest = max(longest, len([]rune(short(s.Name))))
	}
	w := float64(longest*fontAdvance + 30)
	h := float64(len(ch.Series)*16 + 8)
	right, left := chartW-padR-w-6, float64(padL+6)
	top, bottom := float64(padT+6), chartH-padB-h-6
	corners := [][2]float64{{right, top}, {right, bottom}, {left, top}, {left, bottom}}
	if ch.Kind == "line" && ch.YMax == 1 {
		corners[0], corners[1] = corners[1], corners[0] // CDFs rise to the top right
	}
	x, y := corners[0][0], corners[0][1]
	best := -1
	for _, c := range corners {
		n := 0
		for _, p := range drawn {
			if p[0] >= c[0]-4 && p[0] <= c[0]+w+4 && p[1] >= c[1]-4 && p[1] <= c[1]+h+4 {
				n++
			}
		}
		if best < 0 || n < best {
			x, y, best = c[0], c[1], n
		}
		if n == 0 {
			break
		}
	}
	bg := white
	bg.A = 220
	cv.rect(x, y, w, h, bg)
	for i, s := range ch.Series {
		yy := y + 14 + float64(i*16)
		if s.Line && ch.Kind == "scatter" {
			cv.line(x+6, yy-4, x+20, yy-4, black, 4, false)
			cv.line(x+6, yy-4, x+20, yy-4, colorOf(i, s), 2, false)
		} else {
			cv.rect(x+6, yy-8, 14, 8, colorOf(i, s))
		}
		cv.text(x+26, yy, short(s.Name), -1, black, false)
	}
}

func drawHeatmap(cv canvas, ch *Chart) {
	h := ch.Heat
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, row := range h.Z {
		for _, v := range row {
			if v != nil {
				lo, hi = math.Min(lo, *v), math.Max(hi, *v)
			}
		}
	}
	if hi <= lo {
		hi = lo + 1
	}
	cw := float64(chartW-padL-padR) / float64(len(h.X))
	rh := float64(chartH-padT-padB) / float64(len(h.Y))
	for yi, row := range h.Z {
		// Larger context at the top, as on a plot's y axis.
		y := float64(chartH-padB) - float64(yi+1)*rh
		for xi, v := range row {
			x := padL + float64(xi)*cw
			if v == nil {
				cv.rect(x+1, y+1, cw-2, rh-2, light)
				continue
			}
			c := viridis((*v - lo) / (hi - lo))
			cv.rect(x+1, y+1, cw-2, rh-2, c)
			tc := white
			if (*v-lo)/(hi-lo) > 0.6 {
				tc = black
			}
			cv.text(x+cw/2, y+rh/2+4, fmtTick(*v), 0, tc, false)
		}
	}
	for xi, s := range h.X {
		cv.text(padL+(float64(xi)+0.5)*cw, chartH-padB+16, s, 0, grey, false)
	}
	for yi, s := range h.Y {
		cv.text(padL-6, float64(chartH-padB)-(float64(yi)+0.5)*rh+4, s, 1, grey, false)
	}
	cv.text((padL+chartW-padR)/2, chartH-padB+36, ch.XLabel, 0, black, false)
	cv.text(16, (padT+chartH-padB)/2, ch.YLabel, 0, black, true)
	cv.text(chartW-padR, chartH-6, "cell: TTFT P95 ("+h.Unit+"); grey: not measured", 1, grey, false)
}

// viridis approximates the viridis colour map at t in [0, 1].
func viridis(t float64) color.RGBA {
	stops := []color.RGBA{{68, 1, 84, 255}, {59, 82, 139, 255}, {33, 145, 140, 255}, {94, 201, 98, 255}, {253, 231, 37, 255}}
	t = math.Max(0, math.Min(1, t))
	pos := t * float64(len(stops)-1)
	i := min(int(pos), len(stops)-2)
	f := pos - float64(i)
	mix := func(a, b uint8) uint8 { return uint8(math.Round(float64(a) + f*(float64(b)-float64(a)))) }
	a, b := stops[i], stops[i+1]
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 255}
}

// bounds is the data range padded to nice numbers; y starts at 0 for
// latencies and fractions so differences are not exaggerated.
func bounds(ch *Chart) (x0, x1, y0, y1 float64) {
	x0, x1, y0, y1 = math.Inf(1), math.Inf(-1), 0, math.Inf(-1)
	for _, s := range ch.Series {
		for _, p := range s.Points {
			x0, x1 = math.Min(x0, p[0]), math.Max(x1, p[0])
			y0, y1 = math.Min(y0, p[1]), math.Max(y1, p[1])
		}
	}
	if math.IsInf(x0, 1) {
		return 0, 1, 0, 1
	}
	if ch.Limit > 0 {
		y1 = math.Max(y1, ch.Limit) // the limit line stays on the plot
	}
	if ch.Kind == "bars" {
		// Bin centres: widen by half a bin each side.
		n := 0
		for _, s := range ch.Series {
			n = max(n, len(s.Points))
		}
		if n > 1 {
			half := (x1 - x0) / float64(n-1) / 2
			x0, x1 = x0-half, x1+half
		}
	}
	if ch.XInteger {
		// Half a step beyond the first and last value: every tick is a
		// value (a turn), and the end markers are not on the frame.
		x0, x1 = math.Floor(x0)-0.5, math.Ceil(x1)+0.5
		if y1 <= y0 {
			y1 = y0 + 1
		}
		ty := ticks(y0, y1*1.05, 6)
		return x0, x1, y0, math.Max(y1, ty[len(ty)-1])
	}
	if ch.Kind == "pareto" || ch.Kind == "scatter" || ch.Kind == "line" {
		if x0 > 0 && ch.Kind != "scatter" && x0 < (x1-x0) {
			x0 = 0
		}
	}
	if x1 <= x0 {
		x0, x1 = x0-1, x1+1
	}
	if ch.YMax > 0 {
		// A CDF rises vertically where many requests share a value (all
		// of them, for a constant TPOT): keep that off the frame.
		pad := 0.03 * (x1 - x0)
		if x0 != 0 {
			x0 -= pad
		}
		x1 += pad
	}
	for _, s := range ch.Series {
		if s.Markers {
			// Room for the end markers and their labels.
			pad := 0.05 * (x1 - x0)
			if x0 != 0 {
				x0 -= pad
			}
			x1 += 2 * pad
			break
		}
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	t := ticks(x0, x1, 8)
	x0, x1 = math.Min(x0, t[0]), math.Max(x1, t[len(t)-1])
	if ch.YMax > 0 && y1 <= ch.YMax {
		// A fraction ends at 1: no head room above it.
		return x0, x1, y0, ch.YMax
	}
	ty := ticks(y0, y1*1.05, 6)
	y1 = math.Max(y1, ty[len(ty)-1])
	return x0, x1, y0, y1
}

// intTicks returns integer ticks inside [lo, hi], about n of them at most:
// every integer, or every 2nd, 5th, 10th...
func intTicks(lo, hi float64, n int) []float64 {
	first, last := math.Ceil(lo), math.Floor(hi)
	if last < first {
		return nil
	}
	step := 1.0
search:
	for mag := 1.0; mag < 1e15; mag *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if (last-first)/(m*mag) < float64(n) {
				step = m * mag
				break search
			}
		}
	}
	var out []float64
	start := first
	if step > 1 {
		start = math.Ceil(first/step) * step
	}
	for v := start; v <= last && len(out) < 50; v += step {
		out = append(out, v)
	}
	return out
}

// fitText cuts s to at most n characters, ending it with "…" when cut.
func fitText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// ticks returns about n round tick values covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	if hi <= lo || math.IsNaN(lo) || math.IsNaN(hi) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	// k·step in binary floating point is not always the decimal it
	// stands for (34 × 0.1 = 3.4000000000000004): round to the step's
	// decimals so that labels read 3.4.
	decimals := max(0, 1-int(math.Floor(math.Log10(step))))
	var out []float64
	for v := start; v <= hi+step*0.999 && len(out) < 50; v += step {
		t, _ := strconv.ParseFloat(strconv.FormatFloat(math.Round(v/step)*step, 'f', decimals, 64), 64)
		out = append(out, t)
	}
	return out
}

func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case a >= 1:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

package report

import (
	"fmt"
	"html"
	"image/color"
	"strings"
)

type svgCanvas struct{ b strings.Builder }

func colorHex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func opacity(c color.RGBA) string {
	if c.A == 255 {
		return ""
	}
	return fmt.Sprintf(` fill-opacity="%.2f"`, float64(c.A)/255)
}

func (s *svgCanvas) line(x1, y1, x2, y2 float64, c color.RGBA, w float64, dashed bool) {
	d := ""
	if dashed {
		d = ` stroke-dasharray="4 3"`
	}
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"%s/>`, x1, y1, x2, y2, colorHex(c), w, d)
}

func (s *svgCanvas) polyline(pts [][2]float64, c color.RGBA, w float64) {
	if len(pts) == 0 {
		return
	}
	s.b.WriteString(`<path fill="none" stroke-linejoin="round" stroke="` + colorHex(c) + fmt.Sprintf(`" stroke-width="%g" d="`, w))
	for i, p := range pts {
		if i == 0 {
			fmt.Fprintf(&s.b, "M%.1f %.1f", p[0], p[1])
		} else {
			fmt.Fprintf(&s.b, "L%.1f %.1f", p[0], p[1])
		}
	}
	s.b.WriteString(`"/>`)
}

func (s *svgCanvas) rect(x, y, w, h float64, c color.RGBA) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s/>`, x, y, w, h, colorHex(c), opacity(c))
}

func (s *svgCanvas) circle(x, y, r float64, c color.RGBA) {
	fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="%g" fill="%s"/>`, x, y, r, colorHex(c))
}

func (s *svgCanvas) text(x, y float64, str string, anchor int, c color.RGBA, vertical bool) {
	a := [...]string{"start", "middle", "end"}[anchor+1]
	rot := ""
	if vertical {
		rot = fmt.Sprintf(` transform="rotate(-90 %.1f %.1f)"`, x, y)
	}
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s"%s>%s</text>`, x, y, a, colorHex(c), rot, html.EscapeString(str))
}

// SVG renders a chart as a standalone SVG element.
func SVG(ch *Chart) string {
	var s svgCanvas
	fmt.Fprintf(&s.b, `<svg class="chart" id="chart-%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="DejaVu Sans Mono, monospace" font-size="12" role="img" aria-label="%s">`,
		html.EscapeString(ch.ID), chartW, chartH, chartW, chartH, html.EscapeString(ch.Title))
	drawChart(&s, ch)
	s.b.WriteString(`</svg>`)
	return s.b.String()
}

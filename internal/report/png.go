package report

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
)

// glyphs is font6x13Hex decoded once per render (no package state).
type glyphs []byte

func loadGlyphs() glyphs {
	b, err := hex.DecodeString(font6x13Hex)
	if err != nil {
		panic("report: corrupt embedded font: " + err.Error())
	}
	return b
}

// pngCanvas rasterises charts without a graphics library: lines as
// stamped discs, filled rectangles and circles, bitmap text. Blending is
// "source over" so translucent bars mix.
type pngCanvas struct {
	img  *image.RGBA
	font glyphs
}

func (p *pngCanvas) blend(x, y int, c color.RGBA) {
	if !(image.Point{x, y}.In(p.img.Rect)) {
		return
	}
	i := p.img.PixOffset(x, y)
	a := uint32(c.A)
	for k, v := range [3]uint8{c.R, c.G, c.B} {
		d := uint32(p.img.Pix[i+k])
		p.img.Pix[i+k] = uint8((uint32(v)*a + d*(255-a)) / 255)
	}
	p.img.Pix[i+3] = 255
}

func (p *pngCanvas) fillRect(x0, y0, x1, y1 int, c color.RGBA) {
	for y := max(y0, 0); y < min(y1, p.img.Rect.Max.Y); y++ {
		for x := max(x0, 0); x < min(x1, p.img.Rect.Max.X); x++ {
			p.blend(x, y, c)
		}
	}
}

func (p *pngCanvas) line(x1, y1, x2, y2 float64, c color.RGBA, w float64, dashed bool) {
	n := int(math.Max(math.Abs(x2-x1), math.Abs(y2-y1))) + 1
	r := int(math.Max(0, math.Round((w-1)/2)))
	for i := 0; i <= n; i++ {
		if dashed && (i/4)%2 == 1 {
			continue
		}
		t := float64(i) / float64(n)
		x := int(math.Round(x1 + t*(x2-x1)))
		y := int(math.Round(y1 + t*(y2-y1)))
		// Opaque stamps: overlapping stamps must not darken the line.
		for dy := -r; dy <= r; dy++ {
			for dx := -r; dx <= r; dx++ {
				if image.Pt(x+dx, y+dy).In(p.img.Rect) {
					p.img.SetRGBA(x+dx, y+dy, c)
				}
			}
		}
	}
}

func (p *pngCanvas) polyline(pts [][2]float64, c color.RGBA, w float64) {
	for i := 1; i < len(pts); i++ {
		p.line(pts[i-1][0], pts[i-1][1], pts[i][0], pts[i][1], c, w, false)
	}
}

func (p *pngCanvas) rect(x, y, w, h float64, c color.RGBA) {
	p.fillRect(int(math.Round(x)), int(math.Round(y)), int(math.Round(x+w)), int(math.Round(y+h)), c)
}

func (p *pngCanvas) circle(cx, cy, r float64, c color.RGBA) {
	for y := int(cy - r - 1); y <= int(cy+r+1); y++ {
		for x := int(cx - r - 1); x <= int(cx+r+1); x++ {
			if (float64(x)-cx)*(float64(x)-cx)+(float64(y)-cy)*(float64(y)-cy) <= r*r {
				p.blend(x, y, c)
			}
		}
	}
}

func (p *pngCanvas) text(x, y float64, s string, anchor int, c color.RGBA, vertical bool) {
	runes := []rune(s)
	width := float64(len(runes) * fontAdvance)
	start := x
	switch anchor {
	case 0:
		start = x - width/2
	case 1:
		start = x - width
	}
	for i, r := range runes {
		r = asciiFold(r)
		g := p.font[int(r-' ')*fontH : int(r-' '+1)*fontH]
		off := start + float64(i*fontAdvance)
		for row := 0; row < fontH; row++ {
			for col := 0; col < fontW; col++ {
				if g[row]&(1<<(fontW-1-col)) == 0 {
					continue
				}
				// Horizontal: glyph pixel (col, row) from the baseline.
				gx, gy := off-x+float64(col), float64(row-fontAscent)
				if vertical { // rotate 90° counter-clockwise about (x, y)
					gx, gy = gy, -gx
				}
				p.blend(int(math.Round(x+gx)), int(math.Round(y+gy)), c)
			}
		}
	}
}

// PNG renders a chart as PNG bytes.
func PNG(ch *Chart) ([]byte, error) {
	p := &pngCanvas{img: image.NewRGBA(image.Rect(0, 0, chartW, chartH)), font: loadGlyphs()}
	drawChart(p, ch)
	var buf bytes.Buffer
	if err := png.Encode(&buf, p.img); err != nil {
		return nil, fmt.Errorf("encoding %s.png: %w", ch.ID, err)
	}
	return buf.Bytes(), nil
}

// WritePNGs writes one PNG per chart into dir (created if needed) and
// returns the paths.
func WritePNGs(dir string, charts []Chart) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	var paths []string
	for i := range charts {
		b, err := PNG(&charts[i])
		if err != nil {
			return paths, err
		}
		p := filepath.Join(dir, charts[i].ID+".png")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return paths, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// asciiFold maps the few non-ASCII characters ttft's own labels use to
// ASCII look-alikes for the bitmap font; anything else becomes '?'.
func asciiFold(r rune) rune {
	switch r {
	case '×':
		return 'x'
	case '–', '—', '−':
		return '-'
	case '…', '·':
		return '.'
	case 'µ', 'μ':
		return 'u'
	}
	if r < ' ' || r > '~' {
		return '?'
	}
	return r
}

package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"github.com/ttft-dev/ttft/internal/record"
)

// Progress keeps running counters and a TTFT sketch for live display. Only
// request completions touch it, never token events.
type Progress struct {
	mu     sync.Mutex
	total  int
	start  time.Time
	done   int
	failed int
	errs   map[string]int
	ttft   *ddsketch.DDSketch
}

func newProgress() *Progress {
	sk, _ := ddsketch.NewDefaultDDSketch(0.01)
	return &Progress{ttft: sk, errs: map[string]int{}}
}

func (p *Progress) begin(total int, at time.Time) {
	p.mu.Lock()
	p.total, p.start = total, at
	p.mu.Unlock()
}

func (p *Progress) observe(rec *record.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !rec.OK() {
		p.failed++
		p.errs[rec.ErrorClass]++
		return
	}
	if rec.TTFTMs > 0 {
		_ = p.ttft.Add(rec.TTFTMs)
	}
}

// Snapshot is a moment of a run.
type Snapshot struct {
	Done, Total, Failed int
	Elapsed             time.Duration
	Rate                float64
	TTFTP50, TTFTP95    float64
	Errors              map[string]int
}

// Snapshot returns the current counters.
func (p *Progress) Snapshot(now time.Time) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{Done: p.done, Total: p.total, Failed: p.failed, Errors: map[string]int{}}
	for k, v := range p.errs {
		s.Errors[k] = v
	}
	if !p.start.IsZero() {
		s.Elapsed = now.Sub(p.start)
		if sec := s.Elapsed.Seconds(); sec > 0 {
			s.Rate = float64(p.done) / sec
		}
	}
	if p.ttft.GetCount() > 0 {
		s.TTFTP50, _ = p.ttft.GetValueAtQuantile(0.5)
		s.TTFTP95, _ = p.ttft.GetValueAtQuantile(0.95)
	}
	return s
}

// Line renders a snapshot as one status line.
func (s Snapshot) Line() string {
	total := "?"
	if s.Total > 0 {
		total = fmt.Sprint(s.Total)
	}
	return fmt.Sprintf("%d/%s done  %.1f req/s  TTFT p50 %.1f ms  p95 %.1f ms  errors %d  [%s]",
		s.Done, total, s.Rate, s.TTFTP50, s.TTFTP95, s.Failed, s.Elapsed.Truncate(100*time.Millisecond))
}

// Display prints progress to w until stop is closed: a rewritten line on a
// terminal, a plain line every plainEvery otherwise.
func Display(w io.Writer, p *Progress, terminal bool, plainEvery time.Duration, stop <-chan struct{}) {
	every := plainEvery
	if terminal {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			if terminal {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		case now := <-t.C:
			s := p.Snapshot(now)
			if terminal {
				fmt.Fprint(w, "\r\033[K"+s.Line())
			} else {
				fmt.Fprintln(w, s.Line())
			}
		}
	}
}

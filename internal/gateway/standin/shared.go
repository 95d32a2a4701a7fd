package standin

import (
	"context"
	"sync"
	"time"
)

// sharedProcessor is processor sharing: every job in it advances at 1/n
// of full speed while n jobs are in it. Work is kept in nanoseconds at
// full speed and settled whenever the set of jobs changes, between
// which each job's rate is constant.
type sharedProcessor struct {
	mu      sync.Mutex
	jobs    []*sharedJob
	settled time.Time
	changed chan struct{} // closed and replaced when jobs join or leave
}

type sharedJob struct {
	left float64 // ns of work at full speed
	done bool
}

func newSharedProcessor() *sharedProcessor {
	return &sharedProcessor{changed: make(chan struct{})}
}

// run does work on the processor; false when ctx ended first.
func (p *sharedProcessor) run(ctx context.Context, work time.Duration) bool {
	if work <= 0 {
		return ctx.Err() == nil
	}
	j := &sharedJob{left: float64(work)}
	p.mu.Lock()
	p.settle(time.Now())
	p.jobs = append(p.jobs, j)
	p.notify()
	p.mu.Unlock()
	for {
		p.mu.Lock()
		p.settle(time.Now())
		if j.done {
			p.mu.Unlock()
			return true
		}
		eta := time.Duration(j.left * float64(len(p.jobs)))
		changed := p.changed
		p.mu.Unlock()
		t := time.NewTimer(eta)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			p.mu.Lock()
			p.settle(time.Now())
			p.remove(j)
			p.mu.Unlock()
			return false
		}
	}
}

// settle charges the time since the last settlement to every job and
// retires those whose work is done (p.mu held). A job within a
// microsecond of its end is done: a timer cannot wait less.
func (p *sharedProcessor) settle(now time.Time) {
	if n := len(p.jobs); n > 0 {
		each := float64(now.Sub(p.settled)) / float64(n)
		for _, j := range p.jobs {
			j.left -= each
		}
	}
	p.settled = now
	kept := p.jobs[:0]
	for _, j := range p.jobs {
		if j.left <= float64(time.Microsecond) {
			j.done = true
			continue
		}
		kept = append(kept, j)
	}
	if len(kept) < len(p.jobs) {
		clear(p.jobs[len(kept):])
		p.jobs = kept
		p.notify()
	}
}

// remove takes j out of the processor (p.mu held).
func (p *sharedProcessor) remove(j *sharedJob) {
	for i, o := range p.jobs {
		if o == j {
			p.jobs = append(p.jobs[:i], p.jobs[i+1:]...)
			p.notify()
			return
		}
	}
}

func (p *sharedProcessor) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

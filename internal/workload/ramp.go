package workload

// An open-loop rate ramp: Poisson arrivals whose rate goes linearly from
// From to To req/s over Over, then stays at To — a non-homogeneous Poisson
// process. Its send times are drawn exactly by time transformation: unit-rate
// Poisson arrival times s₁ < s₂ < … mapped through the inverse of the
// cumulative rate Λ(t) = ∫₀ᵗ λ. Ramped wraps any source and sets each
// request's At, so runners treat it as every other scheduled source (a
// scenario's arrival process, a trace): sent on its times, however many
// are in flight.

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ramp is a linear rate ramp.
type Ramp struct {
	From, To float64 // req/s at the start and from Over on
	Over     time.Duration
}

// ParseRamp reads FROM:TO:OVER, e.g. "10:100:60s" (10 → 100 req/s over a
// minute, then 100 req/s). A ramp down to 0 ends the schedule at OVER.
func ParseRamp(spec string) (Ramp, error) {
	parts := strings.Split(strings.TrimSpace(spec), ":")
	if len(parts) != 3 {
		return Ramp{}, fmt.Errorf("rate ramp %q: want FROM:TO:OVER, e.g. 10:100:60s", spec)
	}
	from, err1 := strconv.ParseFloat(parts[0], 64)
	to, err2 := strconv.ParseFloat(parts[1], 64)
	over, err3 := time.ParseDuration(parts[2])
	if err1 != nil || err2 != nil {
		return Ramp{}, fmt.Errorf("rate ramp %q: FROM and TO are rates in req/s", spec)
	}
	if err3 != nil {
		return Ramp{}, fmt.Errorf("rate ramp %q: OVER is a duration such as 60s: %w", spec, err3)
	}
	r := Ramp{From: from, To: to, Over: over}
	return r, r.Validate()
}

// Validate checks the ramp: finite non-negative rates, not both 0, and a
// positive duration.
func (r Ramp) Validate() error {
	ok := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	switch {
	case !ok(r.From) || !ok(r.To):
		return fmt.Errorf("rate ramp: rates must be finite and >= 0, got %v and %v", r.From, r.To)
	case r.From == 0 && r.To == 0:
		return fmt.Errorf("rate ramp: from 0 to 0 req/s sends nothing")
	case r.Over <= 0:
		return fmt.Errorf("rate ramp: the duration must be positive, got %v", r.Over)
	}
	return nil
}

func (r Ramp) String() string {
	return fmt.Sprintf("%g → %g req/s over %s", r.From, r.To, r.Over)
}

// Rate is λ(t) in req/s at offset t.
func (r Ramp) Rate(t time.Duration) float64 {
	if t >= r.Over {
		return r.To
	}
	if t < 0 {
		return r.From
	}
	return r.From + (r.To-r.From)*t.Seconds()/r.Over.Seconds()
}

// Cumulative is Λ(t), the expected number of arrivals in [0, t].
func (r Ramp) Cumulative(t time.Duration) float64 {
	T := r.Over.Seconds()
	s := min(max(t.Seconds(), 0), T)
	c := r.From*s + (r.To-r.From)*s*s/(2*T)
	if t.Seconds() > T {
		c += r.To * (t.Seconds() - T)
	}
	return c
}

// inverse is Λ⁻¹(s), or false when the schedule has ended (a ramp down to
// 0 holds no arrival after Over).
func (r Ramp) inverse(s float64) (time.Duration, bool) {
	T := r.Over.Seconds()
	end := r.From*T + (r.To-r.From)*T/2 // Λ(Over)
	var t float64
	if s <= end {
		// Solve (a/2)t² + From·t − s = 0 with a = (To−From)/T, in the
		// form that stays exact as a → 0 and for a ramp down (a < 0).
		a := (r.To - r.From) / T
		t = 2 * s / (r.From + math.Sqrt(max(r.From*r.From+2*a*s, 0)))
	} else {
		if r.To == 0 {
			return 0, false
		}
		t = T + (s-end)/r.To
	}
	return time.Duration(t * float64(time.Second)), true
}

// Ramped is a Source whose requests are sent on a ramp's schedule.
type Ramped struct {
	src  Source
	ramp Ramp
	rng  *rand.Rand
	mu   sync.Mutex
	s    float64 // the last unit-rate arrival time
}

// NewRamped wraps src: each request it yields carries its send time on
// ramp's schedule (the first at the first draw, not at 0, as the process
// has it). seed makes the schedule reproducible.
func NewRamped(src Source, ramp Ramp, seed int64) (*Ramped, error) {
	if err := ramp.Validate(); err != nil {
		return nil, err
	}
	if OwnsSchedule(src) {
		return nil, fmt.Errorf("rate ramp: the workload already has its own schedule (a scenario's arrival process or a trace)")
	}
	return &Ramped{src: src, ramp: ramp, rng: rand.New(rand.NewPCG(uint64(seed), 0x72616d70))}, nil // "ramp"
}

// OwnsSchedule implements ScheduledSource.
func (r *Ramped) OwnsSchedule() bool { return true }

// next draws the next send offset, false once the schedule has ended.
func (r *Ramped) next() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s += r.rng.ExpFloat64()
	return r.ramp.inverse(r.s)
}

// Next implements Source.
func (r *Ramped) Next(ctx context.Context) (*Request, error) {
	at, ok := r.next()
	if !ok {
		return nil, io.EOF
	}
	req, err := r.src.Next(ctx)
	if err != nil {
		return nil, err
	}
	req.At, req.HasAt = at, true
	return req, nil
}

// Skip passes over the next request, drawing its send time all the same so
// that the schedule stays in step (sharded runs skip the others' requests).
func (r *Ramped) Skip(ctx context.Context) error {
	if _, ok := r.next(); !ok {
		return io.EOF
	}
	if s, ok := r.src.(interface{ Skip(context.Context) error }); ok {
		return s.Skip(ctx)
	}
	_, err := r.src.Next(ctx)
	return err
}

// Done passes a finished request on to a source that wants to hear of it.
func (r *Ramped) Done(req *Request, res Result) {
	if f, ok := r.src.(FeedbackSource); ok {
		f.Done(req, res)
	}
}

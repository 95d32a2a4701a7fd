package workload

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// GenOptions configures NewGenerated: synthetic prompts with length
// distributions, optional shared-prefix groups and an optional schedule.
type GenOptions struct {
	Tokenizer   Tokenizer // nil: DefaultTokenizer()
	Seed        int64
	Requests    int // 0 = unlimited
	Scenario    string
	Prompt      Dist // per-request part (after the prefix)
	Output      Dist
	ForceOutput bool
	Prefix      *PrefixSpec
	// Arrival, when its rate is > 0 and Schedule is set, makes the source
	// own the schedule: every request carries At.
	Arrival  ArrivalSpec
	Schedule bool
	// PromptScale is how many of the server's tokens one of Tokenizer's
	// makes (0 or 1: the lengths are the tokenizer's own). Prompt and
	// prefix lengths are then drawn in server tokens and built with
	// round(n/PromptScale) local tokens, so that the server sees the length
	// asked for; Request.PromptTokens carries the server-token length.
	PromptScale float64
}

// Generated is a Source of synthetic requests. Safe for concurrent use.
type Generated struct {
	opt    GenOptions
	gen    *PromptGen
	groups *prefixGroups
	sched  *schedule

	mu   sync.Mutex
	next int
}

// NewGenerated validates opt and returns the source.
func NewGenerated(opt GenOptions) (*Generated, error) {
	if err := opt.Prompt.Validate("prompt tokens"); err != nil {
		return nil, err
	}
	if err := opt.Output.Validate("output tokens"); err != nil {
		return nil, err
	}
	if opt.Requests < 0 {
		return nil, fmt.Errorf("requests %d is negative", opt.Requests)
	}
	if opt.Tokenizer == nil {
		opt.Tokenizer = DefaultTokenizer()
	}
	gen, err := NewPromptGen(opt.Tokenizer)
	if err != nil {
		return nil, err
	}
	if opt.PromptScale < 0 || math.IsNaN(opt.PromptScale) || math.IsInf(opt.PromptScale, 0) {
		return nil, fmt.Errorf("prompt scale %v is not a positive number", opt.PromptScale)
	}
	g := &Generated{opt: opt, gen: gen}
	if opt.Prefix != nil {
		g.groups, err = newPrefixGroups(gen, *opt.Prefix, opt.Seed)
		if err == nil {
			g.groups.local = g.local
		}
		if err != nil {
			return nil, err
		}
	}
	if opt.Schedule && opt.Arrival.RatePerS > 0 {
		g.sched, err = newSchedule(opt.Arrival, opt.Seed)
		if err != nil {
			return nil, err
		}
	}
	return g, nil
}

// local is the tokenizer's length for n server tokens.
func (g *Generated) local(n int) int { return localLength(n, g.opt.PromptScale) }

// server is a prompt's length as recorded (see recordedLength).
func (g *Generated) server(ids, asked, local int) int {
	return recordedLength(ids, asked, local, g.opt.PromptScale)
}

// OwnsSchedule reports whether the source sets send times (an arrival
// process with Schedule).
func (g *Generated) OwnsSchedule() bool { return g.sched != nil }

// Skip passes over the next request without building its prompt; its
// send time is drawn all the same, so the schedule stays in step.
func (g *Generated) Skip(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opt.Requests > 0 && g.next >= g.opt.Requests {
		return io.EOF
	}
	g.next++
	if g.sched != nil {
		g.sched.next()
	}
	return nil
}

// Next returns the next request or io.EOF.
func (g *Generated) Next(ctx context.Context) (*Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	i := g.next
	if g.opt.Requests > 0 && i >= g.opt.Requests {
		g.mu.Unlock()
		return nil, io.EOF
	}
	g.next++
	var at time.Duration
	if g.sched != nil {
		at = g.sched.next()
	}
	g.mu.Unlock()

	rng := rand.New(rand.NewPCG(uint64(g.opt.Seed), uint64(i)^0x9e3779b97f4a7c15))
	suffixN := g.opt.Prompt.Draw(rng)
	serverN := suffixN
	suffixN = g.local(suffixN)
	out := g.opt.Output.Draw(rng)
	r := &Request{Index: i, MaxTokens: out, Scenario: g.opt.Scenario, At: at, HasAt: g.sched != nil}
	if g.opt.ForceOutput {
		r.MinTokens = out
	}
	if g.groups == nil {
		text, ids, err := g.gen.Text(rng, suffixN)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		r.Prompt, r.Tokens, r.PromptTokens = text, ids, g.server(len(ids), serverN, suffixN)
		r.Messages = []Message{{Role: "user", Content: text}}
		return r, nil
	}
	gi := g.groups.pick(rng)
	p, err := g.groups.get(gi)
	if err != nil {
		return nil, fmt.Errorf("request %d: %w", i, err)
	}
	text, ids, err := g.gen.Extend(rng, p.text, len(p.ids), suffixN)
	if err != nil {
		return nil, fmt.Errorf("request %d: %w", i, err)
	}
	r.Prompt, r.Tokens, r.PromptTokens = text, ids, g.server(len(ids), serverN+p.serverN, suffixN+len(p.ids))
	r.Group = p.name
	r.Messages = []Message{
		{Role: "system", Content: p.text},
		{Role: "user", Content: strings.TrimPrefix(text[len(p.text):], " ")},
	}
	return r, nil
}

// prefixGroups holds the shared prefixes, generated lazily and kept.
type prefixGroups struct {
	spec PrefixSpec
	gen  *PromptGen
	seed int64
	cum  []float64 // cumulative popularity
	// local converts server tokens to the tokenizer's (nil: identity).
	local func(int) int

	mu   sync.Mutex
	docs map[int]*prefixDoc
}

type prefixDoc struct {
	name    string
	text    string
	ids     []int
	serverN int // length in the server's tokens (len(ids) unscaled)
}

func newPrefixGroups(gen *PromptGen, spec PrefixSpec, seed int64) (*prefixGroups, error) {
	if spec.Groups < 1 || spec.Tokens < 1 {
		return nil, fmt.Errorf("prefix: groups and tokens must be at least 1, got %d and %d", spec.Groups, spec.Tokens)
	}
	s := spec.ZipfS
	switch spec.Popularity {
	case "", "uniform":
		s = 0
	case "zipf":
		if s == 0 {
			s = 1.1
		}
		if s < 0 {
			return nil, fmt.Errorf("prefix: zipf_s must be >= 0, got %v", s)
		}
	default:
		return nil, fmt.Errorf("prefix: popularity %q is not uniform or zipf", spec.Popularity)
	}
	return &prefixGroups{spec: spec, gen: gen, seed: seed, cum: ZipfCDF(spec.Groups, s), docs: map[int]*prefixDoc{}}, nil
}

// ZipfCDF is the cumulative popularity of n items, item k weighing
// 1/(k+1)^s (s = 0: uniform); PickCDF draws from it.
func ZipfCDF(n int, s float64) []float64 {
	cum := make([]float64, n)
	var total float64
	for k := range cum {
		total += 1 / math.Pow(float64(k+1), s)
		cum[k] = total
	}
	for k := range cum {
		cum[k] /= total
	}
	return cum
}

// PickCDF is the item a uniform draw u in [0, 1) falls on: the first k
// with cum[k] ≥ u.
func PickCDF(cum []float64, u float64) int {
	lo, hi := 0, len(cum)-1
	for lo < hi {
		m := (lo + hi) / 2
		if cum[m] < u {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// pick draws a group index: group k has weight 1/(k+1)^s (s = 0: uniform).
func (p *prefixGroups) pick(rng *rand.Rand) int { return PickCDF(p.cum, rng.Float64()) }

func (p *prefixGroups) get(k int) (*prefixDoc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.docs[k]; ok {
		return d, nil
	}
	rng := rand.New(rand.NewPCG(uint64(p.seed), 0x70726566_00000000|uint64(k))) // "pref"
	n := p.spec.Tokens
	if p.local != nil {
		n = p.local(n)
	}
	text, ids, err := p.gen.Text(rng, n)
	if err != nil {
		return nil, fmt.Errorf("prefix of group %d: %w", k, err)
	}
	serverN := len(ids)
	if p.local != nil {
		serverN = p.spec.Tokens
	}
	d := &prefixDoc{name: fmt.Sprintf("g%d", k), text: text, ids: ids, serverN: serverN}
	p.docs[k] = d
	return d, nil
}

// schedule turns an ArrivalSpec into send offsets, with optional sinusoidal
// burst modulation by thinning.
type schedule struct {
	arr   *Arrivals
	spec  ArrivalSpec
	rng   *rand.Rand
	t     time.Duration
	first bool
}

func newSchedule(a ArrivalSpec, seed int64) (*schedule, error) {
	kind := a.Process
	if kind == "" {
		kind = "poisson"
	}
	peak := a.RatePerS * (1 + a.BurstAmplitude)
	b := a.Burstiness
	if b == 0 {
		b = 1
	}
	arr, err := NewArrivals(kind, peak, b, seed)
	if err != nil {
		return nil, err
	}
	return &schedule{arr: arr, spec: a, rng: rand.New(rand.NewPCG(uint64(seed), 0x7468696e)), first: true}, nil
}

// next returns the next send offset. The first request goes at 0.
func (s *schedule) next() time.Duration {
	if s.first {
		s.first = false
		return 0
	}
	for {
		s.t += s.arr.Next()
		if s.spec.BurstAmplitude == 0 {
			return s.t
		}
		phase := 2 * math.Pi * float64(s.t) / float64(s.spec.BurstPeriod)
		rate := 1 + s.spec.BurstAmplitude*math.Sin(phase)
		if s.rng.Float64()*(1+s.spec.BurstAmplitude) <= rate {
			return s.t
		}
	}
}

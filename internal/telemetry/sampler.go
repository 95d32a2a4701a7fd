package telemetry

import (
	"context"
	"fmt"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DynamicSampler is the gateway's head sampler (article §5): it samples a
// base ratio of traces by trace ID; while the rolling P99 TTFT is above a
// threshold AND the error rate is above a threshold it samples everything,
// until both have recovered for a hold period. Spans it does not sample are
// still recorded (RecordOnly) so that a TailKeepProcessor can export the
// ones that end in an error or an SLO miss: head sampling cannot know that
// when the span starts, so "always keep errors and SLO violations" is a tail
// decision taken when the local root span ends.
//
// A sampled remote or local parent is always honoured, so a trace that the
// caller (ttft bench) sampled stays whole across the gateway hop.
//
// Observe is fed with each finished request's TTFT and outcome; it is cheap
// (a mutex-guarded ring append, with a re-evaluation at most every
// EvalEvery), and ShouldSample reads one atomic.
type DynamicSampler struct {
	base         float64
	ratio        sdktrace.Sampler
	p99Threshold time.Duration
	errThreshold float64

	// Window is how far back the rolling statistics look; Hold is how long
	// the sampler stays escalated after the last unhealthy evaluation;
	// MinSamples is the least number of observations in the window before it
	// may escalate (one slow error is not an incident); EvalEvery bounds how
	// often Observe recomputes the P99. Set them before use.
	Window     time.Duration
	Hold       time.Duration
	MinSamples int
	EvalEvery  time.Duration
	// Now is the clock (tests inject one).
	Now func() time.Time

	escalated atomic.Bool

	mu             sync.Mutex
	ring           []observation
	head, n        int
	lastEval       time.Time
	unhealthyUntil time.Time
	lastP99        time.Duration
	lastErrRate    float64
	lastCount      int
	scratch        []time.Duration
}

type observation struct {
	at   time.Time
	ttft time.Duration
	err  bool
}

// ringSize bounds the memory of the rolling window: at more than
// ringSize/Window requests per second the window is effectively the last
// ringSize requests, which is plenty for a P99.
const ringSize = 4096

// NewDynamicSampler returns a sampler with base ratio base (0..1) that
// escalates to sampling everything while the rolling P99 TTFT exceeds
// p99Threshold and the error rate exceeds errRate (a fraction: 0.005 is
// 0.5%). Defaults: 60 s window, 30 s hold, 50 samples minimum.
func NewDynamicSampler(base float64, p99Threshold time.Duration, errRate float64) *DynamicSampler {
	base = min(max(base, 0), 1)
	return &DynamicSampler{
		base:         base,
		ratio:        sdktrace.TraceIDRatioBased(base),
		p99Threshold: p99Threshold,
		errThreshold: errRate,
		Window:       time.Minute,
		Hold:         30 * time.Second,
		MinSamples:   50,
		EvalEvery:    250 * time.Millisecond,
		Now:          time.Now,
		ring:         make([]observation, ringSize),
	}
}

// ShouldSample implements sdktrace.Sampler.
func (s *DynamicSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordOnly, Tracestate: psc.TraceState()}
	switch {
	case psc.IsValid() && psc.IsSampled():
		res.Decision = sdktrace.RecordAndSample
	case psc.IsValid() && !psc.IsRemote():
		// A local parent already decided (RecordOnly): children follow it so a
		// trace is never half-sampled when escalation starts mid-request.
	case s.escalated.Load():
		res.Decision = sdktrace.RecordAndSample
	case s.ratio.ShouldSample(p).Decision == sdktrace.RecordAndSample:
		res.Decision = sdktrace.RecordAndSample
	}
	return res
}

// Description implements sdktrace.Sampler.
func (s *DynamicSampler) Description() string {
	return fmt.Sprintf("DynamicSampler{base=%g,p99>%s,errors>%g}", s.base, s.p99Threshold, s.errThreshold)
}

// Escalated reports whether the sampler is currently sampling everything.
func (s *DynamicSampler) Escalated() bool { return s.escalated.Load() }

// Stats returns the last evaluation: rolling P99 TTFT of the requests
// that had one, error rate, and the number of observations in the window.
func (s *DynamicSampler) Stats() (p99 time.Duration, errRate float64, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastP99, s.lastErrRate, s.lastCount
}

// Observe feeds one finished request: its TTFT (0 when it never had one;
// such requests count for the error rate only) and whether it failed.
func (s *DynamicSampler) Observe(ttft time.Duration, failed bool) {
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring[s.head] = observation{at: now, ttft: ttft, err: failed}
	s.head = (s.head + 1) % len(s.ring)
	if s.n < len(s.ring) {
		s.n++
	}
	if now.Sub(s.lastEval) >= s.EvalEvery {
		s.evaluateLocked(now)
	}
}

// Evaluate recomputes the rolling statistics now (Observe does so at most
// every EvalEvery; call this from a ticker to let the sampler recover while
// no traffic arrives).
func (s *DynamicSampler) Evaluate() {
	now := s.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evaluateLocked(now)
}

func (s *DynamicSampler) evaluateLocked(now time.Time) {
	s.lastEval = now
	cutoff := now.Add(-s.Window)
	s.scratch = s.scratch[:0]
	total, errs := 0, 0
	for i := 0; i < s.n; i++ {
		o := s.ring[(s.head-1-i+len(s.ring))%len(s.ring)]
		if o.at.Before(cutoff) {
			break // the ring is in time order, newest first here
		}
		total++
		if o.err {
			errs++
		}
		// A failed request still counts towards the P99 when it had a
		// TTFT (a timeout before the first token passes its timeout).
		if o.ttft > 0 {
			s.scratch = append(s.scratch, o.ttft)
		}
	}
	var p99 time.Duration
	if len(s.scratch) > 0 {
		slices.Sort(s.scratch)
		// Nearest-rank P99: the smallest value with at least 99% at or below.
		rank := (99*len(s.scratch) + 99) / 100
		p99 = s.scratch[rank-1]
	}
	rate := 0.0
	if total > 0 {
		rate = float64(errs) / float64(total)
	}
	s.lastP99, s.lastErrRate, s.lastCount = p99, rate, total
	unhealthy := total >= s.MinSamples && p99 > s.p99Threshold && rate > s.errThreshold
	switch {
	case unhealthy:
		s.unhealthyUntil = now.Add(s.Hold)
		s.escalated.Store(true)
	case !now.Before(s.unhealthyUntil):
		s.escalated.Store(false)
	}
}

// TailOptions configures a TailKeepProcessor.
type TailOptions struct {
	// SLOTTFT, when positive, keeps a trace in which any span has
	// gen_ai.response.time_to_first_chunk above it (seconds attribute),
	// besides spans flagged ttft.slo.violated=true and error spans.
	SLOTTFT time.Duration
	// MaxTraces bounds the traces buffered while waiting for their local
	// root to end (oldest evicted and dropped first); default 4096.
	MaxTraces int
	// MaxSpansPerTrace bounds each buffered trace; default 256.
	MaxSpansPerTrace int
}

// TailKeepProcessor sits in front of the exporting processor. Sampled spans
// pass straight through. Spans that were recorded but not sampled are
// buffered per trace until the trace's local root span (no parent, or a
// remote parent) ends; if any span of that local trace ended with an error
// status or an SLO miss, the whole local trace is exported (marked sampled),
// otherwise it is dropped. Memory is bounded by MaxTraces×MaxSpansPerTrace.
type TailKeepProcessor struct {
	next sdktrace.SpanProcessor
	opt  TailOptions

	mu      sync.Mutex
	pending map[trace.TraceID]*pendingTrace
	fifo    []trace.TraceID

	kept, dropped, evicted atomic.Int64
}

type pendingTrace struct {
	spans []sdktrace.ReadOnlySpan
	keep  bool
}

// NewTailKeepProcessor wraps next (normally a BatchSpanProcessor).
func NewTailKeepProcessor(next sdktrace.SpanProcessor, opt TailOptions) *TailKeepProcessor {
	if opt.MaxTraces <= 0 {
		opt.MaxTraces = 4096
	}
	if opt.MaxSpansPerTrace <= 0 {
		opt.MaxSpansPerTrace = 256
	}
	return &TailKeepProcessor{next: next, opt: opt, pending: map[trace.TraceID]*pendingTrace{}}
}

// OnStart implements sdktrace.SpanProcessor.
func (p *TailKeepProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	p.next.OnStart(parent, s)
}

// OnEnd implements sdktrace.SpanProcessor.
func (p *TailKeepProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	if sc.IsSampled() {
		p.next.OnEnd(s)
		return
	}
	interesting := p.interesting(s)
	localRoot := !s.Parent().IsValid() || s.Parent().IsRemote()
	tid := sc.TraceID()

	p.mu.Lock()
	pt := p.pending[tid]
	if pt == nil {
		pt = &pendingTrace{}
		p.pending[tid] = pt
		p.fifo = append(p.fifo, tid)
		p.evictLocked()
	}
	if len(pt.spans) < p.opt.MaxSpansPerTrace {
		pt.spans = append(pt.spans, s)
	}
	pt.keep = pt.keep || interesting
	if !localRoot {
		p.mu.Unlock()
		return
	}
	delete(p.pending, tid)
	p.mu.Unlock()

	if !pt.keep {
		p.dropped.Add(1)
		return
	}
	p.kept.Add(1)
	for _, sp := range pt.spans {
		p.next.OnEnd(sampledSpan{sp})
	}
}

// evictLocked drops the oldest pending traces beyond MaxTraces. fifo may
// hold IDs already decided; they are skipped and compacted here.
func (p *TailKeepProcessor) evictLocked() {
	for len(p.pending) > p.opt.MaxTraces && len(p.fifo) > 0 {
		id := p.fifo[0]
		p.fifo = p.fifo[1:]
		if _, ok := p.pending[id]; ok {
			delete(p.pending, id)
			p.evicted.Add(1)
		}
	}
	if len(p.fifo) > 2*p.opt.MaxTraces+64 {
		live := p.fifo[:0]
		for _, id := range p.fifo {
			if _, ok := p.pending[id]; ok {
				live = append(live, id)
			}
		}
		p.fifo = live
	}
}

func (p *TailKeepProcessor) interesting(s sdktrace.ReadOnlySpan) bool {
	if s.Status().Code == codes.Error {
		return true
	}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case genaiattr.AttrSLOViolated:
			if kv.Value.Type() == attribute.BOOL && kv.Value.AsBool() {
				return true
			}
		case genaiattr.AttrTimeToFirstChunk:
			if p.opt.SLOTTFT > 0 && kv.Value.AsFloat64() > p.opt.SLOTTFT.Seconds() {
				return true
			}
		}
	}
	return false
}

// Counts reports traces kept by the tail rule, dropped, and evicted unfinished.
func (p *TailKeepProcessor) Counts() (kept, dropped, evicted int64) {
	return p.kept.Load(), p.dropped.Load(), p.evicted.Load()
}

// ForceFlush implements sdktrace.SpanProcessor.
func (p *TailKeepProcessor) ForceFlush(ctx context.Context) error { return p.next.ForceFlush(ctx) }

// Shutdown implements sdktrace.SpanProcessor; traces still waiting for their
// root are dropped.
func (p *TailKeepProcessor) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.pending = map[trace.TraceID]*pendingTrace{}
	p.fifo = nil
	p.mu.Unlock()
	return p.next.Shutdown(ctx)
}

// sampledSpan presents a recorded span as sampled so that the exporting
// processor (which drops unsampled spans) exports it.
type sampledSpan struct{ sdktrace.ReadOnlySpan }

func (s sampledSpan) SpanContext() trace.SpanContext {
	sc := s.ReadOnlySpan.SpanContext()
	return sc.WithTraceFlags(sc.TraceFlags().WithSampled(true))
}

// SetupDynamicTracing is SetupTracing for a server that wants article §5's
// sampling: a DynamicSampler (base ratio, escalation on P99 TTFT and error
// rate) plus the tail-keep processor that exports error and SLO-missing
// traces the head sampler dropped. An explicit OTEL_TRACES_SAMPLER still
// wins (the operator asked for it); the sampler is returned either way so
// the caller can feed Observe unconditionally. sloTTFT > 0 also keeps traces
// whose gen_ai.response.time_to_first_chunk exceeds it.
func SetupDynamicTracing(ctx context.Context, getenv func(string) string, serviceName string,
	base float64, p99Threshold time.Duration, errRate float64, sloTTFT time.Duration,
) (trace.TracerProvider, *DynamicSampler, func(context.Context) error, error) {
	ds := NewDynamicSampler(base, p99Threshold, errRate)
	opts := []TracingOption{WithTailKeep(TailOptions{SLOTTFT: sloTTFT})}
	if getenv == nil || getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, WithSampler(ds))
	}
	tp, shutdown, err := SetupTracing(ctx, getenv, serviceName, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	return tp, ds, shutdown, nil
}

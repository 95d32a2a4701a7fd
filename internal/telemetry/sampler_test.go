package telemetry

import (
	"context"
	"encoding/binary"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time              { return c.t }
func (c *fakeClock) add(d time.Duration)         { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock                   { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func sampledFraction(s sdktrace.Sampler) float64 { return sampledFractionSeed(s, 1) }

// sampledFractionSeed draws 20000 random root trace IDs (fixed seed) and
// returns the fraction the sampler samples.
func sampledFractionSeed(s sdktrace.Sampler, seed uint64) float64 {
	r := rand.New(rand.NewPCG(seed, 7))
	n, k := 20000, 0
	for range n {
		var id trace.TraceID
		binary.BigEndian.PutUint64(id[:8], r.Uint64())
		binary.BigEndian.PutUint64(id[8:], r.Uint64())
		if s.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: id, Name: "chat m"}).Decision == sdktrace.RecordAndSample {
			k++
		}
	}
	return float64(k) / float64(n)
}

func TestDynamicSamplerEscalatesAndRecovers(t *testing.T) {
	clk := newFakeClock()
	s := NewDynamicSampler(0.05, 1200*time.Millisecond, 0.005)
	s.Now = clk.now
	s.Window, s.Hold, s.MinSamples, s.EvalEvery = 10*time.Second, 5*time.Second, 50, 0

	if f := sampledFraction(s); f < 0.04 || f > 0.06 {
		t.Fatalf("healthy sampled fraction %.3f, want ≈0.05", f)
	}
	// Slow but error-free: P99 over threshold alone must not escalate.
	for range 200 {
		s.Observe(2*time.Second, false)
		clk.add(10 * time.Millisecond)
	}
	if s.Escalated() {
		t.Fatal("escalated on high P99 without errors")
	}
	// Slow AND 2% errors: escalate, sample everything.
	for i := range 200 {
		s.Observe(2*time.Second, i%50 == 0)
		clk.add(10 * time.Millisecond)
	}
	if !s.Escalated() {
		p99, er, n := s.Stats()
		t.Fatalf("not escalated with p99=%v err=%.3f n=%d", p99, er, n)
	}
	if f := sampledFraction(s); f != 1 {
		t.Fatalf("escalated sampled fraction %.3f, want 1", f)
	}
	// Healthy traffic again: stays escalated through the hold, then recovers
	// once the bad observations have left the window.
	for range 100 {
		s.Observe(100*time.Millisecond, false)
		clk.add(100 * time.Millisecond) // 10 s in all
	}
	clk.add(6 * time.Second) // past the 5 s hold
	s.Evaluate()
	if s.Escalated() {
		p99, er, n := s.Stats()
		t.Fatalf("still escalated after recovery: p99=%v err=%.3f n=%d", p99, er, n)
	}
	if f := sampledFraction(s); f < 0.04 || f > 0.06 {
		t.Fatalf("recovered sampled fraction %.3f, want ≈0.05", f)
	}
}

func TestDynamicSamplerHoldsAndNeedsSamples(t *testing.T) {
	clk := newFakeClock()
	s := NewDynamicSampler(0, time.Second, 0.005)
	s.Now = clk.now
	s.Window, s.Hold, s.MinSamples, s.EvalEvery = time.Minute, 30*time.Second, 50, 0
	for range 10 { // too few to judge
		s.Observe(5*time.Second, true)
	}
	if s.Escalated() {
		t.Fatal("escalated on 10 observations with MinSamples 50")
	}
	for range 60 {
		s.Observe(5*time.Second, true)
	}
	if !s.Escalated() {
		t.Fatal("not escalated")
	}
	clk.add(61 * time.Second) // the window is empty now, but the hold...
	s.Evaluate()
	if s.Escalated() {
		t.Fatal("still escalated after the hold with an empty window")
	}
}

func TestDynamicSamplerBaseRatioProperty(t *testing.T) {
	for _, base := range []float64{0, 0.01, 0.1, 0.5, 1} {
		f := sampledFractionSeed(NewDynamicSampler(base, time.Second, 0.01), uint64(base*1000)+3)
		if d := f - base; d > 0.015 || d < -0.015 {
			t.Errorf("base %.2f: sampled %.4f", base, f)
		}
	}
}

func TestDynamicSamplerHonoursParent(t *testing.T) {
	s := NewDynamicSampler(0, time.Second, 0.01)
	tid := trace.TraceID{1}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	if d := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid}).Decision; d != sdktrace.RecordAndSample {
		t.Errorf("sampled remote parent: decision %v", d)
	}
	if d := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}).Decision; d != sdktrace.RecordOnly {
		t.Errorf("base 0 root: decision %v, want RecordOnly (kept for the tail decision)", d)
	}
}

func TestTailKeepProcessor(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tail := NewTailKeepProcessor(sdktrace.NewSimpleSpanProcessor(exp), TailOptions{SLOTTFT: 500 * time.Millisecond, MaxTraces: 8})
	sampler := NewDynamicSampler(0, time.Hour, 1) // never samples at the head
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(tail))
	tr := tp.Tracer("t")

	run := func(mark func(child trace.Span)) trace.TraceID {
		ctx, root := tr.Start(context.Background(), "gateway")
		_, child := tr.Start(ctx, "chat m")
		mark(child)
		child.End()
		root.End()
		return root.SpanContext().TraceID()
	}
	ok := run(func(trace.Span) {})
	failed := run(func(c trace.Span) { c.SetStatus(codes.Error, "boom") })
	slow := run(func(c trace.Span) { c.SetAttributes(genaiattr.AttrTimeToFirstChunk.Float64(0.9)) })
	flagged := run(func(c trace.Span) { c.SetAttributes(genaiattr.AttrSLOViolated.Bool(true)) })

	byTrace := map[trace.TraceID]int{}
	for _, s := range exp.GetSpans() {
		byTrace[s.SpanContext.TraceID()]++
		if !s.SpanContext.IsSampled() {
			t.Error("exported span not marked sampled")
		}
	}
	if byTrace[ok] != 0 {
		t.Error("healthy unsampled trace was exported")
	}
	for name, id := range map[string]trace.TraceID{"error": failed, "slow": slow, "flagged": flagged} {
		if byTrace[id] != 2 {
			t.Errorf("%s trace: %d spans exported, want both root and child", name, byTrace[id])
		}
	}
	kept, dropped, _ := tail.Counts()
	if kept != 3 || dropped != 1 {
		t.Errorf("kept %d dropped %d, want 3 and 1", kept, dropped)
	}

	// Bounded memory: children whose roots never end are evicted.
	for range 50 {
		_, root := tr.Start(context.Background(), "never ends")
		_, child := tr.Start(trace.ContextWithSpan(context.Background(), root), "child")
		child.End()
	}
	tail.mu.Lock()
	pending := len(tail.pending)
	tail.mu.Unlock()
	if pending > 8 {
		t.Errorf("%d traces pending, bound is 8", pending)
	}
	if _, _, ev := tail.Counts(); ev == 0 {
		t.Error("nothing evicted")
	}
}

func BenchmarkDynamicSamplerObserve(b *testing.B) {
	s := NewDynamicSampler(0.1, time.Second, 0.005)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Observe(time.Duration(i%1000)*time.Millisecond, i%100 == 0)
	}
}

func BenchmarkDynamicSamplerShouldSample(b *testing.B) {
	s := NewDynamicSampler(0.1, time.Second, 0.005)
	p := sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: trace.TraceID{9, 9}}
	b.ReportAllocs()
	for b.Loop() {
		s.ShouldSample(p)
	}
}

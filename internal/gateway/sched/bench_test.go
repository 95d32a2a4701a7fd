package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPick is one scheduling decision (Pick plus the ticket's
// FirstToken and End) for each policy, with 4 and 16 backends and a
// 2,000-token prompt (32 hashed blocks) whose 1,500-token prefix is shared.
func BenchmarkPick(b *testing.B) {
	sys := strings.Repeat("You are a careful assistant. ", 207) // ≈6 KB ≈ 1,500 tokens
	h := NewBlockHasher(0)
	h.Segment("system", sys)
	h.Segment("user", strings.Repeat("question text ", 140))
	blocks := h.Hashes()
	for _, n := range []int{4, 16} {
		for _, pol := range Policies() {
			b.Run(fmt.Sprintf("%s/backends=%d", pol, n), func(b *testing.B) {
				var bs []*Backend
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range n {
					bk := NewBackend(BackendSpec{Name: fmt.Sprint("b", i)})
					train(bk, 50, 0.02, 2e-5, rng)
					bs = append(bs, bk)
				}
				bs[0].Prefix().Insert(blocks[:20])
				s, err := New(Options{Policy: pol, Seed: 1}, bs)
				if err != nil {
					b.Fatal(err)
				}
				req := &Request{Model: "m", PromptTokens: 2000, Blocks: blocks, SLO: 320 * time.Millisecond}
				b.ReportAllocs()
				c0 := cpuTime()
				for b.Loop() {
					t, err := s.Pick(req)
					if err != nil {
						b.Fatal(err)
					}
					t.FirstToken()
					t.End(OutcomeOK)
				}
				// On a shared, overloaded machine wall time per op mostly
				// measures waiting for a CPU; process CPU time per op is the
				// decision's own cost.
				b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkPickPluginTiming is BenchmarkPick's slo-predictive decision
// with 16 backends, with no plugin timing, timing a sample of the
// decisions (the gateway's default) and timing every decision, into an
// observer as cheap as a histogram's.
func BenchmarkPickPluginTiming(b *testing.B) {
	h := NewBlockHasher(0)
	h.Segment("system", strings.Repeat("You are a careful assistant. ", 207))
	h.Segment("user", strings.Repeat("question text ", 140))
	blocks := h.Hashes()
	var obs sumObserver
	for _, every := range []int{0, DefaultPluginLatencyEvery, 1} {
		b.Run(fmt.Sprintf("every=%d", every), func(b *testing.B) {
			var bs []*Backend
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 16 {
				bk := NewBackend(BackendSpec{Name: fmt.Sprint("b", i)})
				train(bk, 50, 0.02, 2e-5, rng)
				bs = append(bs, bk)
			}
			bs[0].Prefix().Insert(blocks[:20])
			opts := Options{Policy: SLOPredictive, Seed: 1}
			if every > 0 {
				opts.PluginLatency = func(string, string) Observer { return &obs }
				opts.PluginLatencyEvery = every
			}
			s, err := New(opts, bs)
			if err != nil {
				b.Fatal(err)
			}
			req := &Request{Model: "m", PromptTokens: 2000, Blocks: blocks, SLO: 320 * time.Millisecond}
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				t, err := s.Pick(req)
				if err != nil {
					b.Fatal(err)
				}
				t.FirstToken()
				t.End(OutcomeOK)
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// sumObserver adds observations up atomically, at about the cost of a
// Prometheus histogram's Observe.
type sumObserver struct{ n, bits atomic.Uint64 }

func (o *sumObserver) Observe(v float64) {
	o.n.Add(1)
	for {
		old := o.bits.Load()
		if o.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// BenchmarkBlockHasher hashes an 8 KB prompt (the gateway does this once
// per request).
func BenchmarkBlockHasher(b *testing.B) {
	text := strings.Repeat("All work and no play makes Jack a dull boy. ", 186)
	h := NewBlockHasher(0)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		h.Reset()
		h.Segment("user", text)
	}
}

// cpuTime is the process's user+system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

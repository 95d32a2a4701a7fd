package sched

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// fifoTTFT is the TTFT of a request on a first-in first-out server of m
// slots: a base, its own prefill (perKTok per uncached kilotoken), and
// one drain time per request ahead beyond the slots.
func fifoTTFT(f Features, m int, base, perKTok, drain float64) float64 {
	return base + perKTok*f.UncachedTokens/1000 + drain*max(0, f.InFlight-float64(m)+1)
}

// TestQueueBoundLearnsSlots: fed the TTFTs of a FIFO server with m slots
// (with noise), the bound believes m slots and predicts a long queue's
// TTFT, beyond the queues it was fed, within 10%; its bound is above its
// mean.
func TestQueueBoundLearnsSlots(t *testing.T) {
	for _, m := range []int{1, 4, 16} {
		t.Run(fmt.Sprint(m, " slots"), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(m), 1))
			b := newQueueBound()
			b.on.Store(true)
			const base, perKTok, drain = 0.010, 0.020, 0.015
			for range 400 {
				f := Features{UncachedTokens: float64(rng.IntN(2000)), InFlight: float64(rng.IntN(2*m + 6))}
				b.observe(f, fifoTTFT(f, m, base, perKTok, drain)*(1+0.05*(rng.Float64()-0.5)))
			}
			f := Features{UncachedTokens: 1000, InFlight: float64(2*m + 10)}
			want := fifoTTFT(f, m, base, perKTok, drain)
			e := b.estimate(f)
			if !e.Ready || e.Slots != m || math.Abs(e.Mean.Seconds()-want)/want > 0.1 || e.Bound < e.Mean {
				t.Fatalf("estimate %+v; want %d slots, mean ≈ %.1f ms ≤ bound", e, m, 1000*want)
			}
		})
	}
}

// TestQueueBoundMarginCoversNoise: the bound is the 99th percentile of
// the TTFT: over fresh requests from the same server, at most a few in a
// hundred exceed it, and most exceed the mean.
func TestQueueBoundMarginCoversNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	b := newQueueBound()
	b.on.Store(true)
	noisy := func(f Features) float64 {
		return fifoTTFT(f, 2, 0.01, 0.02, 0.02) + 0.01*rng.ExpFloat64()
	}
	for range 300 {
		f := Features{UncachedTokens: float64(rng.IntN(1000)), InFlight: float64(rng.IntN(10))}
		b.observe(f, noisy(f))
	}
	over, overMean := 0, 0
	const n = 2000
	for range n {
		f := Features{UncachedTokens: float64(rng.IntN(1000)), InFlight: float64(rng.IntN(10))}
		e, y := b.estimate(f), noisy(f)
		if y > e.Bound.Seconds() {
			over++
		}
		if y > e.Mean.Seconds() {
			overMean++
		}
	}
	if over > n*4/100 || overMean < n/4 {
		t.Fatalf("%d of %d TTFTs over the bound, %d over the mean; want ≤ 4%% over the bound, ≥ 25%% over the mean", over, n, overMean)
	}
}

func TestQuantileRank(t *testing.T) {
	cases := []struct{ k, want int }{{1, 1}, {32, 32}, {100, 100}, {120, 120}, {256, 255}, {1000, 991}}
	for _, c := range cases {
		if got := quantileRank(c.k, 0.99); got != c.want {
			t.Errorf("quantileRank(%d, 0.99) = %d, want %d", c.k, got, c.want)
		}
	}
	for k := 1; k <= 512; k++ {
		if r := quantileRank(k, 0.99); r < int(math.Ceil(0.99*float64(k))) || r > k {
			t.Fatalf("quantileRank(%d) = %d: below the empirical quantile's rank or past the sample", k, r)
		}
	}
}

// TestSolveNonNeg: where the unconstrained least-squares fit has a
// negative coefficient, the solution keeps every coefficient ≥ 0 and fits
// no worse than any other non-negative one tried.
func TestSolveNonNeg(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var s [nBX][nBX]float64
	var b [nBX]float64
	var xs [][nBX]float64
	var ys []float64
	for range 200 {
		x := [nBX]float64{1, rng.Float64(), rng.Float64() * 5, rng.Float64()}
		y := 0.05 + 0.1*x[1] - 0.01*x[2] + 0.001*rng.NormFloat64() // a negative slope
		for i := range nBX {
			b[i] += x[i] * y
			for j := range nBX {
				s[i][j] += x[i] * x[j]
			}
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	w := solveNonNeg(&s, &b)
	sse := func(w [nBX]float64) float64 {
		e := 0.0
		for k, x := range xs {
			p := 0.0
			for i := range nBX {
				p += w[i] * x[i]
			}
			e += (ys[k] - p) * (ys[k] - p)
		}
		return e
	}
	for i, v := range w {
		if v < 0 {
			t.Fatalf("coefficient %d = %v < 0", i, v)
		}
	}
	for _, alt := range [][nBX]float64{{0.05, 0.1, 0, 0}, {0.03, 0.1, 0, 0}, {0, 0.1, 0, 0.02}} {
		if sse(w) > sse(alt)*1.0001 {
			t.Fatalf("solution %v: error %v above %v's %v", w, sse(w), alt, sse(alt))
		}
	}
}

// trainFIFO teaches backend b's bound a single-slot server: 20 ms plus 30
// ms per request ahead.
func trainFIFO(b *Backend, rng *rand.Rand) {
	b.preds.bound.on.Store(true)
	for range 300 {
		f := Features{InFlight: float64(rng.IntN(10))}
		b.preds.bound.observe(f, 0.020+0.030*f.InFlight)
	}
}

// TestPickAdmit: with Request.Admit, Pick admits a request on the
// profile's backend while its queue-aware bound fits the SLO, moves it
// to another backend with room when not (reason admission-room), and
// refuses it (a *Refused with a Retry-After of whole drain times) when no
// backend has room — dispatching nothing: no queue, no prefix index holds
// it. Without Admit it never refuses.
func TestPickAdmit(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	rng := rand.New(rand.NewPCG(7, 8))
	for _, b := range bs {
		trainFIFO(b, rng)
	}
	s := mustNew(t, PrefixAffinity, clk, bs)
	s.loops.off = true // the bound alone (admit_feedback_test.go tests the loop)
	// 20 ms + 30 ms per request ahead ≤ 210 ms: 6 ahead, 7 in flight.
	const slo = 210 * time.Millisecond
	req := func(i int) *Request {
		return &Request{Model: "m", SLO: slo, Admit: true, Blocks: blocksOf(strings.Repeat("a shared system prompt ", 20) + fmt.Sprint(i))}
	}
	var held []*Ticket
	for i := range 14 {
		tk, err := s.Pick(req(i))
		if err != nil {
			t.Fatalf("request %d: %v (a: %d in flight, b: %d)", i, err, bs[0].InFlight(), bs[1].InFlight())
		}
		// Affinity keeps the prefix on its first backend until it is
		// full; the next goes to the other by admission, and the rest
		// follow it there (the prefix is now cached on both).
		if first := held0(held); first != nil && (tk.Backend == first) != (i < 7) || (i == 7) != (tk.Reason == ReasonRoom) {
			t.Fatalf("request %d: %s (%s), with a %d and b %d in flight", i, tk.Backend.Name(), tk.Reason, bs[0].InFlight(), bs[1].InFlight())
		}
		held = append(held, tk)
	}
	r := req(99)
	r.Blocks = blocksOf("a prompt nobody has sent, refused before it is dispatched")
	tk, err := s.Pick(r)
	var ref *Refused
	if tk != nil || !errors.As(err, &ref) || !errors.Is(err, ErrRefused) {
		t.Fatalf("both full: ticket %v, error %v; want a *Refused", tk, err)
	}
	if d := ref.Estimate.Drain; d < 25*time.Millisecond || ref.RetryAfter < d || ref.RetryAfter%d != 0 {
		t.Fatalf("refused: Retry-After %v, drain %v; want whole drain times (≈ 30 ms)", ref.RetryAfter, d)
	}
	for _, b := range bs {
		if b.InFlight() != 7 || b.Prefix().Match(r.Blocks) != 0 {
			t.Fatalf("%s: %d in flight, %d blocks of the refused prompt indexed; want 7 and none", b.Name(), b.InFlight(), b.Prefix().Match(r.Blocks))
		}
	}
	// One request finishing makes room for one more.
	held[0].End(OutcomeOK)
	if _, err := s.Pick(req(0)); err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	r.Admit = false
	if tk, err := s.Pick(r); err != nil || tk == nil {
		t.Fatalf("without Admit: %v", err)
	}
}

func held0(ts []*Ticket) *Backend {
	if len(ts) == 0 {
		return nil
	}
	return ts[0].Backend
}

// TestPickAdmitColdFallsBack: a backend whose bound has too few TTFTs is
// judged by the routing prediction, which admits a backend without data.
func TestPickAdmitColdFallsBack(t *testing.T) {
	clk := newClock()
	s := mustNew(t, SLOPredictive, clk, backends("a"))
	for i := range 20 {
		if _, err := s.Pick(&Request{Model: "m", SLO: time.Millisecond, Admit: true}); err != nil {
			t.Fatalf("request %d to a cold backend: %v", i, err)
		}
	}
}

// BenchmarkQueueBoundObserve is the bound's cost per first token (every
// candidate fit solved again).
func BenchmarkQueueBoundObserve(b *testing.B) {
	for _, waits := range []bool{false, true} {
		b.Run(fmt.Sprintf("waits=%v", waits), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			q := newQueueBound()
			q.on.Store(true)
			fs := make([]Features, 1024)
			for i := range fs {
				fs[i] = Features{UncachedTokens: float64(rng.IntN(2000)), QueuedTokens: float64(rng.IntN(4000)), InFlight: float64(rng.IntN(12))}
				if waits {
					// The slot tracker's waits (slots.go): a part of a
					// drain time per request past each hypothesis.
					for k, m := range slotHypotheses[:5] {
						fs[i].Waits[k] = max(0, fs[i].InFlight-float64(m)+1) * 0.01 * rng.Float64()
					}
				}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				f := fs[i%len(fs)]
				q.observe(f, fifoTTFT(f, 2, 0.01, 0.02, 0.02))
			}
		})
	}
}

// TestQueueBoundReach: a bound that has seen queues of at most three
// ahead does not admit a request further back than four, however short
// the fit predicts its wait, and its Wait is the drain to four.
func TestQueueBoundReach(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	b := newQueueBound()
	b.on.Store(true)
	for range 100 {
		f := Features{InFlight: float64(rng.IntN(4))}
		b.observe(f, fifoTTFT(f, 1, 0.005, 0, 0.010))
	}
	const slo = time.Second
	for ahead, want := range []bool{true, true, true, true, true, false, false} {
		e := b.estimate(Features{InFlight: float64(ahead)})
		if e.Fits(slo) != want || e.Reach != 3 {
			t.Errorf("%d ahead: fits %v (bound %v, reach %v); want %v", ahead, e.Fits(slo), e.Bound, e.Reach, want)
		}
		if !want {
			if w, d := e.Wait(slo), e.Drain; d <= 0 || w != time.Duration(float64(ahead)-4)*d {
				t.Errorf("%d ahead: wait %v, drain %v; want %d drain times", ahead, w, d, ahead-4)
			}
		}
	}
}

// TestPickAdmitColdBackend: once some backend's bound is ready (the
// workload has been seen to queue), a backend whose bound is not takes
// a request only while nothing of the gateway's is in flight on it —
// moved there with reason admission-room when the profile's backend is
// full — so that a backend the profile passes over still gets the TTFTs
// that make its bound ready, but is not filled past the SLO meanwhile.
func TestPickAdmitColdBackend(t *testing.T) {
	clk := newClock()
	bs := backends("a", "b")
	trainFIFO(bs[0], rand.New(rand.NewPCG(15, 16)))
	bs[1].preds.bound.on.Store(true)
	s := mustNew(t, PrefixAffinity, clk, bs)
	s.loops.off = true                 // the bound alone
	const slo = 210 * time.Millisecond // a takes 7 (20 ms + 30 ms per request ahead)
	req := func(i int) *Request {
		return &Request{Model: "m", SLO: slo, Admit: true, Blocks: blocksOf(strings.Repeat("a shared system prompt ", 20) + fmt.Sprint(i))}
	}
	for i := range 7 {
		r := req(i)
		r.Exclude = []string{"b"} // a holds the prefix
		if tk, err := s.Pick(r); err != nil || tk.Backend != bs[0] {
			t.Fatalf("request %d: %v, %v; want a", i, tk, err)
		}
	}
	tk, err := s.Pick(req(7))
	if err != nil || tk.Backend != bs[1] || tk.Reason != ReasonRoom {
		t.Fatalf("a full, b cold and idle: %v, %v; want b (%s)", tk, err, ReasonRoom)
	}
	if tk, err := s.Pick(req(8)); !errors.Is(err, ErrRefused) {
		t.Fatalf("a full, b cold with one in flight: %v, %v; want refused", tk, err)
	}
}

// TestQueueBoundTransit: a backend 25 ms away on the wire, four slots,
// each request ahead beyond them waiting 3 ms. Its TTFTs rarely came
// from a queue past the slots, so the four-slot fit prices a request
// ahead by its prior, one TTFT less the transit: told the response
// headers' times (sent before the queue, as vLLM sends them), the prior
// leaves the wire out and the bound predicts a TTFT four deep within
// 15%; headers sent with the first token (as Ollama sends them) say
// nothing, and the prior stays a whole TTFT.
func TestQueueBoundTransit(t *testing.T) {
	const transit, svc, perKTok, drain = 0.025, 0.004, 0.010, 0.003
	truth := func(f Features) float64 {
		return transit + fifoTTFT(f, 4, svc, perKTok, drain)
	}
	four := slices.Index(slotHypotheses[:], 4)
	for _, early := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(21, 22))
		b := newQueueBound()
		b.on.Store(true)
		for i := range 300 {
			f := Features{UncachedTokens: float64(rng.IntN(500)), InFlight: float64(rng.IntN(4))}
			if i%10 == 0 {
				f.InFlight = 4
			}
			y := truth(f) * (1 + 0.02*(rng.Float64()-0.5))
			head := y // with the first token
			if early {
				head = transit + 0.0002*rng.Float64()
			}
			b.observeTransit(head, y)
			b.observe(f, y)
		}
		perAhead := b.fits[four].w[bxAhead]
		if early {
			f := Features{UncachedTokens: 200, InFlight: 4}
			want := truth(f)
			e := b.estimate(f)
			if math.Abs(b.heads.least-transit) > 0.0005 || perAhead > 0.010 || !e.Ready || e.Slots != 4 || math.Abs(e.Mean.Seconds()-want)/want > 0.15 {
				t.Errorf("headers before the queue: transit %.1f ms, %.1f ms per request ahead, estimate %+v; want 25 ms, under 10 ms, 4 slots and a mean ≈ %.1f ms", 1000*b.heads.least, 1000*perAhead, e, 1000*want)
			}
		} else if b.heads.least != 0 || perAhead < 0.028 {
			t.Errorf("headers with the first token: transit %.1f ms, %.1f ms per request ahead; want no transit and a whole TTFT (≥ 28 ms)", 1000*b.heads.least, 1000*perAhead)
		}
	}
}

package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// trackerWith returns a tracker that has learnt a decode time of decode
// and a service time of service, with the requests decoding since the
// given times before now and the pending ones dispatched then, in order.
func trackerWith(now time.Time, decode, service time.Duration, decoding, pending []time.Duration) *slotTracker {
	var s slotTracker
	fillTracker(&s, now, decode, service, decoding, pending)
	return &s
}

// fillTracker is trackerWith for a tracker in place (a backend's).
func fillTracker(s *slotTracker, now time.Time, decode, service time.Duration, decoding, pending []time.Duration) {
	t0 := now.Add(-time.Hour)
	s.dispatched(t0, 0)
	s.firstToken(t0, t0.Add(service), 0, 0)
	s.ended(t0, t0.Add(service), t0.Add(service+decode), true)
	for _, ago := range decoding {
		at := now.Add(-ago)
		s.dispatched(at.Add(-service), 0)
		s.firstToken(at.Add(-service), at, 1, 0)
	}
	for _, ago := range pending {
		s.dispatched(now.Add(-ago), 0)
	}
}

func TestSlotTrackerWaits(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	now := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		name              string
		decoding, pending []time.Duration
		// want: the wait under 1, 2, 4 and 8 slots, ms.
		want [4]float64
	}{
		{"nothing in flight", nil, nil, [4]float64{0, 0, 0, 0}},
		// Four answers of 100 ms begun 10–40 ms ago: four slots free
		// the first at 60 ms; two slots (two too many decoding) once
		// three have ended.
		{"four just begun", []time.Duration{ms(40), ms(30), ms(20), ms(10)}, nil, [4]float64{90, 80, 60, 0}},
		{"four nearly done", []time.Duration{ms(98), ms(97), ms(96), ms(95)}, nil, [4]float64{5, 4, 2, 0}},
		// One waiting (dispatched 5 ms ago): it takes the slot free at
		// 60 ms and holds it to 60 + 20 + 100; the next free is at 70.
		// With one slot it waits for all four (90) and holds it to 210.
		{"one queued ahead", []time.Duration{ms(40), ms(30), ms(20), ms(10)}, []time.Duration{ms(5)}, [4]float64{210, 90, 70, 0}},
		// Two slots, one decoding, one in prefill since 5 ms ago (15 ms
		// of its 20 left, then 100 of decode): the first frees at 50.
		// One slot: the one pending waits for it, and holds it to 170.
		{"one in prefill", []time.Duration{ms(50)}, []time.Duration{ms(5)}, [4]float64{170, 50, 0, 0}},
		{"an answer past its mean", []time.Duration{ms(150)}, nil, [4]float64{0, 0, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := trackerWith(now, ms(100), ms(20), tt.decoding, tt.pending)
			var w [nSlots]float64
			s.waits(now, &w)
			for i := range tt.want {
				if got := w[i] * 1e3; math.Abs(got-tt.want[i]) > 1e-6 {
					t.Errorf("%d slots: wait %.3f ms, want %v (all %v)", slotHypotheses[i], got, tt.want[i], w)
				}
			}
		})
	}
	t.Run("nothing before a decode time is learnt", func(t *testing.T) {
		var s slotTracker
		s.dispatched(now.Add(-time.Second), 0)
		s.firstToken(now.Add(-time.Second), now.Add(-time.Second/2), 0, 0)
		s.dispatched(now, 0)
		var w [nSlots]float64
		s.waits(now, &w)
		if w != ([nSlots]float64{}) {
			t.Errorf("waits %v before any request ended, want zeros", w)
		}
	})
	t.Run("ended requests leave", func(t *testing.T) {
		s := trackerWith(now, ms(100), ms(20), []time.Duration{ms(40)}, []time.Duration{ms(5)})
		s.ended(now.Add(-ms(5)), time.Time{}, now, false)
		s.ended(now.Add(-ms(40)-ms(20)), now.Add(-ms(40)), now, false)
		if len(s.pend)+len(s.dec) != 0 {
			t.Errorf("pending %v, decoding %v after both ended", s.pend, s.dec)
		}
		// Neither was a completed answer: the decode time is unchanged.
		if d := s.meanDecode(); d != 0.1 || s.abs.n != 1 {
			t.Errorf("decode %v s after %d, want 0.1 after 1", d, s.abs.n)
		}
	})
}

// The wait for a slot never grows with more slots, and never exceeds
// what the last request in line would wait for with one slot.
func TestSlotTrackerWaitsMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1_700_000_000, 0)
	for range 2000 {
		var dec, pend []time.Duration
		for range rng.IntN(12) {
			dec = append(dec, time.Duration(rng.IntN(300))*time.Millisecond)
		}
		// Decoding since, oldest first, as first tokens come.
		for i := 1; i < len(dec); i++ {
			for j := i; j > 0 && dec[j] > dec[j-1]; j-- {
				dec[j], dec[j-1] = dec[j-1], dec[j]
			}
		}
		for range rng.IntN(12) {
			pend = append(pend, time.Duration(rng.IntN(50))*time.Millisecond)
		}
		for i := 1; i < len(pend); i++ {
			for j := i; j > 0 && pend[j] > pend[j-1]; j-- {
				pend[j], pend[j-1] = pend[j-1], pend[j]
			}
		}
		decode := time.Duration(1+rng.IntN(200)) * time.Millisecond
		service := time.Duration(1+rng.IntN(50)) * time.Millisecond
		s := trackerWith(now, decode, service, dec, pend)
		var w [nSlots]float64
		s.waits(now, &w)
		n := len(dec) + len(pend)
		worst := float64(n) * (decode + service).Seconds()
		for i := range nSlots {
			if w[i] < 0 || w[i] > worst+1e-9 || i > 0 && w[i] > w[i-1]+1e-9 {
				t.Fatalf("decoding %v, pending %v (decode %v, service %v): waits %v; want non-negative, at most %v, not growing with slots",
					dec, pend, decode, service, w, worst)
			}
		}
	}
}

// The queue bound, told how far along the answers holding the slots
// are, predicts the wait of a request that finds them all taken: on a
// simulated engine of four slots whose answers take 100 ms to decode,
// closed loop with six clients, the bound's predicted TTFT of the
// requests that waited for a slot is within a fifth of the TTFT they
// had at the median, and within 45% at the 90th percentile. (Counting
// the requests ahead alone, 26% and 70%: a wait behind answers just
// begun and one behind answers nearly done are the same count.)
func TestQueueBoundPricesSlotWaits(t *testing.T) {
	for _, tt := range []struct {
		name           string
		decode         func(rng *rand.Rand) time.Duration
		medMax, p90Max float64
	}{
		{"answers of 100 ms ± 10%", func(rng *rand.Rand) time.Duration {
			return time.Duration(float64(100*time.Millisecond) * (0.9 + 0.2*rng.Float64()))
		}, 0.2, 0.45},
		// Answers whose lengths spread over a factor of ten end in an
		// order their ages barely tell: the wait is no better known
		// than its count says (median 0.32, 90th percentile 0.94;
		// counting alone 0.33 and 1.01), and is not made worse.
		{"answers of 20–200 ms", func(rng *rand.Rand) time.Duration {
			return time.Duration(float64(20*time.Millisecond) + float64(180*time.Millisecond)*rng.Float64())
		}, 0.36, 1.0},
	} {
		t.Run(tt.name, func(t *testing.T) { testSlotWaits(t, tt.decode, tt.medMax, tt.p90Max) })
	}
}

func testSlotWaits(t *testing.T, decode func(*rand.Rand) time.Duration, medMax, p90Max float64) {
	clk := newClock()
	s := mustNew(t, SLOPredictive, clk, backends("b"))
	rng := rand.New(rand.NewPCG(5, 6))
	const slots, clients, n = 4, 6, 1500
	type job struct {
		tk                          *Ticket
		arrive, start, first, end   time.Time
		estimate                    time.Duration
		started, firstDone, endDone bool
	}
	var jobs []*job
	var queue []*job // waiting for a slot, first in first out
	busy := 0
	next := make([]time.Time, clients) // each client's next arrival
	for i := range next {
		next[i] = clk.t.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
	}
	owner := map[*job]int{}
	start := func(j *job, at time.Time) {
		j.start, j.started = at, true
		j.first = at.Add(time.Duration(float64(5*time.Millisecond) * (0.9 + 0.2*rng.Float64())))
		j.end = j.first.Add(decode(rng))
		busy++
	}
	for len(jobs) < n || busy > 0 {
		// The earliest event: a client's arrival, a first token, an end.
		var at time.Time
		kind, who := -1, -1
		var jj *job
		if len(jobs) < n {
			for c, t := range next {
				if !t.IsZero() && (kind < 0 || t.Before(at)) {
					at, kind, who = t, 0, c
				}
			}
		}
		for _, j := range jobs {
			if j.started && !j.firstDone && (kind < 0 || j.first.Before(at)) {
				at, kind, jj = j.first, 1, j
			}
			if j.started && !j.endDone && (kind < 0 || j.end.Before(at)) {
				at, kind, jj = j.end, 2, j
			}
		}
		clk.t = at
		switch kind {
		case 0:
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: []uint64{uint64(len(jobs))}})
			if err != nil {
				t.Fatal(err)
			}
			j := &job{tk: tk, arrive: at, estimate: tk.QueueEstimate().Mean}
			jobs = append(jobs, j)
			owner[j] = who
			next[who] = time.Time{}
			if busy < slots {
				start(j, at)
			} else {
				queue = append(queue, j)
			}
		case 1:
			jj.firstDone = true
			jj.tk.FirstTokenAt(at)
		case 2:
			jj.endDone = true
			jj.tk.End(OutcomeOK)
			busy--
			if len(queue) > 0 {
				start(queue[0], at)
				queue = queue[1:]
			}
			next[owner[jj]] = at.Add(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)))
		}
	}
	var errs []float64
	for _, j := range jobs[n/3:] {
		if j.start.Sub(j.arrive) < 10*time.Millisecond {
			continue
		}
		ttft := j.first.Sub(j.arrive).Seconds()
		errs = append(errs, math.Abs(j.estimate.Seconds()-ttft)/ttft)
	}
	if len(errs) < 100 {
		t.Fatalf("%d requests waited 10 ms or more for a slot; the test needs more", len(errs))
	}
	slices.Sort(errs)
	med := errs[len(errs)/2]
	t.Logf("%d requests waited for a slot; median |predicted − TTFT| / TTFT %.3f, 90th percentile %.3f", len(errs), med, errs[len(errs)*9/10])
	if p90 := errs[len(errs)*9/10]; med > medMax || p90 > p90Max {
		t.Errorf("relative error of the bound's predicted TTFT for requests that waited for a slot: median %.3f, 90th percentile %.3f; want ≤ %v, ≤ %v", med, p90, medMax, p90Max)
	}
}

// BenchmarkSlotTrackerWaits is the slot tracker's cost per candidate of
// a pick: the waits under every slot hypothesis for a backend with 12 or 32 requests
// in flight, two thirds of them decoding, the rest pending.
func BenchmarkSlotTrackerWaits(b *testing.B) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	now := time.Unix(1_700_000_000, 0)
	for _, n := range []int{12, 32} {
		var dec, pend []time.Duration
		for i := range n * 2 / 3 {
			dec = append(dec, ms(100-i*3))
		}
		for i := range n - len(dec) {
			pend = append(pend, ms(20-i))
		}
		s := trackerWith(now, ms(120), ms(20), dec, pend)
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var w [nSlots]float64
			for b.Loop() {
				s.waits(now, &w)
			}
		})
		// The same with every answer's time left read against its
		// budget (budgets of 8 to 96 tokens, answers running to them).
		bs := trackerWith(now, ms(120), ms(20), nil, nil)
		t0 := now.Add(-time.Hour)
		for i := range 64 {
			budget := float64(8 + i%89)
			at := t0.Add(time.Duration(i) * time.Second)
			bs.dispatched(at, 0)
			bs.firstToken(at, at.Add(ms(20)), 0, budget)
			bs.ended(at, at.Add(ms(20)), at.Add(ms(20)+time.Duration(budget*2*float64(time.Millisecond))), true)
		}
		for i, ago := range dec {
			at := now.Add(-ago)
			bs.dispatched(at.Add(-ms(20)), 0)
			bs.firstToken(at.Add(-ms(20)), at, 1, float64(8+i*7%89))
		}
		for _, ago := range pend {
			bs.dispatched(now.Add(-ago), 0)
		}
		if !bs.byBudget {
			b.Fatal("the budgets should explain the decode times")
		}
		b.Run(fmt.Sprintf("inflight=%d/budgets", n), func(b *testing.B) {
			b.ReportAllocs()
			var w [nSlots]float64
			for b.Loop() {
				bs.waits(now, &w)
			}
		})
	}
}

// BenchmarkSlotTrackerLifecycle is one request's dispatch, first token
// and end on a tracker whose windows are full: what the gateway pays per
// request to follow it.
func BenchmarkSlotTrackerLifecycle(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	var s slotTracker
	i := 0
	step := func() {
		at := now.Add(time.Duration(i) * time.Second)
		budget := float64(8 + i%89)
		s.dispatched(at, 0)
		s.firstToken(at, at.Add(20*time.Millisecond), 0, budget)
		s.ended(at, at.Add(20*time.Millisecond), at.Add(20*time.Millisecond+time.Duration(budget*2*float64(time.Millisecond))), true)
		i++
	}
	for range 2 * slotDecodeWindow {
		step()
	}
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

// A tracker whose requests never end stops following new ones at
// slotTrackerMax, and waits then says nothing.
func TestSlotTrackerBounded(t *testing.T) {
	var s slotTracker
	now := time.Unix(1_700_000_000, 0)
	for i := range slotTrackerMax + 100 {
		s.dispatched(now.Add(time.Duration(i)), 0)
	}
	if n := len(s.pend) + len(s.dec); n != slotTrackerMax {
		t.Fatalf("following %d requests, want %d", n, slotTrackerMax)
	}
	s.learnDecode(0.1)
	var w [nSlots]float64
	s.waits(now, &w)
	if w != ([nSlots]float64{}) {
		t.Errorf("waits %v past slotWaitMaxInFlight, want zeros", w)
	}
}

// The time left to an answer is the mean of the recent decode times
// longer than its age, less its age: answers of 50, 100 and 150 ms
// leave one 60 ms along 65 ms (100 or 150 to come), one 120 ms along
// 30; one past them all is due. The window keeps the last
// slotDecodeWindow, sorted, whatever order they came in.
func TestSlotTrackerResidual(t *testing.T) {
	var s slotTracker
	for _, d := range []float64{0.15, 0.05, 0.1} {
		s.learnDecode(d)
	}
	for _, tt := range []struct{ age, want float64 }{
		{0, 0.1}, {0.05, 0.075}, {0.06, 0.065}, {0.12, 0.03}, {0.15, 0}, {1, 0},
	} {
		if got := s.residual(tt.age); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("residual at %v s: %v, want %v", tt.age, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	var all []float64
	for range 500 {
		d := rng.Float64()
		all = append(all, d)
		s.learnDecode(d)
	}
	last := slices.Clone(all[len(all)-slotDecodeWindow:])
	slices.Sort(last)
	if got := s.abs.xs[:]; !slices.Equal(got, last) {
		t.Fatalf("window %v, want the last %d sorted %v", got, slotDecodeWindow, last)
	}
	sum := 0.0
	for _, d := range last {
		sum += d
	}
	if math.Abs(s.meanDecode()-sum/slotDecodeWindow) > 1e-12 {
		t.Errorf("mean decode %v, want %v", s.meanDecode(), sum/slotDecodeWindow)
	}
}

// An answer's time left is read against its own token budget: where
// answers of 8 and 96 tokens alternate at 2 ms a token, one with 95
// tokens to go after its first, 10 ms along, has 180 ms left and one
// with 7 to go 4 ms; the decode times alone put both at the mean of
// those longer than 10 ms less 10, 92 ms. Without a budget, or before
// budgetMinSamples budgeted answers have ended, the decode times decide.
func TestSlotTrackerBudget(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	now := time.Unix(1_700_000_000, 0)
	// learnt ends n answers, the i-th allowed budgets[i%len] tokens after
	// its first and decoding for decode(i, budget) ms.
	learntWith := func(n int, budgets []float64, decode func(i int, budget float64) float64) *slotTracker {
		var s slotTracker
		t0 := now.Add(-time.Hour)
		for i := range n {
			budget := budgets[i%len(budgets)]
			start := t0.Add(time.Duration(i) * time.Second)
			s.dispatched(start, 0)
			s.firstToken(start, start.Add(ms(5)), 0, budget)
			s.ended(start, start.Add(ms(5)), start.Add(ms(5)+ms(decode(i, budget))), true)
		}
		return &s
	}
	learnt := func(n int) *slotTracker {
		return learntWith(n, []float64{7, 95}, func(_ int, b float64) float64 { return 2 * b })
	}
	wait := func(s *slotTracker, budget float64) float64 {
		start := now.Add(-ms(15))
		s.dispatched(start, 0)
		s.firstToken(start, now.Add(-ms(10)), 0, budget)
		var w [nSlots]float64
		s.waits(now, &w)
		return w[0] * 1000 // one slot: the wait is the holder's time left
	}
	for _, tt := range []struct {
		name   string
		learnt int
		budget float64
		want   float64
	}{
		{"long budget", 16, 95, 180},
		{"short budget", 16, 7, 4},
		{"no budget", 16, 0, 92},
		{"too few budgeted answers", 6, 95, 92},
	} {
		got := wait(learnt(tt.learnt), tt.budget)
		if math.Abs(got-tt.want) > 1e-6 {
			t.Errorf("%s: %.3f ms left, want %v", tt.name, got, tt.want)
		}
	}
	// Answers that stop at EOS after 100 or 300 ms whatever their
	// max_tokens (511 or 32767 after the first): the budgets explain
	// nothing, and one with 32767 to go, 10 ms along, has the decode
	// times' 190 ms left, not 32767 tokens' worth.
	eos := learntWith(16, []float64{511, 511, 32767, 32767}, func(i int, _ float64) float64 { return []float64{100, 300}[i%2] })
	if got := wait(eos, 32767); math.Abs(got-190) > 1e-6 {
		t.Errorf("answers ending at EOS: %.3f ms left, want 190", got)
	}
	// One budget for every answer: the decode times decide, exactly.
	same := learntWith(16, []float64{40}, func(i int, _ float64) float64 { return []float64{60, 80}[i%2] })
	if got, want := wait(same, 40), 60.0; math.Abs(got-want) > 1e-9 || same.byBudget {
		t.Errorf("one budget: %.6f ms left (by budget %v), want %v from the decode times", got, same.byBudget, want)
	}
}

// A request's max_tokens reaches its backend's slot tracker: an answer
// that ends teaches the per-token window its decode time over its budget
// (tokens after the first), and one without max_tokens does not.
func TestRequestBudgetReachesTracker(t *testing.T) {
	clk := newClock()
	bs := backends("a")
	s := mustNew(t, SLOPredictive, clk, bs)
	for _, mt := range []int{33, 0} {
		tk, err := s.Pick(&Request{API: "openai", Model: "m", PromptTokens: 10, MaxTokens: mt})
		if err != nil {
			t.Fatal(err)
		}
		clk.add(5 * time.Millisecond)
		tk.FirstToken()
		clk.add(64 * time.Millisecond)
		tk.End(OutcomeOK)
	}
	tr := &bs[0].slots
	if tr.perToken.n != 1 || math.Abs(tr.perToken.xs[0]-0.002) > 1e-12 {
		t.Errorf("per-token window: %d answers, first %v s a token; want 1 at 0.002", tr.perToken.n, tr.perToken.xs[0])
	}
	if tr.abs.n != 2 {
		t.Errorf("decode window: %d answers, want 2", tr.abs.n)
	}
}

// The service line recovers a fixed time and a prefill time per
// uncached token from alone requests; before the uncached counts vary it
// is their mean time; it never slopes down.
func TestServiceFit(t *testing.T) {
	var f serviceFit
	if _, ok := f.at(100); ok {
		t.Fatal("a service time before any request")
	}
	for range 5 {
		f.learn(200, 0.010)
	}
	if v, _ := f.at(3000); math.Abs(v-0.010) > 1e-12 {
		t.Errorf("one uncached count only: %v s at 3000 tokens, want their mean 0.010", v)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		u := float64(rng.IntN(3000))
		f.learn(u, 0.002+20e-6*u)
	}
	for _, u := range []float64{0, 500, 3000} {
		if v, _ := f.at(u); math.Abs(v-(0.002+20e-6*u)) > 1e-4 {
			t.Errorf("%v tokens: %v s, want %v", u, v, 0.002+20e-6*u)
		}
	}
	var down serviceFit
	for range 50 {
		u := float64(rng.IntN(3000))
		down.learn(u, 0.05-10e-6*u)
	}
	if a, b := must(down.at(0)), must(down.at(3000)); a != b {
		t.Errorf("a downward line: %v s at 0 tokens, %v at 3000; want one time", a, b)
	}
}

func must(v float64, ok bool) float64 {
	if !ok {
		panic("no value")
	}
	return v
}

// A request in prefill holds its slot for its own prefill: the wait
// behind one whose prompt is uncached is longer than behind one whose
// prompt is cached, by the difference of their prefills.
func TestSlotTrackerPendingService(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	now := time.Unix(1_700_000_000, 0)
	var w [2][nSlots]float64
	for k, u := range []float64{100, 2100} {
		var s slotTracker
		t0 := now.Add(-time.Hour)
		// Alone requests: 2 ms plus 20 µs per uncached token; answers
		// of 100 ms.
		for i := range 40 {
			at := t0.Add(time.Duration(i) * time.Second)
			uu := float64(i%5) * 500
			ttft := ms(2 + 0.02*uu)
			s.dispatched(at, uu)
			s.firstToken(at, at.Add(ttft), 0, 0)
			s.ended(at, at.Add(ttft), at.Add(ttft+ms(100)), true)
		}
		// One slot taken by an answer begun 10 ms ago, the other by a
		// request dispatched just now with u uncached tokens.
		s.dispatched(now.Add(-ms(10)-ms(4)), 100)
		s.firstToken(now.Add(-ms(10)-ms(4)), now.Add(-ms(10)), 1, 0)
		s.dispatched(now, u)
		s.waits(now, &w[k])
	}
	// Two slots: the first frees at 90 ms either way; one slot: the
	// request waits for the answer (90 ms), then the pending one's
	// prefill (4 or 44 ms) and its answer (100 ms).
	if got := w[0][1] * 1e3; math.Abs(got-90) > 0.5 {
		t.Errorf("two slots, a cached prompt ahead: wait %.1f ms, want 90", got)
	}
	if d := (w[1][0] - w[0][0]) * 1e3; math.Abs(d-40) > 0.5 {
		t.Errorf("one slot: the uncached prompt ahead adds %.1f ms to the wait, want its extra prefill, 40 (waits %v, %v)", d, w[0], w[1])
	}
}

// slotWait prices the wait under the slot hypothesis whose waits came
// true, once enough requests have scored them; before that, under the
// bound's hypothesis, or under more slots where more answers were seen
// decoding at once.
func TestSlotWaitHypothesis(t *testing.T) {
	var s slotTracker
	for i := range 20 {
		s.svc.learn(float64(i%4)*500, 0.002+20e-6*float64(i%4)*500)
	}
	w := [nSlots]float64{0.200, 0.080, 0.030}
	if got := s.slotWait(&w, 0); got != 0.200 {
		t.Errorf("nothing scored, the bound believing one slot: %v, want 0.200", got)
	}
	s.peak = 3
	if got := s.slotWait(&w, 0); got != 0.030 {
		t.Errorf("three seen decoding at once: %v, want four slots' 0.030", got)
	}
	// Requests whose waits were the two-slot hypothesis's.
	rng := rand.New(rand.NewPCG(7, 8))
	for range slotWaitMinScored + 20 {
		var ws [nSlots]float64
		for i := range 3 {
			ws[i] = rng.Float64() * 0.1 / float64(i+1)
		}
		u := float64(rng.IntN(2000))
		s.learnWaits(&ws, u, 0.002+20e-6*u+ws[1], false, false)
	}
	if got := s.slotWait(&w, 0); got != 0.080 {
		t.Errorf("the two-slot waits came true: %v, want 0.080 (errors %v)", got, s.werr)
	}
}

// The slot hypotheses are scored against the wait a request had, its
// TTFT less the service time it needed: with the uncached tokens its
// backend reported, where a prediction of a cached prefix that had been
// evicted would charge a whole prefill to the wait. A quarter of the
// prompts predicted cached are not; the requests waited the two-slot
// hypothesis's wait.
func TestSlotWaitScoredOnReported(t *testing.T) {
	service := func(u float64) float64 { return 0.002 + 20e-6*u }
	const predicted = 100.0
	believed := func(reported bool) int {
		var s slotTracker
		rng := rand.New(rand.NewPCG(3, 4))
		served := func() float64 {
			if rng.IntN(4) == 0 {
				return predicted + 1900 // evicted: a whole prefill
			}
			return predicted
		}
		told := func(u float64) float64 {
			if reported {
				return u
			}
			return predicted
		}
		// Requests alone: the predicted line learns their TTFTs against
		// the prediction (slotTracker.firstToken), the reported one
		// against what was served.
		var none [nSlots]float64
		for range 40 {
			u := served()
			s.svc.learn(predicted, service(u))
			s.learnWaits(&none, told(u), service(u), reported, true)
		}
		w := [nSlots]float64{0.030, 0.008} // four slots and more: none
		for range 60 {
			u := served()
			s.learnWaits(&w, told(u), service(u)+w[1], reported, false)
		}
		return slotHypotheses[slices.Index(s.werr[:], slices.Min(s.werr[:]))]
	}
	if got := believed(true); got != 2 {
		t.Errorf("scored with the uncached tokens reported: %d slots believed, want 2", got)
	}
	// Scored with the prediction, the evicted prompts' prefills read as
	// waits far beyond the two slots' and the hits' waits as none: the
	// failure this guards against, which the scenario must reproduce.
	if got := believed(false); got == 2 {
		t.Errorf("scored with the uncached tokens predicted: %d slots believed; the scenario no longer misleads the prediction", got)
	}
}

// A ticket scores its backend's slot hypotheses once: when the backend
// reports its cached tokens after the first token (OpenAI's usage, at
// the end), at the first token when it reported them before (Anthropic's
// message_start), and at End, with the tokens predicted, when it never
// does.
func TestTicketScoresWaitsOnReport(t *testing.T) {
	clk := newClock()
	bs := backends("a")
	a := bs[0]
	s := mustNew(t, LeastOutstanding, clk, bs)
	scored := func() (int, float64, float64) {
		a.slots.mu.Lock()
		defer a.slots.mu.Unlock()
		return a.slots.nw, a.slots.svcTrue.w, a.slots.svcTrue.u
	}
	pick := func() *Ticket {
		tk, err := s.Pick(&Request{Model: "m", API: "openai", PromptTokens: 400})
		if err != nil {
			t.Fatal(err)
		}
		clk.add(10 * time.Millisecond)
		return tk
	}
	tk := pick()
	tk.FirstToken()
	if n, _, _ := scored(); n != 0 {
		t.Fatalf("scored at the first token, before the backend reported: %d", n)
	}
	tk.ObserveCached(300, 400)
	if n, w, u := scored(); n != 1 || w != 1 || u != 100 {
		t.Fatalf("after the report: %d scored, reported line of weight %v at %v uncached tokens; want 1, 1, 100", n, w, u)
	}
	tk.End(OutcomeOK)
	if n, _, _ := scored(); n != 1 {
		t.Fatalf("scored again at End: %d", n)
	}

	tk = pick()
	tk.ObserveCached(0, 400)
	tk.FirstToken()
	if n, _, u := scored(); n != 2 || u <= 100 {
		t.Fatalf("reported before the first token: %d scored (want 2), reported line's uncached sum %v (want the 400 added)", n, u)
	}
	tk.End(OutcomeOK)

	tk = pick()
	tk.FirstToken()
	if n, _, _ := scored(); n != 2 {
		t.Fatalf("scored before End without a report: %d", n)
	}
	tk.End(OutcomeOK)
	if n, w, _ := scored(); n != 3 || w >= 2 {
		t.Fatalf("never reported: %d scored (want 3), reported line's weight %v (want it untaught)", n, w)
	}
}

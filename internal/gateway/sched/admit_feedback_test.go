package sched

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestWilson: the interval's ends bracket the observed rate, and the
// counts admitLoop's constants are read by hold: at the one-sided 95%
// quantile one miss among the first 22 outcomes shows a rate above 1%
// and one among 23 does not; a full window of 256 needs six; 268 clean
// outcomes show a rate under 1%, 267 do not.
func TestWilson(t *testing.T) {
	for n := 1; n <= 400; n += 7 {
		for x := 0; x <= n; x += 1 + n/10 {
			lo, hi, p := wilsonLower(x, n, loopZ), wilsonUpper(x, n, loopZ), float64(x)/float64(n)
			if lo < 0 || hi > 1 || lo > p+1e-12 || hi < p-1e-12 {
				t.Fatalf("%d of %d: interval [%v, %v] does not hold %v", x, n, lo, hi, p)
			}
		}
	}
	cases := []struct {
		name string
		got  bool
	}{
		{"1 of 22 above 1%", wilsonLower(1, 22, loopZ) > loopTarget},
		{"1 of 23 not above 1%", wilsonLower(1, 23, loopZ) <= loopTarget},
		{"6 of 256 above 1%", wilsonLower(6, 256, loopZ) > loopTarget},
		{"5 of 256 not above 1%", wilsonLower(5, 256, loopZ) <= loopTarget},
		{"0 of 268 under 1%", wilsonUpper(0, 268, loopZ) < loopTarget},
		{"0 of 267 not under 1%", wilsonUpper(0, 267, loopZ) >= loopTarget},
	}
	for _, c := range cases {
		if !c.got {
			t.Errorf("%s: does not hold", c.name)
		}
	}
}

// TestAdmitLoopBounds is a property test of the controller: over random
// runs of outcomes (miss rates from none to all, lateness of either
// sign), use stays within [loopMinUse, 1], changes only in whole
// back-offs or relaxations, each change starting an epoch; the lateness
// is never negative; a route that only misses ends at the floor and one
// that never misses at 1.
func TestAdmitLoopBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	t0 := time.Unix(1_700_000_000, 0)
	const slo = 200 * time.Millisecond
	for run := range 200 {
		p := []float64{0, 0.001, 0.01, 0.05, 0.5, 1}[run%6]
		l := newAdmitLoop()
		now := t0
		for range 3000 {
			now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
			st := l.state(now, slo)
			if st.use < loopMinUse-1e-12 || st.use > 1 || st.late < 0 {
				t.Fatalf("run %d (p=%v): use %v, lateness %v", run, p, st.use, st.late)
			}
			ttft := slo / 2
			if rng.Float64() < p {
				ttft = slo + time.Duration(rng.IntN(100))*time.Millisecond
			}
			mean := slo/2 + time.Duration(rng.NormFloat64()*float64(20*time.Millisecond))
			a := admission{loop: l, epoch: st.epoch, mean: max(mean, time.Millisecond), judged: rng.IntN(4) > 0}
			before := l.state(now, slo)
			l.outcome(now, a, ttft, slo)
			after := l.state(now, slo)
			switch {
			case after.use == before.use:
				if after.epoch != before.epoch {
					t.Fatalf("run %d: epoch changed without use changing", run)
				}
			case after.epoch != before.epoch+1:
				t.Fatalf("run %d: use %v → %v without a new epoch", run, before.use, after.use)
			case after.use < before.use && math.Abs(after.use-max(loopMinUse, before.use*loopBackoff)) > 1e-12,
				after.use > before.use && math.Abs(after.use-min(1, before.use+loopRelax)) > 1e-12:
				t.Fatalf("run %d: use %v → %v: neither a back-off nor a relaxation", run, before.use, after.use)
			}
		}
		switch u := l.state(now, slo).use; {
		case p == 1 && u != loopMinUse:
			t.Errorf("every request missed: use %v, want the floor %v", u, loopMinUse)
		case p == 0 && u != 1:
			t.Errorf("no request missed: use %v, want 1", u)
		}
	}
}

// TestAdmitLoopLateness: the lateness is the median of the last
// loopLateN first tokens' — four late ones of nine move nothing, five
// do — it is gone once on-time first tokens are the majority again,
// and is forgotten after loopLateAge SLOs without first tokens.
func TestAdmitLoopLateness(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const slo = 100 * time.Millisecond
	cases := []struct {
		name  string
		lates []time.Duration // in order of arrival, 1 ms apart
		wait  time.Duration   // after the last
		want  time.Duration
	}{
		{"on time", rep(9, -time.Millisecond), 0, 0},
		{"fewer than nine", rep(8, 40*time.Millisecond), 0, 0},
		{"four late of nine", append(rep(5, 0), rep(4, 50*time.Millisecond)...), 0, 0},
		{"five late of nine", append(rep(4, 0), 30*time.Millisecond, 40*time.Millisecond, 50*time.Millisecond, 60*time.Millisecond, 70*time.Millisecond), 0, 30 * time.Millisecond},
		{"late, then on time", append(rep(9, 50*time.Millisecond), rep(5, 0)...), 0, 0},
		{"late, then quiet", rep(9, 50*time.Millisecond), loopLateAge*slo + 10*time.Millisecond, 0},
		{"late, recent", rep(9, 50*time.Millisecond), slo, 50 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newAdmitLoop()
			now := t0
			for _, d := range c.lates {
				now = now.Add(time.Millisecond)
				mean := 50 * time.Millisecond
				l.outcome(now, admission{loop: l, mean: mean}, mean+d, slo)
			}
			if got := l.state(now.Add(c.wait), slo).late; got != c.want {
				t.Fatalf("lateness %v, want %v", got, c.want)
			}
		})
	}
}

func rep(n int, d time.Duration) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

// TestAdmitLoopJudgesItsOwn: only outcomes of requests whose admission
// use decided, admitted in the current epoch, move use: misses of
// requests admitted on a cold bound or alone on their backend, or
// admitted before the last change, do not.
func TestAdmitLoopJudgesItsOwn(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	const slo = 100 * time.Millisecond
	for _, c := range []struct {
		name   string
		judged bool
		stale  bool
		moves  bool
	}{
		{"judged", true, false, true},
		{"not judged", false, false, false},
		{"an earlier epoch", true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newAdmitLoop()
			st := l.state(now, slo)
			epoch := st.epoch
			if c.stale {
				l.next()
			}
			for range 10 {
				l.outcome(now, admission{loop: l, epoch: epoch, mean: slo / 2, judged: c.judged}, 2*slo, slo)
			}
			if moved := l.state(now, slo).use != st.use; moved != c.moves {
				t.Fatalf("use %v → %v; want moved = %v", st.use, l.state(now, slo).use, c.moves)
			}
		})
	}
}

// fifoSim drives a Scheduler with admission over backends that are
// single-slot first-in first-out servers on a virtual clock: Poisson
// arrivals, each admitted request served after those queued before it
// for service × speed(start) × (1 ± 10%), its first token at the end of
// its service. It records, per arrival, whether the request was refused
// and, if admitted, whether its TTFT met the SLO.
type fifoSim struct {
	s       *Scheduler
	clk     *fakeClock
	service time.Duration
	speed   func(at time.Duration) float64 // service-time factor at a time since the start
	rate    float64                        // arrivals per second
	slo     time.Duration
}

type simOutcome struct {
	at      time.Duration // arrival, since the start
	refused bool
	missed  bool
	use     float64 // the route's use when it arrived
	probe   bool    // admitted as a probe (ReasonAdmitProbe)
}

func (sim *fifoSim) run(t *testing.T, n int, seed uint64) []simOutcome {
	rng := rand.New(rand.NewPCG(seed, 99))
	t0 := sim.clk.t
	type job struct {
		tk             *Ticket
		arrive, finish time.Time
	}
	queues := map[*Backend][]job{}
	free := map[*Backend]time.Time{} // when each backend's last queued job ends
	var out []simOutcome
	// finishUpTo serves, in time order across backends, every job that
	// finishes by `until`.
	finishUpTo := func(until time.Time) {
		for {
			var next *Backend
			for b, q := range queues {
				if len(q) > 0 && !q[0].finish.After(until) && (next == nil || q[0].finish.Before(queues[next][0].finish)) {
					next = b
				}
			}
			if next == nil {
				return
			}
			j := queues[next][0]
			queues[next] = queues[next][1:]
			sim.clk.t = j.finish
			j.tk.FirstTokenAt(j.finish)
			j.tk.End(OutcomeOK)
		}
	}
	at := t0
	for i := range n {
		at = at.Add(time.Duration(rng.ExpFloat64() / sim.rate * float64(time.Second)))
		finishUpTo(at)
		sim.clk.t = at
		o := simOutcome{at: at.Sub(t0), use: sim.s.loops.get("m").state(at, sim.slo).use}
		if sim.s.loops.off {
			o.use = 1
		}
		tk, err := sim.s.Pick(&Request{Model: "m", SLO: sim.slo, Admit: true, PromptTokens: 100 + rng.IntN(1900), Blocks: []uint64{uint64(i)}})
		if err != nil {
			o.refused = true
			out = append(out, o)
			continue
		}
		o.probe = tk.Reason == ReasonAdmitProbe
		b := tk.Backend
		start := at
		if f := free[b]; f.After(start) {
			start = f
		}
		d := time.Duration(float64(sim.service) * sim.speed(start.Sub(t0)) * (0.9 + 0.2*rng.Float64()))
		fin := start.Add(d)
		free[b] = fin
		queues[b] = append(queues[b], job{tk, at, fin})
		o.missed = fin.Sub(at) > sim.slo
		out = append(out, o)
	}
	finishUpTo(at.Add(time.Hour))
	return out
}

// TestAdmissionFeedbackSlowdown is the loop's purpose, on a simulated
// overload: two single-slot backends (20 ms a request) offered 1.5× what
// they can serve, with a TTFT SLO of 200 ms, whose service time doubles
// for two seconds in the middle of a run of 80 (every backend at once,
// as when the machine running them is starved). The requests queued
// when it starts miss whatever admission does next. Open loop, the
// bound's fits (≈ 100 TTFTs of memory each) lag the slowdown and keep
// admitting into it: over the slowdown more than 1% of the admitted
// miss. With the loop, the first tokens' lateness holds admission back
// within a few of them and use backs off: of the requests arriving
// during the slowdown at most half as many miss as open loop (pooled
// over the simulation's seeds 1–10), and over each whole run at most 1%
// of those admitted. Afterwards the loop relaxes: use is back at 1
// before the end, and the share refused over the last 10 s (pooled) is
// within 3 points of the open loop's.
//
// Pooled, not one pinned seed: per seed, 19–39 requests arriving during
// the slowdown missed open loop and 6–15 with the loop, so a seed's
// ratio is a coin near one half (seed 5 failed it once the queue bound
// was trusted from 8 TTFTs instead of 16, a change that moved neither
// total: 266 against 88, then 284 against 95), and the refused share of
// a seed's last 10 s lies within a few points either side (seed 3: 3.1
// points over). Over the whole run 0.9–1.9% of the admitted missed
// open loop — the bound's misses come in runs at the edge of a queue,
// slowdown or not — and 0.5–0.9% with it.
func TestAdmissionFeedbackSlowdown(t *testing.T) {
	var open, closed slowdownSummary
	for seed := uint64(1); seed <= 10; seed++ {
		o, c := testFeedbackSlowdown(t, seed)
		open.missedAfter += o.missedAfter
		closed.missedAfter += c.missedAfter
		open.tailRefused += o.tailRefused
		closed.tailRefused += c.tailRefused
		closed.tailN += c.tailN
	}
	t.Logf("pooled over seeds 1–10: %d admitted during the slowdown missed open loop, %d closed; %d refused over the last 10 s open loop, %d of %d closed",
		open.missedAfter, closed.missedAfter, open.tailRefused, closed.tailRefused, closed.tailN)
	if 2*closed.missedAfter > open.missedAfter {
		t.Errorf("pooled over seeds 1–10: %d admitted during the slowdown missed closed loop, %d open loop; want at most half", closed.missedAfter, open.missedAfter)
	}
	if closed.tailRefused > open.tailRefused+closed.tailN*3/100 {
		t.Errorf("pooled over seeds 1–10: %d of %d refused over the last 10 s closed loop, %d open loop; want within 3 points", closed.tailRefused, closed.tailN, open.tailRefused)
	}
}

// testFeedbackSlowdown runs one seed of TestAdmissionFeedbackSlowdown
// open loop and closed, checks what must hold in every run, and returns
// both runs' summaries for the pooled checks.
func testFeedbackSlowdown(t *testing.T, simSeed uint64) (open, closed slowdownSummary) {
	const (
		service = 20 * time.Millisecond
		slo     = 200 * time.Millisecond
		n       = 12000 // 80 s at 150 req/s
	)
	slowFrom, slowTo := 20*time.Second, 22*time.Second
	speed := func(at time.Duration) float64 {
		if at >= slowFrom && at < slowTo {
			return 2
		}
		return 1
	}
	run := func(open bool) slowdownSummary {
		clk := newClock()
		s := mustNew(t, RoundRobin, clk, backends("a", "b"))
		s.loops.off = open
		sim := &fifoSim{s: s, clk: clk, service: service, speed: speed, rate: 150, slo: slo}
		out := sim.run(t, n, simSeed)
		// Not the use the last request saw: the requests still queued
		// then finish after it (sim.run), and their lateness may move
		// the loop again.
		use, _, ok := s.AdmissionFeedback("m", slo)
		if ok == open || !open && !(use > 0 && use <= 1) {
			t.Fatalf("seed %d, open loop %v: AdmissionFeedback says use %v (ok %v)", simSeed, open, use, ok)
		}
		// What the gateway's metrics export: one route, its use as
		// AdmissionFeedback says, and the slowdown's back-offs counted.
		rs := s.AdmissionRoutes()
		if open != (len(rs) == 0) || !open && (len(rs) != 1 || rs[0].Model != "m" || rs[0].Use != use || rs[0].Backoffs == 0) {
			t.Fatalf("seed %d, open loop %v: AdmissionRoutes %+v, AdmissionFeedback says use %v", simSeed, open, rs, use)
		}
		var sm slowdownSummary
		end := out[len(out)-1].at
		for _, o := range out {
			if o.at >= slowTo && o.use == 1 {
				sm.relaxed = true
			}
			if o.at >= end-10*time.Second {
				sm.tailN++
				if o.refused {
					sm.tailRefused++
				}
			}
			if o.refused {
				continue
			}
			sm.allAdmitted++
			if o.at >= slowFrom && o.at < slowTo {
				sm.admittedDuring++
			}
			if o.missed {
				sm.allMissed++
				if o.at >= slowFrom && o.at < slowTo {
					sm.missedAfter++
				}
			}
		}
		return sm
	}
	if use, _, ok := mustNew(t, RoundRobin, newClock(), backends("a")).AdmissionFeedback("m", slo); ok || use != 1 {
		t.Fatalf("a scheduler that admitted nothing: use %v, ok %v; want 1, false", use, ok)
	}
	open, closed = run(true), run(false)
	for _, r := range []struct {
		name string
		sm   slowdownSummary
	}{{"open loop", open}, {"closed loop", closed}} {
		t.Logf("seed %d, %s: %d of %d admitted during the slowdown missed, %d of %d admitted in all; %d of %d refused over the last 10 s",
			simSeed, r.name, r.sm.missedAfter, r.sm.admittedDuring, r.sm.allMissed, r.sm.allAdmitted, r.sm.tailRefused, r.sm.tailN)
	}
	if open.missedAfter < 10 || float64(open.missedAfter) <= loopTarget*float64(open.admittedDuring) {
		t.Fatalf("seed %d, open loop: %d of %d admitted during the slowdown missed; the test needs a slowdown the fits lag, past 1%%",
			simSeed, open.missedAfter, open.admittedDuring)
	}
	if float64(closed.allMissed) > loopTarget*float64(closed.allAdmitted) {
		t.Errorf("seed %d, closed loop: %d of %d admitted missed in all; want ≤ 1%%", simSeed, closed.allMissed, closed.allAdmitted)
	}
	if !closed.relaxed {
		t.Errorf("seed %d, closed loop: use never back at 1 after the slowdown", simSeed)
	}
	return open, closed
}

// slowdownSummary is one run of testFeedbackSlowdown.
type slowdownSummary struct {
	admittedDuring         int // arrived during the slowdown, admitted
	missedAfter            int // and missed
	allAdmitted, allMissed int
	tailRefused, tailN     int // over the last 10 s
	relaxed                bool
}

// TestAdmissionProbesUnlock: a slowdown (the service time 2× or 5× for
// two seconds) can leave the bound refusing even a request alone — its
// fit, or its margin (a quantile of errors only new TTFTs replace),
// frozen where the slowdown left it: nothing admitted, nothing learnt,
// every request refused for good, the backends idle. Probes — one
// request alone, at once while the last one alone met the SLO, else
// once per SLO — unlock it: over the last 10 s of the run the share
// refused is near what capacity requires (a third, at 1.5× overload),
// open loop or closed. (Without probes, 2×: all refused to the end
// open loop, 66% closed; probing idle backends once per SLO only: 5×,
// 90% refused 40 s later.) At 2× the bound may not freeze at all, and
// need no probe: since it prices the queue by the slot tracker's waits
// (slots.go), the closed loop's did not.
func TestAdmissionProbesUnlock(t *testing.T) {
	for _, c := range []struct {
		open bool
		slow float64
	}{{true, 2}, {false, 2}, {true, 5}, {false, 5}} {
		open := c.open
		clk := newClock()
		s := mustNew(t, RoundRobin, clk, backends("a", "b"))
		s.loops.off = open
		sim := &fifoSim{s: s, clk: clk, service: 20 * time.Millisecond, rate: 150, slo: 200 * time.Millisecond,
			speed: func(at time.Duration) float64 {
				if at >= 20*time.Second && at < 22*time.Second {
					return c.slow
				}
				return 1
			}}
		out := sim.run(t, 9000, 5)
		end := out[len(out)-1].at
		refused, tail := 0, 0
		for _, o := range out {
			if o.at >= end-10*time.Second {
				tail++
				if o.refused {
					refused++
				}
			}
		}
		probed := 0
		for _, o := range out {
			if o.probe {
				probed++
			}
		}
		t.Logf("open loop %v, %v× slower: %d of %d refused over the last 10 s; %d probes", open, c.slow, refused, tail, probed)
		if refused > tail*4/10 || c.slow >= 5 && probed == 0 {
			t.Errorf("open loop %v, %v× slower: %d of %d refused over the last 10 s, %d probes; want under 40%% (a third is what capacity requires), some probes", open, c.slow, refused, tail, probed)
		}
	}
}

// BenchmarkAdmitLoop is the loop's cost per admitted request: its state
// read at admission (a median of nine) and its first token's outcome.
func BenchmarkAdmitLoop(b *testing.B) {
	l := newAdmitLoop()
	now := time.Unix(1_700_000_000, 0)
	const slo = 200 * time.Millisecond
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Millisecond)
		st := l.state(now, slo)
		ttft := time.Duration(100+i%7*20) * time.Millisecond
		l.outcome(now, admission{loop: l, epoch: st.epoch, mean: 120 * time.Millisecond, judged: true}, ttft, slo)
	}
}

// TestAdjustedWait: a bound the loop divided by use fits an SLO exactly
// when the unadjusted bound fits use × SLO, and the wait it tells a
// refused client (Retry-After) is the wait until the unadjusted bound
// fits use × SLO — not 1/use times as long, which dividing the excess
// by the drain time alone gave (each request drained takes Drain off the
// bound, Drain/use off the adjusted one).
func TestAdjustedWait(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const slo = 300 * time.Millisecond
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for i := range 5000 {
		use := loopMinUse + (1-loopMinUse)*rng.Float64()
		late := ms(20 * rng.Float64())
		e := QueueEstimate{
			Mean: ms(100 * rng.Float64()), Bound: ms(900 * rng.Float64()), Ahead: float64(rng.IntN(12)),
			Drain: ms(1 + 60*rng.Float64()), Reach: float64(rng.IntN(12)), Ready: true,
		}
		if e.Ahead == 0 {
			e.Ahead = 1 // adjust leaves a lone request's bound alone
		}
		adj := loopState{use: use, late: late}.adjust(e)
		raw := e
		raw.Bound += late
		limit := time.Duration(use * float64(slo))
		// Durations round to the nanosecond: compare away from the edge.
		if d := raw.Bound - limit; d > -time.Microsecond && d < time.Microsecond {
			continue
		}
		if got, want := adj.Fits(slo), raw.Fits(limit); got != want {
			t.Fatalf("case %d: adjusted fits %v, unadjusted at use × SLO %v (%+v, use %.3f)", i, got, want, e, use)
		}
		got, want := adj.Wait(slo), raw.Wait(limit)
		if got != want {
			t.Fatalf("case %d: adjusted wait %v, unadjusted at use × SLO %v (%+v, use %.3f)", i, got, want, e, use)
		}
	}
}

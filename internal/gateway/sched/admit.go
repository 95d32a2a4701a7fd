package sched

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Admission under overload (a route's admission reject or degrade) needs a
// TTFT prediction that rises with the queue as fast as the TTFT does. The
// routing predictors (predictor.go) price a request from several features
// at once with a slowly forgetting regression, and turn their mean into a
// P95 by a ratio learnt over every load: when queues build fast they lag
// (consecutive requests queued on one backend each came one service time
// later than the last, the prediction did not) and at light load the ratio
// makes them too high. Under sustained overload admission only ever
// decides at the edge of what a backend can take, so it needs a model of
// just that edge.
//
// queueBound models a backend as a server of m parallel slots working
// first-in first-out through what the gateway sent it: a request that
// finds n requests ahead of it (the gateway's own in-flight requests on
// the backend — dispatched and not ended, whether still queued, in prefill
// or decoding, since all of them hold the engine's capacity; counted from
// the moment they are admitted, not from their first token) waits for
// n−m+1 of them to finish, each finish coming on average one service time
// over m later, then takes its own time to first token:
//
//	TTFT ≈ a + b·own + d·max(0, n−m+1) + e·queued
//
// with a the TTFT of a request that neither waits nor prefills, b the
// prefill time per uncached kilotoken of its own, d the drain time per
// request waited for (service time / m) and e a correction for long
// prompts queued ahead (boundX). m is unknown (an engine's effective
// concurrency depends on its batch limits and on the requests' lengths),
// so the model keeps one fit per candidate m (slotHypotheses), as
// capacityModel does for cache sizes: every candidate learns its
// coefficients from every TTFT by exponentially weighted, non-negative
// least squares and is scored on each TTFT before it learns from it; the
// fewest slots among the candidates about as good as the best is
// believed.
//
// Its margin is a quantile of the believed candidate's own recent errors
// (scaled by spread): a request is admissible when the AdmitQuantile of
// its predicted TTFT is within the SLO. Under overload the admitted
// requests gather at that edge, so the share of them within the SLO is
// about the quantile admitted at.
type queueBound struct {
	// on: admission has asked about this backend, so the bound learns
	// (observe costs microseconds per first token, which a gateway
	// without admission routes need not pay).
	on     atomic.Bool
	mu     sync.Mutex
	fits   [nSlots]slotFit
	active int
	n      int
	q      float64 // cached AdmitQuantile of the active fit's errors, seconds
	few    bool    // too few errors for that quantile
	dirty  int
	// admitAt is when admission last sent the backend a request, alone
	// the last TTFT of a request that found nothing ahead, seconds
	// (probeDue).
	admitAt time.Time
	alone   float64
	// reach is the longest queue ahead (InFlight) a TTFT has come
	// from: the bound admits no request further back than one past it
	// (QueueEstimate.Fits), since its fit knows nothing of longer
	// queues.
	reach float64
	tmp   [boundWindow]float64
	// heads: the least of the last residualWindow times to response
	// headers of requests whose headers came clearly before their first
	// token, the transit: the part of a TTFT spent before the request
	// reaches the engine's queue and after its answer leaves it — the
	// network's round trip and the front end's parsing — which holds no
	// slot (observeTransit).
	heads minWindow
}

// slotHypotheses are the candidate effective concurrencies.
var slotHypotheses = [...]int{1, 2, 4, 8, 16, 32, 64, 128}

const nSlots = len(slotHypotheses)

// boundWindow is how many recent errors a candidate keeps for its
// quantile: enough that the 99th percentile is the third largest, few
// enough to follow a backend whose behaviour changes.
const boundWindow = 256

// boundForget is the least-squares fits' forgetting factor per TTFT
// (≈ 100 TTFTs of memory): a backend whose speed drifts is followed
// within a hundred requests.
const boundForget = 0.99

// boundMinSamples is how many TTFTs the model needs before admission
// and routing (queuedSpill) trust it; before that the routing
// prediction decides. Eight, not sixteen: a fleet of ten backends
// shares a run's 100 warm-up requests, about ten each, and at sixteen
// half its bounds were still unready for the first hundreds of measured
// requests, when a home full past its slots kept its queue (94 of 154
// such stays in a pick log of fleet ten-small) and spills went by a
// linear prediction that read 0–1 ms for a backend holding 3–5
// requests. At eight, the pooled P99 over 16 paired runs per fleet on
// seeds 1–16 was 0.87× on ten-small, 0.92× on quiet-two-slots, 0.88×
// on two-slots-six, 0.77× on overcommitted, 0.86× on long-decode and
// 0.96–1.04× where nothing waits (two, bursty, eight; seeds 1–8 twice
// agreed; docs/routing-evaluation.md, "Trusting the queue bound
// sooner"). Admission stays cautious while the errors are few: until
// 32, the bound is at least 1.5 × its mean (estimateLocked).
const boundMinSamples = 8

// AdmitQuantile is the quantile of a request's predicted TTFT that must be
// within the SLO for admission reject or degrade to admit it: 0.99, since
// what is asked of admission is that 99% of admitted requests keep the SLO
// (issue 17, item 4) and under overload the admitted ones are those
// predicted just within it.
const AdmitQuantile = 0.99

// slotFit is one candidate's weighted least-squares fit of the TTFT on
// the features boundX: its normal equations (exponentially forgotten),
// the coefficients, its prequential error and its recent errors (errs:
// observed minus predicted, over spread).
type slotFit struct {
	s    [nBX][nBX]float64 // Σ x xᵀ
	b    [nBX]float64      // Σ x y
	sw   float64           // Σ 1
	w    [nBX]float64
	err  float64 // mean absolute log error, EWMA
	errs [boundWindow]float64
	nr   int
}

// The bound's features: a constant (the time to first token of a request
// that neither waits nor prefills: scheduling, the first decode step),
// the request's own uncached kilotokens (its prefill), the requests ahead
// beyond the candidate's slots, max(0, n−m+1) (each to be waited for, one
// drain time each: a service time over m), and the uncached kilotokens
// queued ahead awaiting their first token (requests ahead are not all
// equally long: a queue of long prompts drains slower), and the wait for
// a slot that the requests in flight hold, seconds, from how far along
// each is (slotTracker.waits: zero where that is not followed). The
// count prices each finish waited for alike; the wait knows that four
// answers just begun free no slot for a whole decode, and four nearly
// done free one at once. Where slots are few and answers long, the
// spread between the two is most of the TTFT (fleet long-decode,
// docs/routing-evaluation.md); where slots are many, the count is what
// prices the queue.
const (
	bxConst = iota
	bxOwn
	bxAhead
	bxQueued
	bxWait
	nBX
)

// boundX is the features of slot hypothesis i.
func boundX(f Features, i int) [nBX]float64 {
	return [nBX]float64{1, f.UncachedTokens / 1000, max(0, f.InFlight-float64(slotHypotheses[i])+1), f.QueuedTokens / 1000, f.Waits[i]}
}

func (f *slotFit) predict(x [nBX]float64) float64 {
	y := 0.0
	for i := range nBX {
		y += f.w[i] * x[i]
	}
	return y
}

// learn adds one (x, ttft) to the fit and solves it again.
func (f *slotFit) learn(x [nBX]float64, y float64, transit float64) {
	const l = boundForget
	f.sw = l*f.sw + 1
	for i := range nBX {
		f.b[i] = l*f.b[i] + x[i]*y
		for j := range nBX {
			f.s[i][j] = l*f.s[i][j] + x[i]*x[j]
		}
	}
	f.w = solveNonNeg(&f.s, &f.b)
	// The queue ahead beyond the slots has barely varied, so its cost
	// is not measured: assume each request waited for costs what a
	// request's own time to first token does (one slot's worth), which
	// errs on the side of a longer wait, and let requests admitted at
	// longer queues show otherwise. Less the transit, which the request
	// ahead spends on the wire and in the front end, not in a slot: a
	// replica 25 ms away, answering cached prompts in 29 ms, was priced
	// 29 ms per request ahead where each held a slot for 2–4, so a home
	// four deep on four slots read 65–93 ms, and its groups were sent
	// to near backends whose caches they overfilled (fleet remote-fast,
	// docs/routing-evaluation.md, "Time on the wire holds no slot").
	xm := f.s[bxConst][bxAhead] / f.sw
	if f.s[bxAhead][bxAhead]/f.sw-xm*xm < 0.25 {
		own := (f.w[bxConst]*f.sw + f.w[bxOwn]*f.s[bxConst][bxOwn]) / f.sw
		f.w[bxAhead] = max(f.w[bxAhead], own-transit)
	}
}

// solveNonNeg solves the normal equations s w = b for the coefficients w
// ≥ 0 with the least squared error: every subset of the features is
// solved (up to 31 non-empty ones) and the best one whose
// coefficients are all non-negative kept. No TTFT component is negative,
// and a fit that let one be would extrapolate to a shorter wait for a
// longer queue.
func solveNonNeg(s *[nBX][nBX]float64, b *[nBX]float64) [nBX]float64 {
	var best [nBX]float64
	bestScore := 0.0 // −(explained sum of squares): lower is better
	// Only features that have been other than zero: one that never was
	// (the wait for a slot, where no answer has been followed) adds
	// nothing to any fit but the subsets to try.
	avail := 0
	for i := range nBX {
		if s[i][i] > 0 {
			avail |= 1 << i
		}
	}
	// All features first: when its solution is non-negative it is the
	// best there is, and the subsets need not be tried.
	for mask := avail; mask > 0; mask = (mask - 1) & avail {
		var idx [nBX]int
		k := 0
		for i := range nBX {
			if mask&(1<<i) != 0 {
				idx[k] = i
				k++
			}
		}
		var a [nBX][nBX + 1]float64
		tr := 0.0
		for r := range k {
			tr += s[idx[r]][idx[r]]
		}
		for r := range k {
			for c := range k {
				a[r][c] = s[idx[r]][idx[c]]
			}
			// A little ridge keeps a feature that never varied from
			// making the system singular.
			a[r][r] += 1e-9*tr + 1e-12
			a[r][k] = b[idx[r]]
		}
		sol, ok := gauss(&a, k)
		if !ok {
			continue
		}
		var w [nBX]float64
		feasible := true
		for r := range k {
			if sol[r] < 0 {
				feasible = false
				break
			}
			w[idx[r]] = sol[r]
		}
		if !feasible {
			continue
		}
		// The squared error is Σy² − 2wᵀb + wᵀSw; Σy² is the same for
		// every subset, and at a least-squares solution wᵀSw = wᵀb, so
		// the error is lowest where wᵀb is highest.
		sc := 0.0
		for i := range nBX {
			sc -= w[i] * b[i]
		}
		if sc < bestScore {
			best, bestScore = w, sc
		}
		if mask == avail {
			return best
		}
	}
	return best
}

// gauss solves the k×k system in a (augmented with its right-hand side in
// column k) by Gaussian elimination with partial pivoting.
func gauss(a *[nBX][nBX + 1]float64, k int) (x [nBX]float64, ok bool) {
	for c := range k {
		p := c
		for r := c + 1; r < k; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if a[p][c] == 0 {
			return x, false
		}
		a[c], a[p] = a[p], a[c]
		for r := c + 1; r < k; r++ {
			f := a[r][c] / a[c][c]
			for j := c; j <= k; j++ {
				a[r][j] -= f * a[c][j]
			}
		}
	}
	for r := k - 1; r >= 0; r-- {
		v := a[r][k]
		for j := r + 1; j < k; j++ {
			v -= a[r][j] * x[j]
		}
		x[r] = v / a[r][r]
	}
	return x, true
}

func newQueueBound() *queueBound { return &queueBound{few: true} }

// observe learns one TTFT of a request that found ahead requests in flight.
func (b *queueBound) observe(feat Features, ttft float64) {
	if !b.on.Load() || !(ttft > 0) || math.IsInf(ttft, 0) || feat.InFlight < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	const alpha = 0.05
	for i := range b.fits {
		f := &b.fits[i]
		x := boundX(feat, i)
		if b.n > 0 {
			if p := f.predict(x); p > 0 {
				e := math.Abs(math.Log(p / ttft))
				if b.n == 1 {
					f.err = e
				} else {
					f.err += alpha * (e - f.err)
				}
				if b.n >= boundMinSamples {
					// The errors of a fit of a few TTFTs say nothing of
					// the errors of one that has converged.
					f.errs[f.nr%boundWindow] = (ttft - p) / spread(x)
					f.nr++
				}
			}
		}
		f.learn(x, ttft, b.heads.least)
	}
	b.n++
	b.dirty++
	b.reach = max(b.reach, feat.InFlight)
	if feat.InFlight == 0 {
		b.alone = ttft
	}
	if b.n >= boundMinSamples {
		// Believe the fewest slots among the candidates about as good as
		// the best (within a tenth): of models the TTFTs cannot tell
		// apart, the one predicting the longest waits for long queues.
		// Early on, queues no longer than a few requests fit many slots
		// as well as one.
		lo := math.Inf(1)
		for i := range b.fits {
			lo = min(lo, b.fits[i].err)
		}
		for i := range b.fits {
			if b.fits[i].err <= 1.1*lo {
				if i != b.active {
					b.active, b.dirty = i, boundWindow
				}
				break
			}
		}
	}
	if b.dirty >= 16 || b.n < 16 {
		b.dirty = 0
		f := &b.fits[b.active]
		k := min(f.nr, boundWindow)
		if k == 0 {
			b.q, b.few = 0, true
			return
		}
		tmp := b.tmp[:k]
		copy(tmp, f.errs[:k])
		slices.Sort(tmp)
		b.q = max(tmp[quantileRank(k, AdmitQuantile)-1], 0)
		b.few = k < 32
	}
}

// observeTransit learns one request's time to its response headers,
// head, against its TTFT, seconds. Engines that answer a stream's
// headers as soon as they have parsed the request (vLLM, SGLang and TGI
// behind their HTTP servers) show in that time the round trip and the
// front end; one that sends its headers with the first token (Ollama)
// shows nothing the TTFT does not, and its headers are not counted: the
// transit stays unknown (0), and a request ahead is priced a whole TTFT.
func (b *queueBound) observeTransit(head, ttft float64) {
	if !(head >= 0) || !(ttft-head >= transitGap) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heads.add(head)
}

// Transit is the least recent time to a stream's response headers on
// this backend, where it sends them clearly before its first token: its
// round trip and front end, which hold no slot (0: not known).
func (b *Backend) Transit() time.Duration {
	q := b.preds.bound
	q.mu.Lock()
	defer q.mu.Unlock()
	return secs(q.heads.least)
}

// transitGap is how much earlier than the first token a response's
// headers must come to count as sent before the engine queued the
// request: headers written with the first token come within
// microseconds of it.
const transitGap = 0.001

// quantileRank is the rank (1-based) of the order statistic of k samples
// taken for their q-quantile: the lowest rank r at which the r-th smallest
// sample is at least as likely to lie above the quantile as below it,
// P(Binomial(k, q) < r) ≥ ½. With many samples that is about q·k, the
// plain empirical quantile; with few it is higher (the largest of 100
// samples is above their 99th percentile only 63% of the time, the second
// largest 26%), so that a short history does not make for a margin that
// is too thin more often than too wide.
func quantileRank(k int, q float64) int {
	// P(Binomial(k, q) ≤ j) accumulated from j = 0, in logs to stay
	// within range for k in the hundreds.
	lq, lp := math.Log(q), math.Log1p(-q)
	lc := 0.0 // log C(k, j)
	cdf := 0.0
	for j := 0; j < k; j++ {
		cdf += math.Exp(lc + float64(j)*lq + float64(k-j)*lp)
		if cdf >= 0.5 {
			return j + 1
		}
		lc += math.Log(float64(k-j)) - math.Log(float64(j+1))
	}
	return k
}

// spread is how a fit's errors scale with the queue: a request that
// waits for k requests to finish waits for k service times, whose
// deviations add up like a sum of k independent ones, √k times one's; its
// own prefill and scheduling noise count as one more.
func spread(x [nBX]float64) float64 { return math.Sqrt(1 + x[bxAhead]) }

// QueueEstimate is the queue-aware TTFT bound of one request on one
// backend.
type QueueEstimate struct {
	// Mean is the predicted TTFT, Bound its AdmitQuantile (Mean plus
	// the believed fit's AdmitQuantile error, scaled by spread; at least
	// 1.5 × Mean while it has fewer than 32 errors).
	Mean, Bound time.Duration
	// Ahead is the requests in flight ahead of it; Slots the believed
	// effective concurrency; Drain the predicted time per request ahead.
	Ahead float64
	Slots int
	Drain time.Duration
	// Reach is the longest queue ahead a TTFT has come from.
	Reach float64
	// Ready: the model has seen enough TTFTs to be trusted.
	Ready bool
	// slot is Slots' index in slotHypotheses.
	slot int
	// use is the admission loop's share of the SLO that Bound was
	// divided by (loopState.adjust; 0: not adjusted): Wait converts
	// Bound's excess back to the queue's time.
	use float64
}

// estimate predicts the TTFT of a request with features feat (its own
// uncached tokens, the requests and tokens in flight ahead of it).
func (b *queueBound) estimate(feat Features) QueueEstimate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.estimateLocked(feat)
}

func (b *queueBound) estimateLocked(feat Features) QueueEstimate {
	f := &b.fits[b.active]
	m := slotHypotheses[b.active]
	x := boundX(feat, b.active)
	mean := f.predict(x)
	bound := mean + b.q*spread(x)
	if b.few {
		// Too few errors for their 99th percentile: a cautious margin.
		bound = max(bound, 1.5*mean)
	}
	return QueueEstimate{
		Mean: secs(mean), Bound: secs(bound), Ahead: feat.InFlight, Slots: m, slot: b.active,
		Drain: secs(f.w[bxAhead]), Reach: b.reach, Ready: b.n >= boundMinSamples,
	}
}

// Fits reports whether the estimate's bound is within slo and the
// request no further back than one past the model's reach: a fit
// learnt at queues of up to n requests extrapolates to longer ones by
// its drain time per request, which those queues may not have measured
// (the drain time of a queue that barely varied is a guess, learn), so
// the queue a backend is let grow to rises one request at a time as
// TTFTs come back from it. Under overload that is as fast as a
// backend's queue can usefully grow: the request at the back of a queue
// of n is not served before the n ahead of it are.
func (e QueueEstimate) Fits(slo time.Duration) bool {
	return slo <= 0 || e.Bound <= slo && e.Ahead <= e.Reach+1
}

// Wait is how long until the backend's queue has drained enough for the
// bound to fit slo: what the bound is over by, or the requests beyond
// its reach, in whole drain times (the time per request waited for), as
// the requests ahead finish (0 when it fits now).
func (e QueueEstimate) Wait(slo time.Duration) time.Duration {
	if e.Fits(slo) {
		return 0
	}
	over := max(e.Bound-slo, 0)
	if e.use > 0 {
		// Bound is (bound + lateness) / use: each request drained takes
		// Drain off the bound, Drain / use off Bound.
		over = time.Duration(float64(over) * e.use)
	}
	if e.Drain <= 0 {
		return over
	}
	// Beyond its reach, the queue must first drain to one past it.
	k := max(math.Ceil(float64(over)/float64(e.Drain)), e.Ahead-e.Reach-1)
	return time.Duration(k) * e.Drain
}

// QueueEstimate is the queue-aware bound of the ticket's request on its
// backend: the requests it found in flight there when it was dispatched
// are ahead of it.
func (t *Ticket) QueueEstimate() QueueEstimate {
	return t.Backend.preds.bound.estimate(t.feat)
}

// ReasonAdmitProbe is the decision reason of a request admission sent,
// alone, to a backend whose bound refuses even a request alone
// (queueBound.probeDue).
const ReasonAdmitProbe = "admission-probe"

// ReasonRoom is the decision reason of a request that admission
// (Request.Admit) moved from the backend the profile picked, predicted to
// miss its SLO, to another with room.
const ReasonRoom = "admission-room"

// ErrRefused is what Pick returns, wrapped in a *Refused, when admission
// (Request.Admit) finds no backend predicted to meet the request's SLO.
var ErrRefused = errors.New("no backend is predicted to meet the TTFT SLO")

// Refused is Pick's error for a request admission refused.
type Refused struct {
	// Backend is the one the profile picked; Estimate its queue-aware
	// bound as admission judged it (raised by the route's lateness and
	// divided by its use, admit_feedback.go; not Ready: its routing
	// prediction, Prediction, refused).
	Backend    string
	Estimate   QueueEstimate
	Prediction Prediction
	// RetryAfter is the predicted time until some backend has room: the
	// least Wait among them.
	RetryAfter time.Duration
}

func (e *Refused) Error() string {
	return fmt.Sprintf("%v (%s: predicted %v, bound %v)", ErrRefused, e.Backend, e.Estimate.Mean, e.Estimate.Bound)
}

func (e *Refused) Unwrap() error { return ErrRefused }

// admit is admission for Pick (Request.Admit): it returns the candidate
// to dispatch on — c, the profile's pick, when its queue-aware bound is
// within the SLO; otherwise the backend with room that predicts the
// shortest TTFT, so that a refusal means no backend can take the request
// in time, not that the routing policy preferred a full one; failing
// both, an idle backend due a probe (queueBound.probeDue) — or a
// *Refused. Nothing has been dispatched when it refuses: the request is
// in no backend's queue or prefix index. A backend whose bound has too
// few TTFTs is judged as fits says. Bounds are judged under the route's
// feedback (admitLoop: lateness added, against use × SLO), and the
// admission returned tells the ticket's first token where to report.
//
// The backends with room are looked for among all that serve the request
// and are available (healthy, breaker admitting, under their concurrency
// cap, not excluded), SLO demotion ignored: demotion keeps traffic away
// from a backend that missed the SLO, as its queue grew; the bound admits
// to a backend only the requests it is predicted to serve in time, which
// is what demotion is for, and a demoted backend would otherwise sit idle
// for its cooldown (up to 30 s) while requests are refused.
func (s *Scheduler) admit(cy *Cycle, c *Candidate) (*Candidate, string, admission, error) {
	slo := cy.req.SLO
	if slo <= 0 {
		return c, "", admission{}, nil
	}
	// The route's feedback (admit_feedback.go): every ready bound of a
	// backend with requests in flight is judged raised by the lateness
	// of the route's last first tokens and against use × slo.
	loop := s.loops.get(cy.req.Model)
	st := loop.state(cy.now, slo)
	admitted := func(e QueueEstimate) admission {
		a := admission{loop: loop, epoch: st.epoch}
		if e.Ready {
			a.mean = e.Mean
			a.judged = e.Ahead > 0
		}
		return a
	}
	// evidence: some backend's bound is ready, so the workload has been
	// seen to queue (fits).
	evidence := false
	for _, b := range cy.scope {
		if !b.preds.bound.on.Load() {
			b.preds.bound.on.Store(true)
		}
		evidence = evidence || b.preds.bound.ready()
	}
	e := st.adjust(c.b.preds.bound.estimate(c.feat))
	if fits(e, c.pred, slo, evidence) {
		a := admitted(e)
		c.b.preds.bound.admitted(cy.now)
		return c, "", a, nil
	}
	var best *Candidate
	var bestE QueueEstimate
	var bestMean time.Duration
	wait := time.Duration(-1)
	// probe: an idle backend whose ready bound refuses even a request
	// alone, due a probe (probeDue) — c first.
	var probe *Candidate
	var probeE QueueEstimate
	if e.Ready && e.Ahead == 0 && c.b.preds.bound.probeDue(cy.now, slo) {
		probe, probeE = c, e
	}
	for k, b := range cy.scope {
		if b == c.b || slices.Contains(cy.req.Exclude, b.Spec.Name) || !b.admissible(cy.now) {
			continue
		}
		if m := b.Spec.MaxConcurrency; m > 0 && b.inFlight.Load() >= int64(m) {
			continue
		}
		o := &Candidate{b: b, scope: int32(k)}
		cy.predict(o)
		oe := st.adjust(b.preds.bound.estimate(o.feat))
		if !oe.Ready {
			// Too few TTFTs for its bound: judged as the profile's
			// pick would be (fits) — once other backends' bounds are
			// ready, it has room while idle. This is how a backend the
			// profile passes over while the others fill (a slow one,
			// under overload) gets the TTFTs that make its bound
			// ready; before, it needed a ready bound to be offered
			// room, and slow backends stayed cold, their capacity
			// unused, for half of a run.
			if fits(oe, o.pred, slo, evidence) && (best == nil || o.pred.Mean < bestMean) {
				best, bestE, bestMean = o, oe, o.pred.Mean
			}
			continue
		}
		if oe.Fits(slo) {
			if best == nil || oe.Mean < bestMean {
				best, bestE, bestMean = o, oe, oe.Mean
			}
			continue
		}
		if probe == nil && oe.Ahead == 0 && b.preds.bound.probeDue(cy.now, slo) {
			probe, probeE = o, oe
		}
		if w := oe.Wait(slo); wait < 0 || w < wait {
			wait = w
		}
	}
	if best != nil {
		a := admitted(bestE)
		best.b.preds.bound.admitted(cy.now)
		return best, ReasonRoom, a, nil
	}
	if probe != nil {
		probe.b.preds.bound.admitted(cy.now)
		a := admitted(probeE)
		return probe, ReasonAdmitProbe, a, nil
	}
	w := c.pred.P95 - slo // the routing prediction's, without a bound
	if e.Ready {
		w = e.Wait(slo)
	}
	if wait < 0 || w < wait {
		wait = w
	}
	return c, "", admission{}, &Refused{Backend: c.b.Spec.Name, Estimate: e, Prediction: c.pred, RetryAfter: max(wait, 0)}
}

// admission is what a ticket admitted by Pick carries for its route's
// feedback: the loop and its epoch at admission, and the bound's mean
// for the backend it was dispatched to (0 when that bound was not
// ready), against which its first token's lateness is measured; judged:
// the loop's use decided it (a ready bound, requests in flight ahead).
type admission struct {
	loop   *admitLoop
	epoch  uint64
	mean   time.Duration
	judged bool
}

// probeDue reports whether a backend with nothing of the gateway's in
// flight is due a probe: one request admitted against its bound. The
// bound learns only from the TTFTs of the requests admission lets
// through, so a bound that a slowdown taught to refuse everything — its
// fit, or its margin (a quantile of errors that only new TTFTs
// replace), frozen where the slowdown left it — would refuse
// everything, the backend idle, for good; a request alone waits for
// nothing, and its TTFT is what corrects the bound.
//
// Only that lock is probed: the bound refuses even a request alone with
// nothing to prefill (a bound that refuses one long prompt — rightly:
// alone, its prefill takes longer than the SLO — admits the next short
// one, and probes nothing). And at most once per slo unless the last
// request alone met it: where the bound is right (no request can be
// served within the SLO) probes cost one request per SLO per backend;
// where it is wrong, a backend serving one request at a time within
// the SLO gets the next at once, and its TTFTs replace the stale errors
// within a few hundred of them instead of a minute of probes.
func (b *queueBound) probeDue(now time.Time, slo time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.estimateLocked(Features{}).Bound <= slo {
		return false
	}
	return b.alone > 0 && b.alone <= slo.Seconds() || now.Sub(b.admitAt) >= slo
}

// admitted records that admission sent the backend a request at now.
func (b *queueBound) admitted(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.admitAt = now
}

// ready reports whether the bound has seen enough TTFTs to be trusted.
func (b *queueBound) ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n >= boundMinSamples
}

// fits is admission's verdict on one candidate: its queue-aware bound
// within slo (QueueEstimate.Fits); or while the bound has too few TTFTs
// (Ready), one of three:
//
//   - nothing is known of the backend (no routing prediction either):
//     admitted while no backend's bound is ready, since there is no
//     evidence against it; once one is, only while nothing of the
//     gateway's is in flight on it;
//   - evidence (another backend's ready bound) shows the workload
//     queues: admitted only while nothing of the gateway's is in flight
//     on it — a request alone waits for nothing, and its TTFT teaches
//     the bound — and the routing prediction's mean fits (its P95 is the
//     mean times a ratio learnt over loaded requests, too high for a
//     request alone: round-robin's slow backends, seen at long queues
//     in the warm-up, were never tried again);
//   - otherwise (a cold gateway): admitted if the routing prediction's
//     P95 fits and the request is no further back than one past the
//     longest queue a TTFT has come from (reach).
//
// How long a cold backend's queue may grow is what its bound is for:
// judged by the routing prediction alone, which learns from the queues
// it happens to see, slow backends were filled past the SLO before their
// bounds were ready.
func fits(e QueueEstimate, p Prediction, slo time.Duration, evidence bool) bool {
	switch {
	case e.Ready:
		return e.Fits(slo)
	case !p.Ready:
		return !evidence || e.Ahead == 0
	case evidence:
		return e.Ahead == 0 && p.Mean <= slo
	default:
		return e.Ahead <= e.Reach+1 && p.P95 <= slo
	}
}

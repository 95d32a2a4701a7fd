package sched

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Features are what a TTFT predictor sees about one request on one backend at
// dispatch time. Queue quantities are as the gateway sees them (requests it
// sent that have not produced a first token); Waiting and KVUsage come from a
// scraped vLLM /metrics when configured (zero otherwise).
type Features struct {
	PromptTokens   float64
	UncachedTokens float64
	InFlight       float64
	QueuedTokens   float64
	Waiting        float64
	KVUsage        float64
	// Waits is the wait for a slot, seconds, under each of the queue
	// bound's slot hypotheses (slotTracker.waits); the bound's alone.
	Waits [nSlots]float64
}

// Predictor estimates a backend's mean TTFT, in seconds, from Features and
// learns online from observed TTFTs. Implementations need not be safe for
// concurrent use: a predictorSet serialises them.
type Predictor interface {
	Name() string
	// Predict returns the mean TTFT in seconds and whether the model has
	// seen enough samples to be trusted.
	Predict(f Features) (mean float64, ready bool)
	Observe(f Features, ttft float64)
}

// Predictor names.
const (
	PredictorLinear = "linear-rls"
	PredictorQueue  = "queue-rate"
)

// nFeat is the regression's dimension: intercept, uncached kilotokens, queued
// kilotokens, in-flight, waiting, KV usage.
const nFeat = 6

// LinearRLS is an online linear regression fitted by recursive least squares
// with exponential forgetting, so it tracks a backend whose speed drifts
// (other tenants, thermal limits) without a training phase. It is the
// article's "linear regression + sliding residual correction" predictor; the
// residual correction lives in the predictorSet's residual window.
type LinearRLS struct {
	w      [nFeat]float64
	p      [nFeat][nFeat]float64
	lambda float64
	n      int
}

// NewLinearRLS returns a fresh model. lambda is the forgetting factor (0.995
// remembers about 200 samples); P starts large so the first samples dominate.
func NewLinearRLS(lambda float64) *LinearRLS {
	if lambda <= 0 || lambda > 1 {
		lambda = 0.995
	}
	m := &LinearRLS{lambda: lambda}
	for i := range nFeat {
		m.p[i][i] = 100
	}
	return m
}

func (m *LinearRLS) Name() string { return PredictorLinear }

func (m *LinearRLS) x(f Features) [nFeat]float64 {
	// Scale features to comparable magnitudes so P stays well conditioned.
	return [nFeat]float64{1, f.UncachedTokens / 1000, f.QueuedTokens / 1000, f.InFlight / 10, f.Waiting / 10, f.KVUsage}
}

func (m *LinearRLS) Predict(f Features) (float64, bool) {
	x := m.x(f)
	y := 0.0
	for i := range nFeat {
		y += m.w[i] * x[i]
	}
	return max(y, 0), m.n >= 2*nFeat
}

func (m *LinearRLS) Observe(f Features, ttft float64) {
	x := m.x(f)
	var px [nFeat]float64
	for i := range nFeat {
		for j := range nFeat {
			px[i] += m.p[i][j] * x[j]
		}
	}
	den := m.lambda
	for i := range nFeat {
		den += x[i] * px[i]
	}
	if den <= 0 || math.IsNaN(den) || math.IsInf(den, 0) {
		return
	}
	pred := 0.0
	for i := range nFeat {
		pred += m.w[i] * x[i]
	}
	e := ttft - pred
	for i := range nFeat {
		m.w[i] += px[i] / den * e
	}
	for i := range nFeat {
		for j := range nFeat {
			m.p[i][j] = (m.p[i][j] - px[i]*px[j]/den) / m.lambda
		}
	}
	// Guard against the covariance blowing up when a feature never varies
	// (e.g. no scraped metrics): cap the diagonal, which is what stops
	// forgetting from inflating unexcited directions without bound.
	for i := range nFeat {
		if m.p[i][i] > 1e4 {
			s := math.Sqrt(1e4 / m.p[i][i])
			for j := range nFeat {
				m.p[i][j] *= s
				m.p[j][i] *= s
			}
		}
	}
	m.n++
}

// QueueRate models a backend as a server that works through the prompt
// tokens queued before this request plus this request's own uncached tokens
// at some rate, plus a fixed overhead worth `overheadTokens` tokens. It
// learns one number, seconds per token, by an exponentially weighted average,
// which makes it robust when traffic is too volatile for the regression.
type QueueRate struct {
	secPerTok float64
	alpha     float64
	n         int
}

// overheadTokens stands for per-request fixed costs (scheduling, the first
// decode step) in token units.
const overheadTokens = 64

// NewQueueRate returns a fresh model with smoothing alpha (0.1 when <= 0).
func NewQueueRate(alpha float64) *QueueRate {
	if alpha <= 0 || alpha > 1 {
		alpha = 0.1
	}
	return &QueueRate{alpha: alpha}
}

func (m *QueueRate) Name() string { return PredictorQueue }

func (m *QueueRate) work(f Features) float64 {
	return f.QueuedTokens + f.UncachedTokens + overheadTokens
}

func (m *QueueRate) Predict(f Features) (float64, bool) {
	return m.secPerTok * m.work(f), m.n >= 3
}

func (m *QueueRate) Observe(f Features, ttft float64) {
	s := ttft / m.work(f)
	if m.n == 0 {
		m.secPerTok = s
	} else {
		m.secPerTok += m.alpha * (s - m.secPerTok)
	}
	m.n++
}

// MAPEThreshold is the article's switch point (§4.3): when the active
// predictor's online mean absolute percentage error exceeds 12%, fall back to
// the other one if it is doing better.
const MAPEThreshold = 0.12

// minWindow is the least of the last residualWindow values added,
// refreshed at each of the first 16 and every 16 after (a minimum over
// the window at every value would cost a scan of it per first token).
type minWindow struct {
	xs    [residualWindow]float64
	n     int
	least float64
}

func (w *minWindow) add(x float64) {
	w.xs[w.n%residualWindow] = x
	w.n++
	if w.n <= 16 || w.n%16 == 0 {
		w.least = slices.Min(w.xs[:min(w.n, residualWindow)])
	}
}

// residualWindow is how many recent residual ratios the P95 correction uses.
const residualWindow = 256

// predictorSet holds a backend's two predictors, their online MAPE, and the
// window of residual ratios (actual / predicted mean) that turns the active
// predictor's mean into a P95.
type predictorSet struct {
	mu     sync.Mutex
	preds  [2]Predictor
	mape   [2]float64
	seen   [2]int
	active int
	ratios [residualWindow]float64
	nr     int
	q95    float64 // cached 95th percentile of ratios
	dirty  int
	since  int // observations since the last predictor switch
	sorted [residualWindow]float64
	prior  float64 // seconds, used before any predictor is ready
	// ttfts: the least of the last residualWindow TTFTs, under which no
	// ready prediction falls (predict).
	ttfts minWindow
	// sw, when set (PredictorSwitching), replaces preds and the MAPE
	// fallback; the residual window still turns its mean into a P95.
	sw *switcher
	// bound is the queue-aware model admission decides by (admit.go),
	// learning from the same TTFTs; it has its own lock. Routing reads
	// it for a home past its slots (queuedSpill).
	bound *queueBound
}

func newPredictorSet(prior time.Duration, mode string) *predictorSet {
	s := &predictorSet{preds: [2]Predictor{NewLinearRLS(0.995), NewQueueRate(0.1)}, q95: 1.5, prior: prior.Seconds(), bound: newQueueBound()}
	if mode == PredictorSwitching {
		s.sw = newSwitcher()
	}
	return s
}

// Prediction is a predictor's answer for one candidate.
type Prediction struct {
	Mean      time.Duration
	P95       time.Duration
	Predictor string
	Ready     bool
}

func (s *predictorSet) predict(f Features) Prediction {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sw != nil {
		mean, ready, name := s.sw.predict(f)
		if !ready {
			mean = s.prior
		} else {
			mean = max(mean, s.ttfts.least) // as below
		}
		return Prediction{Mean: secs(mean), P95: secs(mean * max(s.q95, 1)), Predictor: name, Ready: ready}
	}
	i := s.active
	mean, ready := s.preds[i].Predict(f)
	if !ready {
		// The other model may be ready sooner (the queue model needs three
		// samples, the regression twelve).
		if m2, ok2 := s.preds[1-i].Predict(f); ok2 {
			mean, ready, i = m2, true, 1-i
		}
	}
	if !ready {
		mean = s.prior
	}
	q := s.q95
	if q < 1 {
		q = 1
	}
	if ready {
		// A regression extrapolates below anything served (to zero, where
		// it is clamped, for a short prompt on an idle backend); a
		// prediction under the fastest recent TTFT is one no request has
		// shown, and it made the backend look the fastest of all.
		mean = max(mean, s.ttfts.least)
	}
	return Prediction{
		Mean:      secs(mean),
		P95:       secs(mean * q),
		Predictor: s.preds[i].Name(),
		Ready:     ready,
	}
}

func (s *predictorSet) observe(f Features, ttft float64) { s.observeAt(time.Time{}, f, ttft) }

// observeAt learns from a request dispatched at `at` (its arrival, which
// the switching predictor measures traffic by) with features f.
func (s *predictorSet) observeAt(at time.Time, f Features, ttft float64) {
	if ttft <= 0 || math.IsNaN(ttft) || math.IsInf(ttft, 0) {
		return
	}
	// The request found f.InFlight of the gateway's requests ahead of it.
	s.bound.observe(f, ttft)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttfts.add(ttft)
	if s.sw != nil {
		if m := s.sw.observe(at, f, ttft); m > 0 {
			s.ratios[s.nr%residualWindow] = ttft / m
			s.nr++
			s.dirty++
		}
		s.updateQ95()
		return
	}
	for i, p := range s.preds {
		if m, ready := p.Predict(f); ready {
			ape := math.Abs(ttft-m) / ttft
			if s.seen[i] == 0 {
				s.mape[i] = ape
			} else {
				s.mape[i] += 0.05 * (ape - s.mape[i])
			}
			s.seen[i]++
			if i == s.active && m > 0 {
				s.ratios[s.nr%residualWindow] = ttft / m
				s.nr++
				s.dirty++
			}
		}
	}
	for _, p := range s.preds {
		p.Observe(f, ttft)
	}
	// Fall back to the other predictor when the active one's error is above
	// the threshold and the other one is clearly better (by a fifth, so
	// two equally poor models do not flap), at most once per 50 samples.
	o := 1 - s.active
	s.since++
	if s.since >= 50 && s.seen[s.active] >= 20 && s.seen[o] >= 20 && s.mape[s.active] > MAPEThreshold && s.mape[o] < 0.8*s.mape[s.active] {
		s.active = o
		s.nr, s.dirty, s.since = 0, 0, 0
	}
	s.updateQ95()
}

// updateQ95 refreshes the cached 95th percentile of the residual ratios
// every 16 new ones (and at each of the first 16).
func (s *predictorSet) updateQ95() {
	if s.dirty >= 16 || (s.nr > 0 && s.nr < 16) {
		s.dirty = 0
		n := min(s.nr, residualWindow)
		tmp := s.sorted[:n]
		copy(tmp, s.ratios[:n])
		slices.Sort(tmp)
		s.q95 = tmp[int(math.Ceil(0.95*float64(n)))-1]
		if n < 8 {
			// Too few residuals for a quantile: keep a cautious margin.
			s.q95 = max(s.q95, 1.5)
		}
	}
}

// PredictorStats is a snapshot for metrics.
type PredictorStats struct {
	Active string
	// MAPE is each model's online error (an exponentially weighted
	// average, what switching reads).
	MAPE map[string]float64
	// Switching predictor only: each model's mean error over every
	// request it predicted (MeanAPE, over Samples requests) and over the
	// JointN requests every model predicted (JointMAPE: the side-by-side
	// comparison); the traffic's QPS and CoV of inter-arrival times.
	MeanAPE, JointMAPE map[string]float64
	Samples            map[string]int
	JointN             int
	QPS, CoV           float64
}

func (s *predictorSet) stats() PredictorStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sw != nil {
		var st PredictorStats
		s.sw.stats(&st)
		return st
	}
	st := PredictorStats{Active: s.preds[s.active].Name(), MAPE: map[string]float64{}}
	for i, p := range s.preds {
		if s.seen[i] > 0 {
			st.MAPE[p.Name()] = s.mape[i]
		}
	}
	return st
}

func secs(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	if s > 3600 {
		s = 3600
	}
	return time.Duration(s * float64(time.Second))
}

package sched

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// The article's predictor switching (§4.3), opt-in (PredictorSwitching;
// see docs/routing-evaluation.md for why it is not the default): three
// models learn every backend's TTFTs side by side — linear regression with
// a sliding residual correction, the queue-rate model and a small
// gradient-boosted tree model (gbt.go) refitted in the background on a
// sliding window — and the one in charge follows the traffic: the linear
// model while arrivals are regular and slow (QPS < switchQPS), the trees
// when the coefficient of variation of inter-arrival times exceeds
// switchCoV, and whichever has the lowest error whenever the one in
// charge has a MAPE over MAPEThreshold.

// Predictor names and modes.
const (
	PredictorGBT = "gbt"
	// PredictorDefault is the linear/queue-rate pair with MAPE fallback;
	// PredictorSwitching adds the trees and the traffic-driven switch.
	PredictorDefault   = "default"
	PredictorSwitching = "switching"
)

// Keys of PredictorStats.JointMAPE besides the models' names: the
// prediction in charge, and the linear model without its residual
// correction.
const (
	JointActive      = "switching"
	JointPlainLinear = "linear-plain"
)

// PredictorModes lists the accepted predictor modes.
func PredictorModes() []string { return []string{PredictorDefault, PredictorSwitching} }

const (
	// switchQPS and switchCoV are the article's thresholds: the linear
	// model below 50 requests per second, the trees above a coefficient of
	// variation of inter-arrival times of 0.8.
	switchQPS = 50
	switchCoV = 0.8
	// trafficWindow is how many recent arrivals QPS and CoV are measured
	// over.
	trafficWindow = 64
	// sampleWindow is the trees' training window; regimeWindow the span
	// the entropy and load covariance features summarise (the article's
	// five minutes).
	sampleWindow = 512
	regimeWindow = 5 * time.Minute
	// retrainEvery observations a new tree model is fitted, once
	// minTrain samples are in the window.
	retrainEvery = 32
	minTrain     = 64
	// residualSpan is the linear model's sliding residual correction:
	// the mean of its last residualSpan errors is added to it.
	residualSpan = 32
	// switchEvery observations the model in charge is reconsidered.
	switchEvery = 16
	// nGBTFeat: today's features (uncached, queued, in flight, waiting,
	// KV usage, prompt) and the two regime features (TTFT entropy, load
	// covariance).
	nGBTFeat = 8
)

const (
	swLinear = iota
	swQueue
	swGBT
	nSw
)

type swSample struct {
	at   time.Time
	f    Features
	ttft float64
}

// switcher is a backend's switching predictor; predictorSet serialises
// its calls except the trees' training, which runs on its own goroutine
// and publishes through gbt.
type switcher struct {
	lin   *LinearRLS
	queue *QueueRate
	gbt   atomic.Pointer[gbtModel]
	// training is set while a fit runs, so at most one does.
	training atomic.Bool
	// syncTrain fits in the caller (tests, virtual-clock evaluations).
	syncTrain bool

	res  [residualSpan]float64
	nres int

	samples [sampleWindow]swSample
	ns      int
	// Regime features of the last regimeWindow, recomputed every
	// switchEvery observations (not per prediction).
	entropy, loadCov float64

	arrivals [trafficWindow]time.Time
	na       int
	qps, cov float64

	mape   [nSw]float64 // EWMA, drives the switch
	seen   [nSw]int
	apeSum [nSw]float64 // every prediction's error, for reports
	// jointSum: errors on the requests every model predicted, so the
	// models are compared on the same requests.
	jointSum [nSw]float64
	jointN   int
	// jointActive and jointPlain: on the same requests, the error of the
	// prediction that was in charge, and of the linear model without its
	// residual correction (the default predictor's regression).
	jointActive, jointPlain float64
	active                  int
	pending                 int // observations since the last reconsideration
}

func newSwitcher() *switcher {
	return &switcher{lin: NewLinearRLS(0.995), queue: NewQueueRate(0.1), active: swLinear}
}

func (w *switcher) names(i int) string {
	return [nSw]string{PredictorLinear, PredictorQueue, PredictorGBT}[i]
}

// gbtX is the trees' feature vector for f under the current regime.
func (w *switcher) gbtX(f Features, x *[nGBTFeat]float64) {
	*x = [nGBTFeat]float64{f.UncachedTokens, f.QueuedTokens, f.InFlight, f.Waiting, f.KVUsage, f.PromptTokens, w.entropy, w.loadCov}
}

// predictOne is model i's mean TTFT in seconds and whether it is ready.
func (w *switcher) predictOne(i int, f Features) (float64, bool) {
	switch i {
	case swLinear:
		m, ok := w.lin.Predict(f)
		if w.nres > 0 {
			c := 0.0
			n := min(w.nres, residualSpan)
			for _, r := range w.res[:n] {
				c += r
			}
			m += c / float64(n)
		}
		return max(m, 0), ok
	case swQueue:
		return w.queue.Predict(f)
	default:
		g := w.gbt.Load()
		if g == nil {
			return 0, false
		}
		var x [nGBTFeat]float64
		w.gbtX(f, &x)
		return math.Exp(g.predict(x[:])), true
	}
}

// predict is the model in charge's mean, falling back to any ready model.
func (w *switcher) predict(f Features) (float64, bool, string) {
	if m, ok := w.predictOne(w.active, f); ok {
		return m, true, w.names(w.active)
	}
	for i := range nSw {
		if m, ok := w.predictOne(i, f); ok {
			return m, true, w.names(i)
		}
	}
	return 0, false, w.names(w.active)
}

// observe scores every ready model on this TTFT (before any learns from
// it, so each is judged on requests it has not seen), lets each learn,
// and reconsiders the traffic regime and the model in charge. It returns
// the active model's prediction for the residual window (0: none).
func (w *switcher) observe(at time.Time, f Features, ttft float64) float64 {
	activePred := 0.0
	var apes [nSw]float64
	all := true
	for i := range nSw {
		m, ok := w.predictOne(i, f)
		if !ok {
			all = false
			continue
		}
		ape := math.Abs(ttft-m) / ttft
		apes[i] = ape
		if w.seen[i] == 0 {
			w.mape[i] = ape
		} else {
			w.mape[i] += 0.05 * (ape - w.mape[i])
		}
		w.seen[i]++
		w.apeSum[i] += ape
		if i == w.active {
			activePred = m
		}
	}
	raw, rawOK := w.lin.Predict(f)
	if all && rawOK {
		for i := range nSw {
			w.jointSum[i] += apes[i]
		}
		w.jointActive += apes[w.active]
		w.jointPlain += math.Abs(ttft-raw) / ttft
		w.jointN++
	}
	if rawOK {
		w.res[w.nres%residualSpan] = ttft - raw
		w.nres++
	}
	w.lin.Observe(f, ttft)
	w.queue.Observe(f, ttft)
	w.samples[w.ns%sampleWindow] = swSample{at: at, f: f, ttft: ttft}
	w.ns++
	w.arrivals[w.na%trafficWindow] = at
	w.na++
	w.pending++
	if w.pending >= switchEvery {
		w.pending = 0
		w.regime(at)
		w.choose()
	}
	if w.ns >= minTrain && w.ns%retrainEvery == 0 && w.training.CompareAndSwap(false, true) {
		xs, ys := w.trainingSet()
		if w.syncTrain {
			w.fit(xs, ys)
		} else {
			go w.fit(xs, ys)
		}
	}
	return activePred
}

func (w *switcher) fit(xs [][]float64, ys []float64) {
	defer w.training.Store(false)
	if m := fitGBT(xs, ys, defaultGBTParams(nGBTFeat)); m != nil {
		w.gbt.Store(m)
	}
}

// trainingSet copies the window as rows and log-TTFT targets, each row
// with the regime features as they are now (the window is a recent one).
func (w *switcher) trainingSet() ([][]float64, []float64) {
	n := min(w.ns, sampleWindow)
	xs := make([][]float64, n)
	ys := make([]float64, n)
	flat := make([]float64, n*nGBTFeat)
	var x [nGBTFeat]float64
	for i := range n {
		s := &w.samples[i]
		w.gbtX(s.f, &x)
		xs[i] = flat[i*nGBTFeat : (i+1)*nGBTFeat]
		copy(xs[i], x[:])
		ys[i] = math.Log(s.ttft)
	}
	return xs, ys
}

// regime recomputes QPS and the CoV of inter-arrival times over the last
// arrivals, and the entropy and load covariance of the samples within
// regimeWindow of now.
func (w *switcher) regime(now time.Time) {
	n := min(w.na, trafficWindow)
	ts := slices.Clone(w.arrivals[:n])
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	if n >= 3 {
		gaps := make([]float64, n-1)
		var mu float64
		for i := 1; i < n; i++ {
			gaps[i-1] = ts[i].Sub(ts[i-1]).Seconds()
			mu += gaps[i-1]
		}
		mu /= float64(n - 1)
		var v float64
		for _, g := range gaps {
			v += (g - mu) * (g - mu)
		}
		if mu > 0 {
			w.qps = 1 / mu
			w.cov = math.Sqrt(v/float64(n-2)) / mu
		}
	}
	var tt, load []float64
	for i := range min(w.ns, sampleWindow) {
		s := &w.samples[i]
		if now.Sub(s.at) <= regimeWindow {
			tt = append(tt, s.ttft)
			load = append(load, s.f.InFlight)
		}
	}
	w.entropy = entropy(tt, 16)
	w.loadCov = covariance(load, tt)
}

// choose puts the traffic's model in charge (the trees under volatile
// arrivals, the linear model under regular ones), unless its error is
// over MAPEThreshold and another model's is lower by a fifth.
func (w *switcher) choose() {
	want := swLinear
	if w.cov > switchCoV && w.gbt.Load() != nil {
		want = swGBT
	}
	// Below switchQPS with regular arrivals the linear model is the
	// article's choice; above it (regular, fast traffic) the linear
	// model stays in charge too unless its error says otherwise.
	if w.seen[want] >= switchEvery && w.mape[want] > MAPEThreshold {
		best := want
		for i := range nSw {
			if w.seen[i] >= switchEvery && w.mape[i] < 0.8*w.mape[best] {
				best = i
			}
		}
		want = best
	}
	w.active = want
}

// stats adds the switcher's figures to st.
func (w *switcher) stats(st *PredictorStats) {
	st.Active = w.names(w.active)
	st.MAPE = map[string]float64{}
	st.MeanAPE = map[string]float64{}
	st.Samples = map[string]int{}
	for i := range nSw {
		if w.seen[i] > 0 {
			st.MAPE[w.names(i)] = w.mape[i]
			st.MeanAPE[w.names(i)] = w.apeSum[i] / float64(w.seen[i])
			st.Samples[w.names(i)] = w.seen[i]
		}
	}
	st.JointMAPE = map[string]float64{}
	if w.jointN > 0 {
		for i := range nSw {
			st.JointMAPE[w.names(i)] = w.jointSum[i] / float64(w.jointN)
		}
		st.JointMAPE[JointActive] = w.jointActive / float64(w.jointN)
		st.JointMAPE[JointPlainLinear] = w.jointPlain / float64(w.jointN)
	}
	st.JointN = w.jointN
	st.QPS, st.CoV = w.qps, w.cov
}

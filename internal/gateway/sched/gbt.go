package sched

import (
	"math"
	"slices"
)

// A small gradient-boosted regression-tree model in pure Go, for the
// switching predictor (switching.go): the article's model for volatile
// traffic (§4.3). It is fitted to log TTFT with squared loss, so that
// its errors are relative ones (what MAPE judges), on histogram-binned
// features: each feature is cut at quantiles of the training window into
// at most gbtBins bins, and a tree level is grown from per-bin sums of
// residuals, O(samples × features) per level rather than a sort per
// node. Training happens off the request path (switching.go); predicting
// walks gbtTrees trees of depth gbtDepth, a few hundred comparisons.

// gbtParams are the boosting settings. They are small on purpose: the
// model is refitted every few dozen requests on a window of a few hundred,
// so it must train in about a millisecond and cannot use many leaves
// without fitting noise.
type gbtParams struct {
	trees    int     // boosting rounds
	depth    int     // levels per tree
	shrink   float64 // learning rate
	minLeaf  int     // fewest samples in a leaf
	bins     int     // histogram bins per feature
	features int     // feature vector length
}

func defaultGBTParams(features int) gbtParams {
	return gbtParams{trees: 40, depth: 3, shrink: 0.2, minLeaf: 8, bins: 16, features: features}
}

// gbtNode is a node of a tree stored in an array: an inner node sends x
// to left when x[feature] <= threshold; a leaf (feature < 0) holds value.
type gbtNode struct {
	feature     int
	threshold   float64
	left, right int32
	value       float64
}

// gbtModel is a fitted ensemble; it is immutable once built, so it can be
// read by predictions while the next one trains.
type gbtModel struct {
	base  float64
	trees [][]gbtNode
}

// predict returns the model's estimate of log TTFT for x.
func (m *gbtModel) predict(x []float64) float64 {
	y := m.base
	for _, t := range m.trees {
		i := int32(0)
		for t[i].feature >= 0 {
			if x[t[i].feature] <= t[i].threshold {
				i = t[i].left
			} else {
				i = t[i].right
			}
		}
		y += t[i].value
	}
	return y
}

// fitGBT fits a model to rows xs (each p.features long) and targets ys.
// It returns nil when there are too few rows to split even once.
func fitGBT(xs [][]float64, ys []float64, p gbtParams) *gbtModel {
	n := len(xs)
	if n < 2*p.minLeaf || n != len(ys) {
		return nil
	}
	// Bin edges per feature: quantiles of the window, deduplicated (a
	// feature that never varies gets no edge and is never split on).
	edges := make([][]float64, p.features)
	col := make([]float64, n)
	for f := range p.features {
		for i, x := range xs {
			col[i] = x[f]
		}
		slices.Sort(col)
		var e []float64
		for b := 1; b < p.bins; b++ {
			v := col[b*n/p.bins]
			if (len(e) == 0 || v > e[len(e)-1]) && v < col[n-1] {
				e = append(e, v)
			}
		}
		edges[f] = e
	}
	// bin[i*features+f] is row i's bin in feature f.
	bin := make([]uint8, n*p.features)
	for i, x := range xs {
		for f := range p.features {
			b, _ := slices.BinarySearch(edges[f], x[f])
			bin[i*p.features+f] = uint8(b)
		}
	}
	m := &gbtModel{}
	for _, y := range ys {
		m.base += y
	}
	m.base /= float64(n)
	pred := make([]float64, n)
	for i := range pred {
		pred[i] = m.base
	}
	res := make([]float64, n)
	node := make([]int32, n) // each row's current node in the tree being grown
	sum := make([]float64, p.bins)
	cnt := make([]int, p.bins)
	for range p.trees {
		for i := range res {
			res[i] = ys[i] - pred[i]
			node[i] = 0
		}
		t := []gbtNode{{feature: -1}}
		frontier := []int32{0}
		for range p.depth {
			var next []int32
			for _, id := range frontier {
				var s float64
				var c int
				for i := range n {
					if node[i] == id {
						s += res[i]
						c++
					}
				}
				t[id].value = s / float64(max(c, 1))
				if c < 2*p.minLeaf {
					continue
				}
				// The split that most reduces squared error: maximise
				// sL²/nL + sR²/nR over features and bin boundaries.
				bestGain, bestF, bestB := s*s/float64(c)+1e-12, -1, 0
				for f := range p.features {
					if len(edges[f]) == 0 {
						continue
					}
					clear(sum)
					clear(cnt)
					for i := range n {
						if node[i] == id {
							b := bin[i*p.features+f]
							sum[b] += res[i]
							cnt[b]++
						}
					}
					var sl float64
					var cl int
					for b := range len(edges[f]) {
						sl += sum[b]
						cl += cnt[b]
						cr := c - cl
						if cl < p.minLeaf || cr < p.minLeaf {
							continue
						}
						sr := s - sl
						if g := sl*sl/float64(cl) + sr*sr/float64(cr); g > bestGain {
							bestGain, bestF, bestB = g, f, b
						}
					}
				}
				if bestF < 0 {
					continue
				}
				l, r := int32(len(t)), int32(len(t)+1)
				t[id].feature, t[id].threshold, t[id].left, t[id].right = bestF, edges[bestF][bestB], l, r
				t = append(t, gbtNode{feature: -1}, gbtNode{feature: -1})
				for i := range n {
					if node[i] == id {
						if int(bin[i*p.features+bestF]) <= bestB {
							node[i] = l
						} else {
							node[i] = r
						}
					}
				}
				next = append(next, l, r)
			}
			frontier = next
		}
		// Leaves' values: the mean residual of their rows, shrunk.
		ls := make([]float64, len(t))
		lc := make([]int, len(t))
		for i := range n {
			ls[node[i]] += res[i]
			lc[node[i]]++
		}
		for id := range t {
			if t[id].feature < 0 {
				t[id].value = p.shrink * ls[id] / float64(max(lc[id], 1))
			}
		}
		for i := range n {
			pred[i] += t[node[i]].value
		}
		m.trees = append(m.trees, t)
	}
	return m
}

// entropy is the normalised Shannon entropy (0 to 1) of xs binned into
// nb equal bins of log value: near 0 when TTFTs are all alike, near 1
// when they spread over orders of magnitude (the article's "TTFT
// distribution entropy" feature).
func entropy(xs []float64, nb int) float64 {
	if len(xs) < 2 || nb < 2 {
		return 0
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		l := math.Log(x)
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	if !(hi > lo) {
		return 0
	}
	counts := make([]int, nb)
	for _, x := range xs {
		counts[min(int((math.Log(x)-lo)/(hi-lo)*float64(nb)), nb-1)]++
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			q := float64(c) / float64(len(xs))
			h -= q * math.Log(q)
		}
	}
	return h / math.Log(float64(nb))
}

// covariance is the sample covariance of paired xs and ys (the article's
// "load covariance": of the load a request met and its TTFT).
func covariance(xs, ys []float64) float64 {
	n := len(xs)
	if n < 2 || n != len(ys) {
		return 0
	}
	var mx, my float64
	for i := range n {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	c := 0.0
	for i := range n {
		c += (xs[i] - mx) * (ys[i] - my)
	}
	return c / float64(n-1)
}

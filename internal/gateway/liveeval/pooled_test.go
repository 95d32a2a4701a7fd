package liveeval

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/stats"
)

// randomSeeds is n seeds of m..2m lognormal-ish TTFTs (ms) with a tail.
func randomSeeds(rng *rand.Rand, n, m int) [][]float64 {
	out := make([][]float64, n)
	for s := range out {
		k := m + rng.IntN(m+1)
		for range k {
			x := 5 * math.Exp(rng.NormFloat64()*0.6)
			if rng.Float64() < 0.02 {
				x *= 10
			}
			out[s] = append(out[s], x)
		}
	}
	return out
}

// TestPoolQuantileMatchesConcatenation: the weighted walk gives exactly
// stats.Quantile of the resampled seeds laid end to end.
func TestPoolQuantileMatchesConcatenation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		seeds := randomSeeds(rng, 1+rng.IntN(6), 1+rng.IntN(40))
		l := layout(seeds)
		p := newPool(seeds, l)
		// Counts per request slot, as a resample of the seeds and then
		// of their requests gives.
		count := make([]int, l.total)
		for range l.total {
			count[rng.IntN(l.total)]++
		}
		var all []float64
		for s, xs := range seeds {
			for j, x := range xs {
				for range count[l.off[s]+j] {
					all = append(all, x)
				}
			}
		}
		slices.Sort(all)
		for _, q := range []float64{0, 0.01, 0.5, 0.95, 0.99, 1} {
			got, want := p.quantile(count, q), stats.Quantile(all, q)
			if got != want {
				t.Fatalf("trial %d q %.2f counts %v: %v, want %v", trial, q, count, got, want)
			}
		}
	}
	if got := PooledQuantile([][]float64{{1, 2}, {3, 4}}, 0.5); got != 2.5 {
		t.Errorf("PooledQuantile = %v, want 2.5", got)
	}
}

// TestPairedRatioProperties: the interval holds its point; identical
// inputs give 1 with no width; scaling one policy's TTFTs by k scales the
// ratio and its interval by k; swapping the policies inverts the point;
// the same inputs give the same interval (the resampling is seeded).
func TestPairedRatioProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for trial := range 60 {
		n := 2 + rng.IntN(5)
		a, b := randomSeeds(rng, n, 60), randomSeeds(rng, n, 60)
		// Seeds resampled alone, and seeds then their requests.
		opt := Bootstrap{Resamples: 400, Seed: uint64(trial), SeedsOnly: trial%2 == 1}
		iv := PairedRatio(a, b, 0.99, opt)
		if !(iv.Lo <= iv.Point && iv.Point <= iv.Hi) {
			t.Fatalf("trial %d: interval %+v does not hold its point", trial, iv)
		}
		if again := PairedRatio(a, b, 0.99, opt); again != iv {
			t.Fatalf("trial %d: %+v then %+v from the same inputs", trial, iv, again)
		}
		if same := PairedRatio(a, a, 0.99, opt); same != (Interval{1, 1, 1}) {
			t.Fatalf("trial %d: identical inputs give %+v", trial, same)
		}
		k := 0.25 + 3*rng.Float64()
		scaled := make([][]float64, n)
		for s, xs := range a {
			for _, x := range xs {
				scaled[s] = append(scaled[s], k*x)
			}
		}
		sv := PairedRatio(scaled, b, 0.99, opt)
		if !near(sv.Point, k*iv.Point) || !near(sv.Lo, k*iv.Lo) || !near(sv.Hi, k*iv.Hi) {
			t.Fatalf("trial %d: ×%.3f gives %+v, want %+v ×%.3f", trial, k, sv, iv, k)
		}
		if inv := PairedRatio(b, a, 0.99, opt); !near(inv.Point, 1/iv.Point) {
			t.Fatalf("trial %d: swapped point %v, want %v", trial, inv.Point, 1/iv.Point)
		}
	}
}

func TestPairedRatioCases(t *testing.T) {
	seq := func(lo, hi, step float64) []float64 {
		var xs []float64
		for x := lo; x <= hi; x += step {
			xs = append(xs, x)
		}
		return xs
	}
	half := func(xs []float64) []float64 {
		var out []float64
		for _, x := range xs {
			out = append(out, x/2)
		}
		return out
	}
	base := [][]float64{seq(1, 100, 1), seq(2, 120, 1), seq(1, 90, 1)}
	// One seed where the default had a bad tail: the interval must widen.
	outlier := [][]float64{half(base[0]), half(base[1]), append(half(base[2])[:80], 200, 210, 220, 230, 240, 250, 260, 270, 280, 290)}
	tests := []struct {
		name   string
		a, b   [][]float64
		point  float64
		narrow bool // Hi - Lo < 0.01
		decide Decision
		opt    Bootstrap
	}{
		{"a consistent half", [][]float64{half(base[0]), half(base[1]), half(base[2])}, base, 0.5, true, Met, Bootstrap{}},
		{"one seed's tail", outlier, base, math.NaN(), false, Undecided, Bootstrap{}},
		{"one seed's tail, seeds only", outlier, base, math.NaN(), false, Undecided, Bootstrap{SeedsOnly: true}},
		{"one seed, seeds only: no interval", [][]float64{half(base[0])}, base[:1], 0.5, false, Met, Bootstrap{SeedsOnly: true}},
	}
	// Resampling the requests too: a consistent half is still exactly a
	// half (the same draws for both), and one seed gets an interval.
	if iv := PairedRatio([][]float64{half(base[0])}, base[:1], 0.99, Bootstrap{}); iv.Lo != 0.5 || iv.Hi != 0.5 {
		t.Errorf("one seed, requests resampled: %+v, want [0.5, 0.5]", iv)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iv := PairedRatio(tt.a, tt.b, 0.99, tt.opt)
			if !math.IsNaN(tt.point) && math.Abs(iv.Point-tt.point) > 1e-9 {
				t.Errorf("point %v, want %v", iv.Point, tt.point)
			}
			if w := iv.Hi - iv.Lo; tt.narrow != (w < 0.01) {
				t.Errorf("interval %+v: width %.3f, want narrow %v", iv, w, tt.narrow)
			}
			if d := Decide(iv, 1); d != tt.decide {
				t.Errorf("interval %+v against 1: %s, want %s", iv, d, tt.decide)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		iv    Interval
		limit float64
		want  Decision
	}{
		{Interval{1.0, 0.9, 1.05}, 1.1, Met},
		{Interval{1.0, 0.9, 1.1}, 1.1, Met},
		{Interval{1.05, 0.95, 1.2}, 1.1, Undecided},
		{Interval{1.2, 1.11, 1.3}, 1.1, NotMet},
		{Interval{0.3, 0.2, 0.4}, 1.0 / 3, Undecided},
		{Interval{1.2, nan, nan}, 1.1, NotMet},
		{Interval{1.0, nan, nan}, 1.1, Met},
		{Interval{nan, nan, nan}, 1.1, NoData},
	}
	for _, tt := range tests {
		if got := Decide(tt.iv, tt.limit); got != tt.want {
			t.Errorf("Decide(%+v, %.2f) = %s, want %s", tt.iv, tt.limit, got, tt.want)
		}
	}
	combos := []struct {
		in   []Decision
		want Decision
	}{
		{[]Decision{Met, Met}, Met},
		{[]Decision{Met, NoData}, Met},
		{[]Decision{Met, Undecided}, Undecided},
		{[]Decision{Undecided, NotMet}, NotMet},
		{[]Decision{NoData, NoData}, NoData},
	}
	for _, c := range combos {
		if got := Combine(c.in...); got != c.want {
			t.Errorf("Combine(%v) = %s, want %s", c.in, got, c.want)
		}
	}
}

// TestCheckPooled: the best single-signal policy is the one with the lower
// pooled P99 even where the medians of the seeds' P99s pick the other,
// and each target is judged on its interval.
func TestCheckPooled(t *testing.T) {
	run := func(pol string, seed uint64, ttfts []float64) Result {
		r := Result{Fleet: "f", Policy: pol, Seed: seed, HitRate: math.NaN()}
		for i, x := range ttfts {
			r.Requests = append(r.Requests, Scored{ID: fmt.Sprint("le-", i), Status: 200, TTFT: time.Duration(x * float64(time.Millisecond))})
		}
		xs := slices.Clone(ttfts)
		slices.Sort(xs)
		r.N, r.P99 = len(xs), time.Duration(stats.Quantile(xs, 0.99)*float64(time.Millisecond))
		return r
	}
	ramp := func(top float64) []float64 {
		var xs []float64
		for i := range 200 {
			xs = append(xs, 1+top*float64(i)/199)
		}
		return xs
	}
	var rs []Result
	for s := uint64(1); s <= 5; s++ {
		rs = append(rs, run(sched.RoundRobin, s, ramp(100)))
		// Least-outstanding: a lower P99 on three seeds of five (so the
		// lower median) but one very bad seed (so the higher pooled P99).
		lo := ramp(20)
		if s == 5 {
			lo = ramp(400)
		} else if s == 4 {
			lo = ramp(40)
		}
		rs = append(rs, run(sched.LeastOutstanding, s, lo))
		rs = append(rs, run(sched.PrefixAffinity, s, ramp(30)))
		rs = append(rs, run(sched.SLOPredictive, s, ramp(31)))
	}
	sums := Summarize(rs)
	if med := Check(sums, []Fleet{{Name: "f", CacheMatters: true}}, sched.SLOPredictive); med[0].Best != sched.LeastOutstanding {
		t.Fatalf("medians pick %s; the test needs them to pick least-outstanding", med[0].Best)
	}
	for _, s := range sums {
		if s.PooledP99 <= 0 {
			t.Errorf("%s: no pooled P99", s.Policy)
		}
	}
	vs := CheckPooled(rs, []Fleet{{Name: "f", CacheMatters: true}}, sched.SLOPredictive, Bootstrap{})
	if len(vs) != 1 {
		t.Fatalf("verdicts %+v", vs)
	}
	v := vs[0]
	if v.Best != sched.PrefixAffinity || v.Seeds != 5 {
		t.Fatalf("pooled best %s over %d seeds, want prefix-affinity over 5", v.Best, v.Seeds)
	}
	// Every seed the same, request by request nearly the same ratio: the
	// interval has next to no width.
	if want := 32.0 / 31; math.Abs(v.VsBest.Point-want) > 0.01 || v.VsBest.Hi-v.VsBest.Lo > 1e-3 || v.BestDecision != Met {
		t.Errorf("vs best %+v (%s), want %.3f met", v.VsBest, v.BestDecision, want)
	}
	if v.RRDecision != Met || v.Decision != Met {
		t.Errorf("vs round-robin %+v (%s), overall %s; want met", v.VsRR, v.RRDecision, v.Decision)
	}
	var buf bytes.Buffer
	FormatPooledVerdicts(&buf, vs, sched.SLOPredictive, Bootstrap{})
	if !strings.Contains(buf.String(), "| f ") || !strings.Contains(buf.String(), "90% CI") || !strings.Contains(buf.String(), " met ") {
		t.Errorf("table:\n%s", buf.String())
	}
}

// A failed scored request counts as unboundedly slow in the pooled P99s
// and their ratios: a policy that fails 5 % of its requests and serves the
// rest fast must not read faster than one that serves every request a
// little later. A request one run lacks is left out instead.
func TestCheckPooledCountsFailures(t *testing.T) {
	run := func(pol string, seed uint64, ttft float64, failEvery int) Result {
		r := Result{Fleet: "f", Policy: pol, Seed: seed, HitRate: math.NaN()}
		for i := range 200 {
			q := Scored{ID: fmt.Sprint("le-", i), Status: 200, TTFT: time.Duration((ttft + float64(i%7)) * float64(time.Millisecond))}
			if failEvery > 0 && i%failEvery == 0 {
				q.Status, q.TTFT = 502, 0
			}
			r.Requests = append(r.Requests, q)
		}
		r.N = len(r.Requests)
		return r
	}
	var rs []Result
	for s := uint64(1); s <= 3; s++ {
		rs = append(rs,
			run(sched.SLOPredictive, s, 5, 20), // fast, but 1 in 20 fails
			run(sched.PrefixAffinity, s, 30, 0),
			run(sched.LeastOutstanding, s, 40, 0),
			run(sched.RoundRobin, s, 90, 0))
	}
	vs := CheckPooled(rs, []Fleet{{Name: "f", CacheMatters: true}}, sched.SLOPredictive, Bootstrap{Resamples: 200})
	if len(vs) != 1 {
		t.Fatalf("verdicts %+v", vs)
	}
	v := vs[0]
	if v.Default != unbounded {
		t.Errorf("default pooled P99 %v, want unbounded (5 %% failed)", v.Default)
	}
	if !math.IsInf(v.VsBest.Point, 1) || v.BestDecision != NotMet || !math.IsInf(v.VsRR.Point, 1) || v.Decision != NotMet {
		t.Errorf("vs best %+v (%s), vs round-robin %+v, overall %s; want ∞, not met", v.VsBest, v.BestDecision, v.VsRR, v.Decision)
	}
	if v.Best != sched.PrefixAffinity || v.BestP99 <= 0 || v.BestP99 == unbounded {
		t.Errorf("best %s at %v, want prefix-affinity, finite", v.Best, v.BestP99)
	}
	var buf bytes.Buffer
	FormatPooledVerdicts(&buf, vs, sched.SLOPredictive, Bootstrap{Resamples: 200})
	if !strings.Contains(buf.String(), "∞") || strings.Contains(buf.String(), "Inf") || strings.Contains(buf.String(), "NaN") {
		t.Errorf("table:\n%s", buf.String())
	}

	// Failures under 1 %: the P99 stays finite, but a failure still
	// outranks every served request.
	a := bySeed{1: run(sched.SLOPredictive, 1, 5, 0).Requests}
	a[1][3].Status, a[1][3].TTFT = 0, 0
	if got := PooledQuantile(a.all(), 0.99); math.IsInf(got, 0) || got < 11 {
		t.Errorf("P99 with 1 failure in 200: %v ms, want finite and at the top of the served (≥ 11)", got)
	}
	if got := PooledQuantile(a.all(), 1); !math.IsInf(got, 1) {
		t.Errorf("maximum with a failure: %v, want +Inf", got)
	}
	// A request the other run lacks is NaN (left out), one it failed +Inf.
	b := bySeed{1: slices.Clone(a[1][:150])}
	as, bs := paired(a, b)
	if !math.IsInf(as[0][3], 1) || !math.IsNaN(bs[0][160]) || math.IsNaN(as[0][160]) {
		t.Errorf("paired: failed %v, lacking %v / %v", as[0][3], bs[0][160], as[0][160])
	}
}

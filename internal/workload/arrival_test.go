package workload

import (
	"math"
	"testing"
)

func TestArrivalsMeanAndDispersion(t *testing.T) {
	const n, rate = 40000, 50.0
	for _, tc := range []struct {
		kind   string
		burst  float64
		wantCV float64 // coefficient of variation of the gaps
	}{
		{"constant", 1, 0},
		{"poisson", 1, 1},
		{"gamma", 1, 1},
		{"gamma", 0.25, 2}, // CV = 1/sqrt(k)
		{"gamma", 4, 0.5},
	} {
		a, err := NewArrivals(tc.kind, rate, tc.burst, 7)
		if err != nil {
			t.Fatal(err)
		}
		var sum, sum2 float64
		for range n {
			g := a.Next().Seconds()
			sum += g
			sum2 += g * g
		}
		mean := sum / n
		cv := math.Sqrt(sum2/n-mean*mean) / mean
		if math.Abs(mean-1/rate)/(1/rate) > 0.03 {
			t.Errorf("%s/%v: mean gap %v, want %v", tc.kind, tc.burst, mean, 1/rate)
		}
		if math.Abs(cv-tc.wantCV) > 0.05*math.Max(tc.wantCV, 1) {
			t.Errorf("%s/%v: CV %v, want %v", tc.kind, tc.burst, cv, tc.wantCV)
		}
	}
}

func TestArrivalsRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		kind        string
		rate, burst float64
	}{{"poisson", 0, 1}, {"poisson", -1, 1}, {"gamma", 1, 0}, {"weibull", 1, 1}, {"poisson", math.Inf(1), 1}} {
		if _, err := NewArrivals(tc.kind, tc.rate, tc.burst, 1); err == nil {
			t.Errorf("%+v accepted", tc)
		}
	}
}

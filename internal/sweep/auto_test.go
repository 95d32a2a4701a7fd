package sweep

import (
	"slices"
	"testing"
)

func TestAutoRates(t *testing.T) {
	cases := []struct {
		sync, max float64
		k         int
		want      []float64
		ok        bool
	}{
		{2, 20, 8, []float64{4, 6, 8, 10, 12, 14, 16, 18}, true},
		{1, 2, 1, []float64{1.5}, true},
		{0.3, 9.3, 2, []float64{3.3, 6.3}, true},
		{3.14159, 100, 1, []float64{51.6}, true}, // three significant digits
		{0, 10, 3, nil, false},                   // nothing completed synchronously
		{5, 5, 3, nil, false},                    // no headroom
		{5, 4, 3, nil, false},
		{1, 10, 0, nil, false},
	}
	for _, c := range cases {
		got, err := AutoRates(c.sync, c.max, c.k)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("AutoRates(%v, %v, %d) = %v, %v; want %v ok %v", c.sync, c.max, c.k, got, err, c.want, c.ok)
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] || got[i] <= c.sync || got[i] >= c.max {
				t.Errorf("AutoRates(%v, %v, %d) = %v: not increasing strictly inside the range", c.sync, c.max, c.k, got)
			}
		}
	}
}

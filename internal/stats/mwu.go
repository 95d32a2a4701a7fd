package stats

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// MWU is a Mann–Whitney U test result.
type MWU struct {
	// U counts pairs (a, b) with b < a, ties counting one half; it is
	// NA·NB/2 on average when both samples come from one distribution.
	U float64
	// Z is the normal approximation with tie and continuity correction.
	Z float64
	// PValue is two-sided.
	PValue float64
}

// MannWhitney tests whether a and b come from the same distribution
// against a shift either way. It uses the normal approximation, which is
// accurate from about 10 values per sample; with fewer it is only
// indicative. The inputs are not modified.
func MannWhitney(a, b []float64) MWU {
	sa, sb := slices.Clone(a), slices.Clone(b)
	slices.Sort(sa)
	slices.Sort(sb)
	return mannWhitneySorted(sa, sb)
}

// mannWhitneySorted ranks by merging the two sorted samples: O(n) after
// the sorts the caller already did.
func mannWhitneySorted(a, b []float64) MWU {
	na, nb := len(a), len(b)
	if na == 0 || nb == 0 {
		return MWU{U: math.NaN(), Z: math.NaN(), PValue: math.NaN()}
	}
	// Walk tie groups in ascending order; a group holding ta values of a
	// and tb of b contributes ta·(b values strictly below) + ta·tb/2 to U.
	u, tieTerm := 0.0, 0.0
	i, j := 0, 0
	for i < na || j < nb {
		var v float64
		switch {
		case i == na:
			v = b[j]
		case j == nb:
			v = a[i]
		default:
			v = math.Min(a[i], b[j])
		}
		below := float64(j)
		ta, tb := 0, 0
		for i < na && a[i] == v {
			i++
			ta++
		}
		for j < nb && b[j] == v {
			j++
			tb++
		}
		u += float64(ta)*below + float64(ta)*float64(tb)/2
		t := float64(ta + tb)
		tieTerm += t*t*t - t
	}
	fa, fb := float64(na), float64(nb)
	n := fa + fb
	mean := fa * fb / 2
	variance := fa * fb / 12 * ((n + 1) - tieTerm/(n*(n-1)))
	if variance <= 0 {
		// Every value equal: no evidence of any difference.
		return MWU{U: u, Z: 0, PValue: 1}
	}
	d := u - mean
	// Continuity correction towards the mean.
	switch {
	case d > 0.5:
		d -= 0.5
	case d < -0.5:
		d += 0.5
	default:
		d = 0
	}
	z := d / math.Sqrt(variance)
	p := 2 * distuv.UnitNormal.Survival(math.Abs(z))
	return MWU{U: u, Z: z, PValue: math.Min(1, p)}
}

package liveeval

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// TestCompareSuites: rounds pair one to one and seeds within them; a
// build twice as fast on every request reads 0.50 with an interval of
// 0.50, a suite compared with itself 1.00, and a (fleet, policy) that
// only one side ran is left out.
func TestCompareSuites(t *testing.T) {
	run := func(policy string, seed uint64, scale float64) Result {
		r := Result{Fleet: "two", Policy: policy, Seed: seed}
		for i := range 200 {
			d := time.Duration(scale * float64(time.Millisecond) * float64(10+i%50+int(seed)))
			r.Requests = append(r.Requests, Scored{ID: "le-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), TTFT: d, Status: 200})
		}
		return r
	}
	round := func(scale float64, policies ...string) []Result {
		var rs []Result
		for _, seed := range []uint64{1, 2} {
			for _, p := range policies {
				rs = append(rs, run(p, seed, scale))
			}
		}
		return rs
	}
	before := [][]Result{round(1, "prefix-affinity"), round(1, "prefix-affinity")}
	after := [][]Result{round(0.5, "prefix-affinity", "round-robin"), round(0.5, "prefix-affinity", "round-robin")}
	cs := CompareSuites(before, after, Bootstrap{Resamples: 200})
	if len(cs) != 1 || cs[0].Policy != "prefix-affinity" || cs[0].Pairs != 4 {
		t.Fatalf("comparisons %+v, want prefix-affinity alone with 4 pairs", cs)
	}
	c := cs[0]
	if math.Abs(c.Ratio.Point-0.5) > 1e-9 || math.Abs(c.Ratio.Lo-0.5) > 1e-9 || math.Abs(c.Ratio.Hi-0.5) > 1e-9 {
		t.Errorf("twice as fast: ratio %+v, want 0.5 [0.5–0.5]", c.Ratio)
	}
	if math.Abs(ms(c.Before)-2*ms(c.After)) > 0.01 || math.Abs(ms(c.BeforeMean)-2*ms(c.AfterMean)) > 0.01 {
		t.Errorf("pooled P99 %v → %v, mean %v → %v: want halved", c.Before, c.After, c.BeforeMean, c.AfterMean)
	}
	self := CompareSuites(before, before, Bootstrap{Resamples: 200})
	if len(self) != 1 || self[0].Ratio.Point != 1 || self[0].Ratio.Lo != 1 || self[0].Ratio.Hi != 1 {
		t.Errorf("a suite against itself: %+v", self)
	}
	var b bytes.Buffer
	FormatComparison(&b, cs, Bootstrap{})
	if !strings.Contains(b.String(), "0.50 [0.50–0.50]") || !strings.Contains(b.String(), "after ÷ before [90% CI]") {
		t.Errorf("table:\n%s", b.String())
	}
}

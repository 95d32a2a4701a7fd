package liveeval

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// TestEPPAgainstGateway is issue 19's comparison, short, for CI: the
// Endpoint Picker behind the Envoy stand-in (package dataplane) and the
// gateway, both running the default policy, on the two fleet (two
// stand-ins, one 2× faster, caches smaller than the working set), same
// seeds and request sequences, with the gateway's round-robin for
// reference.
//
// The 5% target (mean, P99 and SLO attainment within 5% of the gateway's)
// is logged with the figures, not asserted: on a shared 2-core machine the
// P99 of 250 requests moves by more than that between two runs of the
// same gateway, and the picker's path (the data plane's extra HTTP hop and
// the ext_proc messages, in the same process) costs it more under CPU
// contention (four 5-seed suites on a loaded machine: the client-side
// mean ratio on this fleet ranged 1.0–1.9; docs/routing-evaluation.md,
// "Endpoint Picker against the gateway", has the quiet-machine suites and
// the backend-side view). What is asserted holds with margin and fails
// when the picker routes badly or the data path stalls, medians over the
// seeds: the picker keeps prompts where they are cached (its cache hit
// rate within 10 points of the gateway's, and 15 points over
// round-robin's, which a picker routing without the prefix gets: about
// 54% against 74–83%), its mean TTFT is within 2.5× the gateway's, and no
// request fails.
func TestEPPAgainstGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs take seconds")
	}
	var fleet Fleet
	for _, f := range Fleets() {
		if f.Name == "two" {
			fleet = f
		}
	}
	if fleet.Name == "" {
		t.Fatalf("suite lacks fleet two: %v", FleetNames())
	}
	fleet.Workload.Requests = 250
	viaEPP := EPPPrefix + sched.SLOPredictive
	pols := []string{sched.SLOPredictive, viaEPP, sched.RoundRobin}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := Run(ctx, Options{Fleets: []Fleet{fleet}, Policies: pols, Seeds: []uint64{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.N != 250 || r.Failed > 0 || r.P50 > r.P95 || r.P95 > r.P99 || math.IsNaN(r.HitRate) {
			t.Errorf("inconsistent run %+v", r)
		}
	}
	sums := Summarize(rs)
	cs := CompareEPP(sums)
	var buf bytes.Buffer
	Format(&buf, sums)
	buf.WriteString("\n")
	FormatEPP(&buf, cs)
	t.Logf("\n%s", buf.String())
	if len(cs) != 1 {
		t.Fatalf("%d comparisons, want 1", len(cs))
	}
	c := cs[0]
	t.Logf("issue 19's target (mean, P99, attainment within 5%% of the gateway's) met: %v (mean ×%.2f, P99 ×%.2f, attainment ×%.3f, cache hit %+.1f points)",
		c.Within, c.MeanRatio, c.P99Ratio, c.AttainRatio, 100*c.HitDiff)
	t.Logf("backend-side (the stand-ins' own TTFT, routing without the path): met: %v (mean ×%.2f, P99 ×%.2f, attainment ×%.3f)",
		c.BackendWithin, c.BackendMeanRatio, c.BackendP99Ratio, c.BackendAttainRatio)
	var rr Summary
	for _, s := range sums {
		if s.Policy == sched.RoundRobin {
			rr = s
		}
	}
	if c.HitDiff < -0.10 {
		t.Errorf("picker's cache hit rate %.0f%%, the gateway's %.0f%%: prompts are not kept where they are cached", 100*c.EPP.HitRate, 100*c.Gateway.HitRate)
	}
	if c.EPP.HitRate < rr.HitRate+0.15 {
		t.Errorf("picker's cache hit rate %.0f%%, round-robin's %.0f%%: the picker does not route by prefix", 100*c.EPP.HitRate, 100*rr.HitRate)
	}
	if c.MeanRatio > 2.5 {
		t.Errorf("picker's mean TTFT %v is over 2.5× the gateway's %v", c.EPP.Mean, c.Gateway.Mean)
	}
}

func TestCheckEPPPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		ok     bool
	}{
		{sched.SLOPredictive, true},
		{EPPPrefix + sched.SLOPredictive, true},
		{EPPPrefix + sched.RoundRobin, true},
		{sched.SLOPredictive + "+reject", true}, // the gateway's to judge
		{EPPPrefix + sched.SLOPredictive + "+reject", false},
		{EPPPrefix + sched.SLOPredictive + "+" + sched.PredictorSwitching, false},
	} {
		if err := CheckEPPPolicy(c.policy); (err == nil) != c.ok {
			t.Errorf("%q: error %v, want ok %v", c.policy, err, c.ok)
		}
	}
}

func TestEndpointAddr(t *testing.T) {
	for _, c := range []struct {
		url, want string
		ok        bool
	}{
		{"http://127.0.0.1:8000", "127.0.0.1:8000", true},
		{"http://[::1]:9000", "[::1]:9000", true},
		{"http://localhost:8000/", "", true}, // resolved: any loopback address
		{"https://127.0.0.1:8000", "", false},
		{"http://127.0.0.1", "", false},
		{"::nope", "", false},
	} {
		got, err := endpointAddr(context.Background(), c.url)
		if (err == nil) != c.ok || (c.want != "" && got != c.want) {
			t.Errorf("%q: %q, %v; want %q (ok %v)", c.url, got, err, c.want, c.ok)
		}
	}
}

func TestCompareEPP(t *testing.T) {
	ms := time.Millisecond
	sums := []Summary{
		{Fleet: "f", Policy: sched.SLOPredictive, Mean: 10 * ms, P99: 40 * ms, Attainment: 0.90, HitRate: 0.80},
		{Fleet: "f", Policy: EPPPrefix + sched.SLOPredictive, Mean: 10400 * time.Microsecond, P99: 41 * ms, Attainment: 0.87, HitRate: 0.78},
		{Fleet: "g", Policy: sched.SLOPredictive, Mean: 10 * ms, P99: 40 * ms, Attainment: 0.90, HitRate: 0.80},
		{Fleet: "g", Policy: EPPPrefix + sched.SLOPredictive, Mean: 11 * ms, P99: 39 * ms, Attainment: 0.95, HitRate: 0.80},
		{Fleet: "h", Policy: EPPPrefix + sched.RoundRobin}, // no gateway run to compare with
	}
	cs := CompareEPP(sums)
	if len(cs) != 2 {
		t.Fatalf("%d comparisons, want 2: %+v", len(cs), cs)
	}
	if c := cs[0]; !c.Within || math.Abs(c.MeanRatio-1.04) > 1e-9 || math.Abs(c.HitDiff+0.02) > 1e-9 {
		t.Errorf("f: %+v; want within 5%% (mean ×1.04, attainment ×0.967)", c)
	}
	if c := cs[1]; c.Within || math.Abs(c.MeanRatio-1.1) > 1e-9 {
		t.Errorf("g: %+v; want a mean ×1.10 outside 5%%", c)
	}
	var buf bytes.Buffer
	FormatEPP(&buf, cs)
	if !bytes.Contains(buf.Bytes(), []byte("**no**")) || !bytes.Contains(buf.Bytes(), []byte("| f ")) {
		t.Errorf("table:\n%s", buf.String())
	}
}

package liveeval

import (
	"bytes"
	"context"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
)

// TestAdmissionOverload is issue 17's item 4, short: the overload fleet
// driven well past every policy's capacity, round-robin admitting
// everything beside the default with admission reject and degrade, one
// seed. Asserted, with margin for a loaded machine (two runs of 5 seeds
// at load averages of 5–7 gave round-robin 3–11% within the SLO; reject
// 90.6–100% of the admitted within it, 44–70% refused; degrade
// 92.8–100% of all; since the bound's reach and cold backends offered as
// room, 24 seeds of reject at load averages of 0.1–0.5 kept 98.5–100%
// of the admitted within it, refusing 31–57%; docs/routing-evaluation.md):
// round-robin keeps under 90% within the SLO; the default with reject
// keeps at least 85% of the requests it admits within the SLO, refusing
// some but under 75% of them, with a goodput of at least a third of the
// fleet's capacity (FleetRates); with degrade at least
// 90% of all requests, none refused. Issue 17's bar, 99% of admitted
// requests, is logged, not asserted: a stall of the machine running
// fleet, gateway and client at once delays every request in flight,
// which no prediction from the queue can foresee; admission's loop on
// the outcome (sched/admit_feedback.go) backs off after such misses,
// but the requests already queued miss, and one seed on a shared
// machine is too few outcomes to show a 1% rate either way.
func TestAdmissionOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs take seconds")
	}
	fleets := AdmissionFleets()
	pols := []string{sched.RoundRobin, sched.SLOPredictive + "+reject", sched.SLOPredictive + "+degrade"}
	rs, err := Run(context.Background(), Options{Fleets: fleets, Policies: pols, Seeds: []uint64{1}})
	if err != nil {
		t.Fatal(err)
	}
	sums := Summarize(rs)
	var buf bytes.Buffer
	FormatAdmission(&buf, sums)
	t.Logf("%s\n%s", fleets[0].About, buf.String())
	by := map[string]Result{}
	for _, r := range rs {
		by[r.Policy] = r
	}
	rr, rej, deg := by[pols[0]], by[pols[1]], by[pols[2]]
	if rr.Attainment >= 0.9 || rr.Rejected != 0 {
		t.Errorf("round-robin: attainment %.1f%%, %d rejected: the load is not past its capacity", 100*rr.Attainment, rr.Rejected)
	}
	_, capacity := FleetRates(fleets[0], fleets[0].Workload)
	if rej.Rejected == 0 || rej.Rejected >= rej.N*3/4 || rej.AdmittedAttainment < 0.85 || rej.Goodput < capacity/3 {
		t.Errorf("reject: %d of %d rejected, %.1f%% of admitted within the SLO, goodput %.1f req/s (capacity %.0f); want some but < 75%% rejected, ≥ 85%%, a third of the capacity",
			rej.Rejected, rej.N, 100*rej.AdmittedAttainment, rej.Goodput, capacity)
	}
	if deg.Rejected != 0 || deg.Degraded == 0 || deg.Attainment < 0.9 {
		t.Errorf("degrade: %d rejected, %d degraded, %.1f%% within the SLO; want none rejected, some degraded, ≥ 90%%", deg.Rejected, deg.Degraded, 100*deg.Attainment)
	}
	for _, r := range []Result{rej, deg} {
		t.Logf("%s: %.1f%% of admitted requests within the SLO (issue 17: ≥ 99%%), %.1f%% refused", r.Policy, 100*r.AdmittedAttainment, 100*float64(r.Rejected)/float64(r.N))
	}
}

func TestSplitPolicy(t *testing.T) {
	cases := []struct{ in, pol, adm, pred string }{
		{"round-robin", "round-robin", gateway.AdmitBestEffort, sched.PredictorDefault},
		{"slo-predictive+reject", "slo-predictive", gateway.AdmitReject, sched.PredictorDefault},
		{"slo-predictive+switching", "slo-predictive", gateway.AdmitBestEffort, sched.PredictorSwitching},
		{"slo-predictive+degrade+switching", "slo-predictive", gateway.AdmitDegrade, sched.PredictorSwitching},
	}
	for _, c := range cases {
		p, a, pr := SplitPolicy(c.in)
		if p != c.pol || a != c.adm || pr != c.pred {
			t.Errorf("SplitPolicy(%q) = %q, %q, %q; want %q, %q, %q", c.in, p, a, pr, c.pol, c.adm, c.pred)
		}
	}
}

// TestFleetRates: the capacity estimate follows the stand-ins' cost model
// — more slots, more capacity; caches that hold every prefix make
// round-robin as cheap per request as affinity — and the overload fleet
// is driven past both capacities.
func TestFleetRates(t *testing.T) {
	w := baseWorkload()
	one := Fleet{StandIns: []standin.Config{standinBase("a", 1024, 1)}}
	rr1, aff1 := FleetRates(one, w)
	if rr1 != aff1 {
		t.Errorf("a cache holding every prefix: round-robin %.1f, affinity %.1f req/s; want equal", rr1, aff1)
	}
	small := Fleet{StandIns: []standin.Config{standinBase("a", 96, 1)}}
	if rr, aff := FleetRates(small, w); rr >= aff {
		t.Errorf("a cache smaller than the working set: round-robin %.1f ≥ affinity %.1f req/s", rr, aff)
	}
	two := one
	two.StandIns = append(two.StandIns, standinBase("b", 1024, 1))
	if rr2, _ := FleetRates(two, w); rr2 < 1.99*rr1 || rr2 > 2.01*rr1 {
		t.Errorf("two backends: %.1f req/s, one: %.1f", rr2, rr1)
	}
	f := AdmissionFleets()[0]
	rr, aff := FleetRates(f, f.Workload)
	if f.Workload.Rate <= aff || aff <= rr {
		t.Errorf("overload rate %.0f req/s, capacities: round-robin %.0f, affinity %.0f", f.Workload.Rate, rr, aff)
	}
}

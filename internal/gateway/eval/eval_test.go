package eval

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// TestRoutingEvaluation checks the routing targets on the default
// heterogeneous fleet at 10, 20 and 30 req/s: at every rate the
// SLO-predictive policy holds ≥ 99% SLO attainment, cuts round-robin's P99
// TTFT to ≤ 1/3 and beats prefix affinity on P95; and it holds the SLO
// where round-robin clearly does not (≥ 5 points more attainment at
// round-robin's worst rate). Whether round-robin drops below 90% there
// depends on the simulator's calibration, so it is logged, not asserted;
// docs/routing-evaluation.md records it. Set TTFT_EVAL_FULL=1 for the full
// sweep (all policies, five rates; about 20 s).
func TestRoutingEvaluation(t *testing.T) {
	opt := DefaultOptions()
	opt.Rates = []float64{10, 20, 30}
	if os.Getenv("TTFT_EVAL_FULL") == "1" {
		opt.Rates = []float64{10, 20, 30, 40, 60}
	} else {
		opt.Policies = []string{sched.RoundRobin, sched.PrefixAffinity, sched.SLOPredictive}
	}
	rows, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	Format(&buf, rows, opt.SLO)
	t.Logf("\n%s", buf.String())
	at := func(pol string, rate float64) Row {
		for _, r := range rows {
			if r.Policy == pol && r.Rate == rate {
				return r
			}
		}
		t.Fatalf("no row for %s at %g", pol, rate)
		return Row{}
	}
	worst := opt.Rates[0]
	for _, rate := range opt.Rates {
		rr, pa, sp := at(sched.RoundRobin, rate), at(sched.PrefixAffinity, rate), at(sched.SLOPredictive, rate)
		if sp.Attainment < 0.99 {
			t.Errorf("%g req/s: slo-predictive attainment %.2f%% < 99%%", rate, 100*sp.Attainment)
		}
		if 3*sp.P99 > rr.P99 {
			t.Errorf("%g req/s: slo-predictive P99 %v is more than 1/3 of round-robin's %v", rate, sp.P99, rr.P99)
		}
		if sp.P95 >= pa.P95 {
			t.Errorf("%g req/s: slo-predictive P95 %v does not beat prefix-affinity's %v", rate, sp.P95, pa.P95)
		}
		if rr.Attainment < at(sched.RoundRobin, worst).Attainment {
			worst = rate
		}
	}
	rr, sp := at(sched.RoundRobin, worst), at(sched.SLOPredictive, worst)
	t.Logf("round-robin's worst rate %g req/s: attainment %.1f%% (target condition < 90%%: %v); slo-predictive %.1f%%",
		worst, 100*rr.Attainment, rr.Attainment < 0.90, 100*sp.Attainment)
	if sp.Attainment-rr.Attainment < 0.05 {
		t.Errorf("at %g req/s slo-predictive (%.1f%%) does not clearly beat round-robin (%.1f%%)", worst, 100*sp.Attainment, 100*rr.Attainment)
	}
	for _, r := range rows {
		if r.N != opt.Requests-opt.Requests/10 || r.Mean <= 0 || r.P50 > r.P95 || r.P95 > r.P99 {
			t.Errorf("inconsistent row %+v", r)
		}
	}
}

func TestRunValidates(t *testing.T) {
	opt := DefaultOptions()
	opt.Fleet[0].Config.GPU = "no-such-gpu"
	opt.Rates, opt.Requests = []float64{5}, 50
	if _, err := Run(context.Background(), opt); err == nil {
		t.Fatal("unknown GPU accepted")
	}
}

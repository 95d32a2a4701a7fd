package liveeval

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/record"
)

// TestScoreBackend: the backend-side figures are the stand-ins' records
// of the scored requests only, matched by id; attainment is over every
// scored request, one no stand-in recorded counting as a miss.
func TestScoreBackend(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Now()
	recs := []record.Record{
		{ID: "le-0", Warmup: true},
		{ID: "le-1"}, {ID: "le-2"}, {ID: "le-3"}, {ID: "le-4"},
	}
	tests := []struct {
		name     string
		served   []standin.Served
		slo      time.Duration
		wantN    int
		wantMean time.Duration
		wantP99  time.Duration
		attain   float64
	}{
		{"warm-up excluded", []standin.Served{
			{ID: "le-0", TTFT: 900 * ms}, {ID: "le-1", TTFT: 10 * ms}, {ID: "le-2", TTFT: 20 * ms},
			{ID: "le-3", TTFT: 30 * ms}, {ID: "le-4", TTFT: 40 * ms, Queued: 8 * ms},
		}, 25 * ms, 4, 25 * ms, 39700 * time.Microsecond, 0.5}, // P99 interpolated between 30 and 40 ms
		{"unrecorded and unknown requests", []standin.Served{
			{ID: "le-1", TTFT: 10 * ms}, {ID: "le-2", TTFT: 20 * ms}, {ID: "other", TTFT: 500 * ms}, {TTFT: 500 * ms},
		}, time.Second, 2, 15 * ms, 19900 * time.Microsecond, 0.5},
		{"a retried request judged by its first answer", []standin.Served{
			{ID: "le-1", TTFT: 300 * ms, Arrived: t0}, {ID: "le-1", TTFT: 10 * ms, Arrived: t0.Add(time.Millisecond)},
		}, time.Second, 1, 10 * ms, 10 * ms, 0.25},
		{"nothing recorded", nil, time.Second, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := score(bench.Result{Records: recs}, tt.slo)
			scoreBackend(&r, bench.Result{Records: recs}, tt.served, tt.slo)
			near := func(a, b time.Duration) bool { return a-b < time.Microsecond && b-a < time.Microsecond }
			if r.N != 4 || r.BackendN != tt.wantN || !near(r.BackendMean, tt.wantMean) || !near(r.BackendP99, tt.wantP99) || r.BackendAttainment != tt.attain {
				t.Errorf("N %d, backend N %d, mean %v, P99 %v, attainment %v; want 4, %d, %v, %v, %v",
					r.N, r.BackendN, r.BackendMean, r.BackendP99, r.BackendAttainment, tt.wantN, tt.wantMean, tt.wantP99, tt.attain)
			}
		})
	}
}

// TestHostLate: scored requests a stand-in served more than
// LateThreshold late against its own model count in HostLate (the
// warm-up's do not), and the tables name the runs that have some.
func TestHostLate(t *testing.T) {
	ms := time.Millisecond
	recs := []record.Record{{ID: "le-0", Warmup: true}, {ID: "le-1"}, {ID: "le-2"}, {ID: "le-3"}}
	served := []standin.Served{
		{ID: "le-0", TTFT: 90 * ms, Late: 80 * ms}, // warm-up
		{ID: "le-1", TTFT: 10 * ms, Late: 2 * ms},
		{ID: "le-2", TTFT: 70 * ms, Late: 60 * ms},
		{ID: "le-3", TTFT: 20 * ms, Late: LateThreshold},
	}
	r := score(bench.Result{Records: recs}, time.Second)
	r.Fleet, r.Policy, r.Seed = "f", sched.PrefixAffinity, 3
	scoreBackend(&r, bench.Result{Records: recs}, served, time.Second)
	if r.HostLate != 1 {
		t.Errorf("host late %d, want 1 (le-2; the warm-up and a request at the threshold do not count)", r.HostLate)
	}
	if q := r.Requests[1]; q.ID != "le-2" || q.BackendLate != 60*ms {
		t.Errorf("request %+v: want le-2 late 60 ms", q)
	}
	var buf bytes.Buffer
	FormatHostLate(&buf, []Result{{Fleet: "g", Policy: sched.RoundRobin, Seed: 1, N: 3}, r})
	if out := buf.String(); !strings.Contains(out, "- f, prefix-affinity, seed 3: 1 of 3 scored requests") || strings.Contains(out, "- g,") {
		t.Errorf("host-late list:\n%s", out)
	}
	buf.Reset()
	FormatHostLate(&buf, []Result{{Fleet: "g", N: 3}})
	if buf.Len() != 0 {
		t.Errorf("no late runs, yet: %q", buf.String())
	}
}

// TestBackendSideFigures runs a fleet whose stand-ins cost a known fixed
// time before the first token (no cache, no prefill, more slots than
// requests in flight: no queue) through the gateway and through the
// picker's data plane. Every scored request must be recorded by a
// stand-in, the backend-side TTFT must be that cost (plus a loaded
// machine's timer slack), and the client, which times through the front,
// must measure at least as much at the mean and the P99 (each request's
// client TTFT contains its backend one).
func TestBackendSideFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs take seconds")
	}
	const cost = 15 * time.Millisecond
	sb := func(name string) standin.Config {
		return standin.Config{Name: name, Slots: 8, Overhead: cost, DecodePerToken: time.Millisecond}
	}
	fleet := Fleet{Name: "fixed", StandIns: []standin.Config{sb("a"), sb("b")}, SLO: time.Second,
		Workload: Workload{Groups: 4, PrefixChars: 512, SuffixMin: 20, SuffixMax: 80, OutputTokens: 2,
			Warmup: 10, Requests: 60, Concurrency: 2}}
	pols := []string{sched.RoundRobin, EPPPrefix + sched.RoundRobin}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := Run(ctx, Options{Fleets: []Fleet{fleet}, Policies: pols, Seeds: []uint64{1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		t.Logf("%s: client mean %v P99 %v; backend mean %v P95 %v P99 %v queued %v attain %.3f (%d)",
			r.Policy, r.Mean, r.P99, r.BackendMean, r.BackendP95, r.BackendP99, r.BackendQueued, r.BackendAttainment, r.BackendN)
		if r.Failed > 0 || r.BackendN != r.N {
			t.Errorf("%s: %d of %d scored requests recorded by a stand-in (%d failed), want all", r.Policy, r.BackendN, r.N, r.Failed)
		}
		if r.BackendMean < cost || r.BackendMean > cost+10*time.Millisecond || r.BackendP95 < cost {
			t.Errorf("%s: backend-side mean %v, P95 %v; want the stand-ins' fixed %v (mean within 10 ms over)", r.Policy, r.BackendMean, r.BackendP95, cost)
		}
		// A stand-in stamps its first token after the write returns, and a
		// client scheduled first can read it before that stamp: under CPU
		// contention one request's client TTFT came out 43 µs under its
		// backend's. A millisecond of slack still catches a clock or a
		// pairing mistake (those are off by the request's whole TTFT).
		const stampSlack = time.Millisecond
		if r.Mean+stampSlack < r.BackendMean || r.P99+stampSlack < r.BackendP99 {
			t.Errorf("%s: client-side mean %v, P99 %v under the backend-side %v, %v", r.Policy, r.Mean, r.P99, r.BackendMean, r.BackendP99)
		}
		if r.BackendAttainment != 1 {
			t.Errorf("%s: backend-side attainment %v of a 1 s SLO, want 1", r.Policy, r.BackendAttainment)
		}
	}
	sums := Summarize(rs)
	cs := CompareEPP(sums)
	var buf bytes.Buffer
	FormatEPP(&buf, cs)
	if len(cs) != 1 || !sums[0].Backend || cs[0].BackendMeanRatio <= 0 || !strings.Contains(buf.String(), "backend mean ms gw / epp") {
		t.Errorf("comparison %+v:\n%s", cs, buf.String())
	}
}

// TestCompareEPPBackend: the backend-side view is judged apart from the
// client-side one, and only where both runs have it.
func TestCompareEPPBackend(t *testing.T) {
	ms := time.Millisecond
	gw := func(f string, backend bool) Summary {
		return Summary{Fleet: f, Policy: sched.SLOPredictive, Mean: 10 * ms, P99: 40 * ms, Attainment: 0.9, HitRate: 0.8,
			Backend: backend, BackendMean: 8 * ms, BackendP99: 36 * ms, BackendAttainment: 0.92}
	}
	epp := func(f string, backend bool, mean, p99 time.Duration, attain float64) Summary {
		return Summary{Fleet: f, Policy: EPPPrefix + sched.SLOPredictive, Mean: 12 * ms, P99: 48 * ms, Attainment: 0.9, HitRate: 0.8,
			Backend: backend, BackendMean: mean, BackendP99: p99, BackendAttainment: attain}
	}
	sums := []Summary{
		gw("path", true), epp("path", true, 8200*time.Microsecond, 37*ms, 0.91), // the path costs, routing alike
		gw("route", true), epp("route", true, 9*ms, 44*ms, 0.85), // routing worse too
		gw("sim", false), epp("sim", false, 0, 0, 0), // no stand-ins
	}
	cs := CompareEPP(sums)
	if len(cs) != 3 {
		t.Fatalf("%d comparisons, want 3", len(cs))
	}
	want := []struct{ within, backendWithin, hasBackend bool }{{false, true, true}, {false, false, true}, {false, false, false}}
	for i, w := range want {
		c := cs[i]
		if c.Within != w.within || c.BackendWithin != w.backendWithin || (c.BackendMeanRatio == c.BackendMeanRatio) != w.hasBackend {
			t.Errorf("%s: within %v, backend within %v, backend mean ratio %v; want %v, %v, backend figures %v",
				c.Fleet, c.Within, c.BackendWithin, c.BackendMeanRatio, w.within, w.backendWithin, w.hasBackend)
		}
	}
	m := MedianEPP(cs)
	if m.Pairs != 3 || m.BackendPairs != 2 || m.BackendWithin != 1 || m.Within != 0 || m.MeanRatio != 1.2 {
		t.Errorf("medians %+v", m)
	}
	var buf bytes.Buffer
	FormatEPP(&buf, cs)
	out := buf.String()
	if !strings.Contains(out, "| path  | slo-predictive | 8.0 / 8.2") || strings.Contains(out, "| sim   | slo-predictive | 0.0") ||
		!strings.Contains(out, "backend-side (2 pairs)") {
		t.Errorf("tables:\n%s", out)
	}
}

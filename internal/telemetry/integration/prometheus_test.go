package integration

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ttft-dev/ttft/deploy"
	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/telemetry/nativehist"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// TestPrometheusEndToEnd: a real Prometheus scrapes the simulator (vLLM
// names), the gateway and a live bench run's --metrics-addr endpoint while
// bench sends load through the gateway. Then TTFT quantiles read back
// through Prometheus's HTTP API must agree with what bench measured, every
// dashboard and rule expression must parse and return series, every
// shipped rule must evaluate healthily, and the server-side decomposition
// scraped from the simulator must add up.
//
// All of it twice: with Prometheus's defaults, and started with
// --enable-feature=native-histograms, which scrapes over protobuf and keeps
// only the native form of a histogram that has one (the classic _bucket,
// _count and _sum series the rules and dashboards read are then dropped).
// ttft's exporters are classic-only by default (package nativehist), so
// both must answer alike; a probe target with a native histogram shows the
// second server really ingests native histograms.
func TestPrometheusEndToEnd(t *testing.T) {
	promBin := testutil.Binary(t, "TTFT_PROMETHEUS", "prometheus", "apt-get install -y prometheus (.ci/install-prometheus.sh)")
	// The defaults are under test, whatever the environment says.
	t.Setenv(nativehist.Env, "")
	for _, mode := range []struct {
		name   string
		native bool
	}{{"classic", false}, {"native-histograms", true}} {
		t.Run(mode.name, func(t *testing.T) { prometheusEndToEnd(t, promBin, mode.native) })
	}
}

func prometheusEndToEnd(t *testing.T, promBin string, nativeFeature bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s := startSim(t, ctx)
	gw := startGateway(t, ctx, noop.NewTracerProvider(), "sim="+s.URL())
	bm := telemetry.NewBenchMetrics(prometheus.Labels{"target": gw})
	msrv, err := telemetry.ServeMetrics("127.0.0.1:0", bm.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer msrv.Shutdown(context.Background())

	// The probe: one histogram with a native form (as TTFT_NATIVE_HISTOGRAMS
	// gives ttft's own), observed before Prometheus starts.
	probeReg := prometheus.NewRegistry()
	probe := prometheus.NewHistogram(nativehist.With(prometheus.HistogramOpts{
		Name: "ttft_test_native_probe_seconds", Help: "Probe.", Buckets: []float64{0.1, 1},
	}, true))
	probeReg.MustRegister(probe)
	for _, v := range []float64{0.05, 0.5, 2} {
		probe.Observe(v)
	}
	psrv, err := telemetry.ServeMetrics("127.0.0.1:0", probeReg)
	if err != nil {
		t.Fatal(err)
	}
	defer psrv.Shutdown(context.Background())

	// Prometheus, configured like deploy/prometheus/prometheus.yml but with
	// 1 s intervals and this test's ports, loading the shipped rules.
	dir := t.TempDir()
	rules, err := os.ReadFile("../../../deploy/prometheus/ttft-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	// The shipped groups evaluate every 30 s; a test cannot wait that long.
	rules = []byte(strings.ReplaceAll(string(rules), "interval: 30s", "interval: 1s"))
	if err := os.WriteFile(filepath.Join(dir, "ttft-rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	hostOf := func(u string) string { return strings.TrimPrefix(u, "http://") }
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [ttft-rules.yml]
scrape_configs:
  - job_name: ttft-engines
    static_configs: [{targets: [%q]}]
  - job_name: ttft-gateway
    static_configs: [{targets: [%q]}]
  - job_name: ttft-bench
    static_configs: [{targets: [%q]}]
  - job_name: native-probe
    static_configs: [{targets: [%q]}]
`, hostOf(s.URL()), hostOf(gw), msrv.Addr(), psrv.Addr())
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var base string
	startRetrying(t, 60*time.Second, func() (*process, string) {
		promAddr := freeAddr(t)
		base = "http://" + promAddr
		args := []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
			"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + promAddr, "--log.level=warn"}
		if nativeFeature {
			args = append(args, "--enable-feature=native-histograms")
		}
		return startProcess(t, promBin, nil, args...), base + "/-/ready"
	})
	// Prometheus hands targets to its scrapers only every 5 s after start;
	// wait until every target has been scraped at least twice, so that
	// rate() over the load has samples on both sides.
	waitScraped(t, base, `count(count_over_time(up[1m]) >= 2)`, 4)

	// The mode is the one asked for: the probe's native form is stored only
	// with the feature on (then, on Prometheus 2.42, instead of its classic
	// series, the very loss ttft's classic-only defaults avoid).
	probeNative, err := promQuery(base, `histogram_count(ttft_test_native_probe_seconds)`)
	if err != nil {
		t.Fatal(err)
	}
	probeClassic, err := promQuery(base, `ttft_test_native_probe_seconds_count`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: %d native, %d classic _count series stored", len(probeNative.Result), len(probeClassic.Result))
	if got := len(probeNative.Result) == 1; got != nativeFeature {
		t.Fatalf("probe's native histogram stored: %v; want %v with --enable-feature=native-histograms %s", got, nativeFeature, map[bool]string{true: "on", false: "off"}[nativeFeature])
	}

	// Load: 80 requests through the gateway, the bench metrics observer and
	// the server-side scraper (pointed at the simulator) watching.
	scr, err := telemetry.StartScraper(ctx, s.URL()+"/metrics", time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	recs := runBench(t, ctx, gw, s.ModelName(), 80, 4, nil, bm, scr)
	dec := scr.Stop(ctx)
	t.Logf("decomposition:\n%s", strings.Join(dec.Lines(), "\n"))
	if dec.Engine != "vllm" || dec.ServerRequests != 80 || dec.ClientN != 80 {
		t.Errorf("decomposition saw engine %q, %v server / %d client requests; want vllm, 80, 80", dec.Engine, dec.ServerRequests, dec.ClientN)
	}
	if !(dec.Queue >= 0 && dec.Prefill > 0 && dec.Queue+dec.Prefill <= dec.ServerTTFT+1e-9 && dec.ServerTTFT <= dec.ClientTTFT) {
		t.Errorf("decomposition does not add up: queue %v + prefill %v ≤ server %v ≤ client %v", dec.Queue, dec.Prefill, dec.ServerTTFT, dec.ClientTTFT)
	}

	// Let Prometheus take a few scrapes after the last request.
	waitScraped(t, base, `sum(ttft_bench_requests_total)`, 80)
	waitScraped(t, base, `sum(vllm:time_to_first_token_seconds_count)`, 80)
	waitScraped(t, base, `sum(ttft_gateway_requests_total)`, 80)

	// None of ttft's own histograms has a native form by default.
	if r, err := promQuery(base, `histogram_count({__name__=~"vllm:.*|ttft_bench_.*|ttft_gateway_.*"})`); err != nil {
		t.Fatal(err)
	} else if len(r.Result) != 0 {
		t.Errorf("%d native histograms stored from ttft's exporters; they should be classic-only by default", len(r.Result))
	}

	// TTFT P95 read back through Prometheus, three ways, each checked by an
	// invariant that holds however noisy the machine is:
	//   bench: the same observations as bench's records, so the estimate lies
	//     in the bucket that holds the records' own nearest-rank P95;
	//   simulator: the same histogram the scraper read directly, so both
	//     estimates agree; and the server's TTFT is part of the client's, so
	//     it cannot exceed the bucket bound above the client's P95;
	//   gateway: its TTFT is part of the client's too, so at most the bound
	//     of its bucket holding the client's P95.
	clientP95 := quantileTTFT(recs, 0.95)
	p95 := func(name, q string) float64 {
		t.Helper()
		r, err := promQuery(base, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, ok := r.scalar()
		if !ok || math.IsNaN(v) {
			t.Fatalf("%s: no single value from %s: %+v", name, q, r)
		}
		t.Logf("p95 TTFT via Prometheus, %s: %.4f s (bench measured %.4f s)", name, v, clientP95)
		return v
	}
	// bench's series are born with the first observation (they carry the
	// model label), so rate() would miss what happened before the first
	// scrape; the cumulative buckets of this fresh registry hold the whole run.
	benchV := p95("bench", `histogram_quantile(0.95, sum(ttft_bench_time_to_first_token_seconds_bucket) by (le))`)
	if lo, hi := lowerBound(telemetry.TTFTBuckets, clientP95), upperBound(telemetry.TTFTBuckets, clientP95); benchV < lo || benchV > hi {
		t.Errorf("bench p95 via Prometheus %.4f s outside the bucket [%g, %g] holding bench's own p95 %.4f s", benchV, lo, hi, clientP95)
	}
	simV := p95("simulator (vLLM names)", `histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket[1m])) by (le))`)
	if simLes := bucketBounds(t, base, "vllm:time_to_first_token_seconds_bucket"); simV > upperBound(simLes, clientP95) {
		t.Errorf("server p95 %.4f s above the bucket bound %g over the client's p95 %.4f s", simV, upperBound(simLes, clientP95), clientP95)
	}
	if math.Abs(simV-dec.ServerTTFTP95) > 0.05*dec.ServerTTFTP95+1e-3 {
		t.Errorf("server p95 via Prometheus %.4f s, via direct scraping %.4f s: they read the same histogram", simV, dec.ServerTTFTP95)
	}
	gwV := p95("gateway", `histogram_quantile(0.95, sum(ttft_gateway_ttft_seconds_bucket) by (le))`) // born on first use too
	if gwLes := bucketBounds(t, base, "ttft_gateway_ttft_seconds_bucket"); gwV <= 0 || gwV > upperBound(gwLes, clientP95) {
		t.Errorf("gateway p95 %.4f s not in (0, %g] (client p95 %.4f s)", gwV, upperBound(gwLes, clientP95), clientP95)
	}

	// Every dashboard and rule expression parses; all but alert conditions
	// (empty = not firing) return series.
	exprs, err := deploy.Expressions()
	if err != nil {
		t.Fatal(err)
	}
	waitRulesEvaluated(t, base)
	for _, e := range exprs {
		q := deploy.Substitute(e.Expr, "1m")
		r, err := promQuery(base, q)
		if err != nil {
			t.Errorf("%s %s %q: %v", e.Source, e.Kind, e.Where, err)
			continue
		}
		if e.Kind != "alert" && len(r.Result) == 0 {
			t.Errorf("%s %s %q returned no series: %s", e.Source, e.Kind, e.Where, q)
		}
	}
}

// waitScraped waits until q's single value reaches want.
func waitScraped(t *testing.T, base, q string, want float64) {
	t.Helper()
	var last float64
	for range 120 {
		if r, err := promQuery(base, q); err == nil {
			if v, ok := r.scalar(); ok {
				last = v
				if v >= want {
					return
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s stayed at %v, want %v", q, last, want)
}

// waitRulesEvaluated waits until every rule group has been evaluated and
// checks that every rule is healthy (Prometheus ran it without error).
func waitRulesEvaluated(t *testing.T, base string) {
	t.Helper()
	type rulesResp struct {
		Data struct {
			Groups []struct {
				Name           string `json:"name"`
				LastEvaluation string `json:"lastEvaluation"`
				Rules          []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	var rr rulesResp
	for range 40 {
		rr = rulesResp{}
		resp, err := http.Get(base + "/api/v1/rules")
		if err == nil {
			err = decodeJSON(resp, &rr)
		}
		if err == nil && len(rr.Data.Groups) == 2 {
			all := true
			for _, g := range rr.Data.Groups {
				for _, r := range g.Rules {
					all = all && r.Health != "unknown"
				}
			}
			if all {
				break
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	n := 0
	for _, g := range rr.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s/%s health %q: %s", g.Name, r.Name, r.Health, r.LastError)
			}
		}
	}
	if n < 30 {
		t.Errorf("Prometheus loaded %d rules, want the 32 shipped", n)
	}
}

// bucketBounds lists a histogram's finite bucket bounds as Prometheus sees them.
func bucketBounds(t *testing.T, base, bucket string) []float64 {
	t.Helper()
	r, err := promQuery(base, "count by (le) ("+bucket+")")
	if err != nil {
		t.Fatal(err)
	}
	var les []float64
	for _, s := range r.Result {
		var f float64
		if _, err := fmt.Sscan(s.Metric["le"], &f); err == nil && !math.IsInf(f, 1) {
			les = append(les, f)
		}
	}
	return les
}

// lowerBound is the largest bound < x (or 0).
func lowerBound(les []float64, x float64) float64 {
	best := 0.0
	for _, le := range les {
		if le < x && le > best {
			best = le
		}
	}
	return best
}

// upperBound is the smallest bound ≥ x (or +Inf).
func upperBound(les []float64, x float64) float64 {
	best := math.Inf(1)
	for _, le := range les {
		if le >= x && le < best {
			best = le
		}
	}
	return best
}

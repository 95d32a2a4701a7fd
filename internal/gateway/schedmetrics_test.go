package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every plugin of the policy's scheduling profile has its duration series
// from the start, labelled by plugin type and kind.
func TestSchedulerPluginMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := Config{Policy: "cache-aware", Backends: []BackendConfig{{Name: "a", URL: "http://127.0.0.1:9", API: "openai"}}}
	g, err := New(cfg, Options{Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "ttft_gateway_scheduler_plugin_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["plugin"]] = l["kind"]
		}
	}
	want := map[string]string{
		"exclude-filter": "filter", "health-filter": "filter", "capacity-filter": "filter", "breaker-filter": "filter", "slo-demotion-filter": "filter",
		"prefix-scorer": "scorer", "max-score-picker": "picker",
	}
	if len(got) != len(want) {
		t.Fatalf("plugin duration series %v, want %v", got, want)
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("plugin %s: kind %q want %q", p, got[p], k)
		}
	}
}

package integration

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/telemetry"
)

// checkGenAIMetrics reads back, from the collector's Prometheus exporter at
// url, the GenAI metrics bench and the gateway pushed over OTLP/HTTP into
// the Jaeger v2 collector: every convention's histogram is there with its
// bucket boundaries, bench's operation count is the run's n requests and
// its output token sum n × outTokens, and the gateway timed those requests'
// first tokens.
func checkGenAIMetrics(t *testing.T, url string, n, outTokens int) {
	t.Helper()
	want := []struct {
		prefix string
		bounds []float64
	}{
		{"gen_ai_client_operation_duration", telemetry.BucketsOperationDuration()},
		{"gen_ai_client_token_usage", telemetry.BucketsTokenUsage()},
		{"gen_ai_server_request_duration", telemetry.BucketsOperationDuration()},
		{"gen_ai_server_time_to_first_token", telemetry.BucketsTimeToFirstToken()},
		{"gen_ai_server_time_per_output_token", telemetry.BucketsTimePerOutputToken()},
	}
	var fams map[string]*dto.MetricFamily
	find := func(prefix string) *dto.MetricFamily {
		for name, f := range fams {
			if strings.HasPrefix(name, prefix) && f.GetType() == dto.MetricType_HISTOGRAM {
				return f
			}
		}
		return nil
	}
	// The collector converts what it received on its own schedule: poll.
	for range 40 {
		fams = scrapeFamilies(t, url)
		all := true
		for _, w := range want {
			all = all && find(w.prefix) != nil
		}
		if all {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	names := []string{}
	for name := range fams {
		if strings.HasPrefix(name, "gen_ai") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	t.Logf("collector's Prometheus exporter holds %v", names)

	for _, w := range want {
		f := find(w.prefix)
		if f == nil {
			t.Errorf("%s: not received (have %v)", w.prefix, names)
			continue
		}
		for _, m := range f.GetMetric() {
			var got []float64
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) { // the exposition's own +Inf
					got = append(got, b.GetUpperBound())
				}
			}
			if !slices.Equal(got, w.bounds) {
				t.Errorf("%s: buckets %v, want the conventions' %v", f.GetName(), got, w.bounds)
			}
		}
	}
	if f := find("gen_ai_client_operation_duration"); f != nil {
		var count uint64
		for _, m := range f.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
			if label(m, "gen_ai_operation_name") != "chat" || label(m, "gen_ai_provider_name") != "openai" || label(m, "gen_ai_request_model") == "" {
				t.Errorf("%s series %v lacks the GenAI attributes", f.GetName(), m.GetLabel())
			}
		}
		if count != uint64(n) {
			t.Errorf("%s counts %d operations, want the run's %d", f.GetName(), count, n)
		}
	}
	if f := find("gen_ai_client_token_usage"); f != nil {
		sums := map[string]float64{}
		for _, m := range f.GetMetric() {
			sums[label(m, "gen_ai_token_type")] += m.GetHistogram().GetSampleSum()
		}
		if sums["output"] != float64(n*outTokens) || sums["input"] <= 0 {
			t.Errorf("%s sums %v, want output %d and some input", f.GetName(), sums, n*outTokens)
		}
	}
	if f := find("gen_ai_server_time_to_first_token"); f != nil {
		var count uint64
		for _, m := range f.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
		}
		// The gateway also served the untraced plain requests.
		if count < uint64(n) {
			t.Errorf("%s counts %d first tokens, want at least the run's %d", f.GetName(), count, n)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping the collector's exporter: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: HTTP %s", url, strconv.Itoa(resp.StatusCode))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

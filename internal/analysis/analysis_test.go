package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// fakeStore serves stored runs from a map.
type fakeStore map[string]StoredRun

func (f fakeStore) Run(_ context.Context, ref string) (StoredRun, error) {
	if r, ok := f[ref]; ok {
		return r, nil
	}
	return StoredRun{}, errors.New("no run " + ref)
}

func writeRunDir(t *testing.T, dir string, s record.Summary, m record.Manifest) string {
	t.Helper()
	s.Schema, m.Schema = record.SummarySchema, record.ManifestSchema
	if err := record.WriteJSON(filepath.Join(dir, "summary.json"), s); err != nil {
		t.Fatal(err)
	}
	if err := record.WriteJSON(filepath.Join(dir, "manifest.json"), m); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolveRun(t *testing.T) {
	dir := writeRunDir(t, filepath.Join(t.TempDir(), "r1"), record.Summary{TTFT: record.Metric{Count: 3, P50: 7}},
		record.Manifest{Model: "m", Labels: map[string]string{"name": "named"}})
	st := fakeStore{"abc123": {Name: "stored", Manifest: json.RawMessage(`{"model":"x","labels":{"gpu":"l4"}}`)}}
	r, err := ResolveRun(context.Background(), st, dir)
	if err != nil || r.Name != "named" || r.Model() != "m" || r.Dir != dir {
		t.Errorf("directory: %+v, %v", r, err)
	}
	r, err = ResolveRun(context.Background(), st, "abc123")
	if err != nil || r.Name != "stored" || r.Labels["gpu"] != "l4" || r.Model() != "x" {
		t.Errorf("stored run: %+v, %v", r, err)
	}
	if _, err := ResolveRun(context.Background(), st, "nope"); err == nil || err.Error() != "no run nope" {
		t.Errorf("unknown stored run: %v", err)
	}
	// A path is never looked up in the store, and no store is needed for one.
	if _, err := ResolveRun(context.Background(), nil, "missing/dir"); err == nil || !strings.Contains(err.Error(), "reading run missing/dir") {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := ResolveRun(context.Background(), nil, "latest"); err == nil {
		t.Error("a stored run without a store resolved")
	}
}

func TestStatisticCheckNamesTheOption(t *testing.T) {
	for _, tc := range []struct {
		q    Statistic
		want string
	}{
		{Statistic{"ttft", "p42"}, "stat"},
		{Statistic{"nope", "p50"}, "metric"},
		{Statistic{"nope", "p42"}, "stat"},
	} {
		var oe *OptionError
		if err := tc.q.Check(); !errors.As(err, &oe) || oe.Option != tc.want {
			t.Errorf("%+v: %v, want an error in %s", tc.q, err, tc.want)
		}
	}
	s := record.Summary{ITL: record.Metric{Count: 4, P99: 12}}
	if v, n, err := (Statistic{"ITL", "p99"}).Of(&s); v != 12 || n != 4 || err != nil {
		t.Errorf("ITL P99 = %v (%d), %v", v, n, err)
	}
}

// TestPricerAPITokens prices a hosted API run by the summary's best token
// totals: the tokenizer's output count when the server reported no usage.
func TestPricerAPITokens(t *testing.T) {
	pr, err := NewPricer("")
	if err != nil {
		t.Fatal(err)
	}
	ap, ok := pr.Prices.API("gpt-4o")
	if !ok {
		t.Skip("no gpt-4o price in the embedded list")
	}
	r := &Run{Dir: "r", Name: "r", Manifest: record.Manifest{Model: "gpt-4o"}, Labels: map[string]string{}, Summary: record.Summary{
		Requests:   record.Requests{Completed: 10},
		Throughput: record.Throughput{RequestsPerS: 1},
		Tokens:     record.Tokens{Prompt: 1000, OutputTokenizer: 300, OutputEvents: 350},
		TTFT:       record.Metric{Count: 10, P95: 100},
	}}
	p, err := pr.Point(r, Statistic{"ttft", "p95"})
	if err != nil {
		t.Fatal(err)
	}
	_, wantCost, _ := stats.APICost(ap.Input, ap.Output, 10, 1000, 300, 1)
	if math.Abs(p.Cost-wantCost) > 1e-9 || p.Latency != 100 {
		t.Errorf("cost %v, want %v; latency %v", p.Cost, wantCost, p.Latency)
	}
}

func TestParetoSVGIsTheReportChart(t *testing.T) {
	res := &ParetoResult{Metric: "ttft", Stat: "p99", SLOMs: 150, Points: []stats.ParetoPoint{
		{Name: "cheap", Cost: 5, Latency: 200}, {Name: "fast", Cost: 10, Latency: 100}, {Name: "worse", Cost: 12, Latency: 250},
	}}
	svg := res.SVG()
	for _, want := range []string{`id="chart-pareto"`, ">TTFT P99 (ms)<", ">SLO 150 ms<", ">cheap<", ">fast<", ">worse<", "stroke-dasharray"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %s", want)
		}
	}
}

func TestWriteJSONNullsNonFinite(t *testing.T) {
	var b bytes.Buffer
	v := struct {
		A float64    `json:"a"`
		B [2]float64 `json:"b"`
		C float64    `json:"c,omitempty"`
		D string     `json:"-"`
	}{math.NaN(), [2]float64{1, math.Inf(1)}, 0, "x"}
	if err := WriteJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(b.String()), ""); got != `{"a":null,"b":[1,null]}` {
		t.Errorf("got %s", got)
	}
}

func TestRDDOptionErrors(t *testing.T) {
	tab := &stats.Table{Name: "s.csv", Columns: []string{"ttft_ms", "retained"}, Data: [][]float64{{1, 2}, {0, 1}}}
	for _, tc := range []struct {
		req  RDDRequest
		want string
	}{
		{RDDRequest{Running: "x", Outcome: "retained"}, "running"},
		{RDDRequest{Running: "ttft_ms", Outcome: "y"}, "outcome"},
		{RDDRequest{Running: "ttft_ms", Outcome: "retained", Covariates: "age"}, "covariates"},
		{RDDRequest{Running: "ttft_ms", Outcome: "retained", Treatment: "d"}, "treatment"},
	} {
		var oe *OptionError
		if _, err := RDD(tab, tc.req); !errors.As(err, &oe) || oe.Option != tc.want {
			t.Errorf("%+v: %v, want an error in %s", tc.req, err, tc.want)
		}
	}
}

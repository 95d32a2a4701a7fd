package rundir

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestRedactArgs(t *testing.T) {
	got := RedactArgs([]string{"bench", "--api-key", "k1", "--api-key=k2", "-H", "Authorization: Bearer x", "--header=x-api-key: y", "-H", "X-Ok: 1"})
	b, _ := json.Marshal(got)
	for _, s := range []string{"k1", "k2", "Bearer x", "x-api-key: y"} {
		if strings.Contains(string(b), s) {
			t.Errorf("%s leaked: %s", s, b)
		}
	}
	if !strings.Contains(string(b), "X-Ok: 1") {
		t.Errorf("harmless header redacted: %s", b)
	}
}

func TestWriteCSV(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := []record.Record{
		{Index: 0, Sent: t0, Intended: t0, FirstToken: t0.Add(30 * time.Millisecond), End: t0.Add(100 * time.Millisecond), ITLMs: []float64{10, 30}, OutputTokensUsage: 3, Status: 200, FinishReason: "length"},
		{Index: 1, Sent: t0, Intended: t0, End: t0.Add(5 * time.Millisecond), Status: 503, ErrorClass: record.ErrHTTPStatus, Error: `HTTP 503: "busy, try later"`},
	}
	for i := range recs {
		recs[i].Finalize()
	}
	sum := record.Summary{TTFT: record.Metric{Count: 1, Mean: 30, P95: 30}}
	dir := t.TempDir()
	if err := WriteCSV(dir, &sum, recs); err != nil {
		t.Fatal(err)
	}
	read := func(name string) [][]string {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rows, err := csv.NewReader(f).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return rows
	}
	rows := read(RequestsCSV)
	col := func(name string) int { return slices.Index(rows[0], name) }
	if len(rows) != 3 || rows[1][col("ttft_ms")] != "30" || rows[1][col("itl_mean_ms")] != "20" || rows[1][col("itl_max_ms")] != "30" ||
		rows[1][col("output_tokens")] != "3" || rows[2][col("error")] != `HTTP 503: "busy, try later"` || rows[2][col("ttft_ms")] != "" {
		t.Errorf("requests.csv: %q", rows)
	}
	srows := read(SummaryCSV)
	if srows[1][0] != "ttft_ms" || srows[1][1] != "1" || srows[1][7] != "30" || srows[2][1] != "0" || srows[2][2] != "" {
		t.Errorf("summary.csv: %q", srows)
	}
}

package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/store"
)

// writeFakeRunDir writes a run directory of n requests with TTFT ≈ base ms.
func writeFakeRunDir(t *testing.T, dir string, n int, seed uint64, base float64, labels map[string]string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	start := time.Now().Add(-time.Hour).UTC()
	recs := make([]record.Record, n)
	for i := range recs {
		sent := start.Add(time.Duration(i) * 20 * time.Millisecond)
		ttft := base + rng.ExpFloat64()*base/8
		recs[i] = record.Record{Index: i, Source: "sim", Model: "m", Target: "sim://x", Turn: 1 + i%3,
			Intended: sent, Sent: sent, FirstToken: sent.Add(time.Duration(ttft * 1e6)), End: sent.Add(time.Duration((ttft + 50) * 1e6)),
			ITLMs: []float64{9 + rng.Float64(), 10, 11}, OutputEvents: 4}
		recs[i].Finalize()
	}
	sum := stats.Summarize(recs, stats.SummaryOptions{Source: "sim", Model: "m", Target: "sim://x", Seed: 1, NoCI: true})
	man := record.Manifest{Schema: record.ManifestSchema, Tool: "ttft", Command: "sim run", Source: "sim", Model: "m", Started: start, Labels: labels}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.WriteDir(dir, raw, &sum, recs); err != nil {
		t.Fatal(err)
	}
}

var idRE = regexp.MustCompile(`(?m)^([0-9a-z]{8})\t`)

func TestRunsCompareReportCLI(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "ttft.db")
	slow, fast := filepath.Join(tmp, "slow"), filepath.Join(tmp, "fast")
	writeFakeRunDir(t, slow, 400, 1, 100, map[string]string{"concurrency": "1"})
	writeFakeRunDir(t, fast, 400, 2, 60, map[string]string{"concurrency": "4"})

	code, out, errOut := runCLI(t, "runs", "import", slow, fast, "--db", db)
	if code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	ids := idRE.FindAllStringSubmatch(out, -1)
	if len(ids) != 2 {
		t.Fatalf("import output %q", out)
	}
	slowID, fastID := ids[0][1], ids[1][1]

	code, out, _ = runCLI(t, "runs", "list", "--db", db)
	if code != 0 || !strings.Contains(out, slowID) || !strings.Contains(out, fastID) || !strings.Contains(out, "concurrency=4") {
		t.Fatalf("list: %d %q", code, out)
	}
	code, out, _ = runCLI(t, "runs", "list", "--db", db, "--label", "concurrency=4", "--json")
	if code != 0 || !strings.Contains(out, fastID) || strings.Contains(out, slowID) {
		t.Fatalf("list --label --json: %q", out)
	}
	code, out, _ = runCLI(t, "runs", "show", "latest", "--db", db)
	if code != 0 || !strings.Contains(out, fastID) || !strings.Contains(out, "TTFT") {
		t.Fatalf("show latest: %d %q", code, out)
	}

	// compare: a stored run by prefix against a directory.
	code, out, errOut = runCLI(t, "compare", slowID[:5], fast, "--db", db)
	if code != 0 {
		t.Fatalf("compare: exit %d %s", code, errOut)
	}
	if !strings.Contains(out, "fast is faster than "+slowID+" at TTFT P95 by") || !strings.Contains(out, "mean TTFT ms") {
		t.Fatalf("compare output:\n%s", out)
	}

	// report: HTML + PNG from stored runs.
	html, pngs := filepath.Join(tmp, "r", "report.html"), filepath.Join(tmp, "png")
	code, out, errOut = runCLI(t, "report", slowID, fastID, "-o", html, "--png", pngs, "--db", db)
	if code != 0 {
		t.Fatalf("report: exit %d %s", code, errOut)
	}
	page, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(page), `<svg class="chart" id="chart-sweep"`) {
		t.Fatalf("report page: %v (sweep chart expected from concurrency labels)", err)
	}
	if m, _ := filepath.Glob(filepath.Join(pngs, "*.png")); len(m) < 5 {
		t.Fatalf("png files: %v", m)
	}

	// export → import round trip; rm; prune dry run.
	exp := filepath.Join(tmp, "exported")
	if code, _, errOut = runCLI(t, "runs", "export", fastID, exp, "--db", db); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	if code, _, errOut = runCLI(t, "runs", "export", fastID, exp, "--db", db); code != ExitUsage || !strings.Contains(errOut, "refusing to overwrite") {
		t.Fatalf("export over an existing run: %d %s", code, errOut)
	}
	if code, _, errOut = runCLI(t, "runs", "rm", fastID, "--db", db); code != 0 {
		t.Fatalf("rm: %s", errOut)
	}
	if code, _, errOut = runCLI(t, "runs", "show", fastID, "--db", db); code != ExitUsage || !strings.Contains(errOut, "no such run") {
		t.Fatalf("show after rm: %d %s", code, errOut)
	}
	code, out, _ = runCLI(t, "runs", "prune", "--dry-run", "--raw-after", "30m", "--db", db)
	if code != 0 || !strings.Contains(out, "would delete 0 runs, and the per-request rows of 1 more (400 rows)") {
		t.Fatalf("prune dry run: %q", out)
	}
}

func TestRunsCLIErrors(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "ttft.db")
	junk := filepath.Join(tmp, "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("not a database ", 400)), 0o644)
	bad := filepath.Join(tmp, "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "summary.json"), []byte(`{"schema":"someone.else/v1"}`), 0o644)
	good, empty := filepath.Join(tmp, "good"), filepath.Join(tmp, "empty")
	writeFakeRunDir(t, good, 20, 1, 50, nil)
	os.MkdirAll(empty, 0o755)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown run", []string{"runs", "show", "zzzzzz", "--db", db}, "no such run"},
		{"bad ref", []string{"compare", "no/such/dir", "latest", "--db", db}, "a RUN is a run ID"},
		{"empty store latest", []string{"report", "latest", "-o", filepath.Join(tmp, "x.html"), "--db", db}, "has no runs"},
		{"corrupt db", []string{"runs", "list", "--db", junk}, "not a ttft database"},
		{"foreign dir", []string{"runs", "import", bad, "--db", db}, "not a ttft file"},
		{"compare one run", []string{"compare", good, "--db", db}, "at least two runs"},
		{"not a run dir", []string{"compare", empty, good, "--db", db}, "is not a run directory"},
		{"report without output", []string{"report", "latest", "--db", db}, "say where to write"},
		{"bad age", []string{"runs", "prune", "--raw-after", "7 days", "--db", db}, "invalid age"},
		{"bad label", []string{"runs", "list", "--label", "x", "--db", db}, "KEY=VALUE"},
		{"rm latest", []string{"runs", "rm", "latest", "--db", db}, "explicit ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tt.args...)
			if code != ExitUsage || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, ExitUsage, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(junk); !strings.HasPrefix(string(b), "not a database") {
		t.Fatal("the corrupt file was modified")
	}
	_ = fmt.Sprint()
}

func TestRunParams(t *testing.T) {
	man := record.Manifest{Args: []string{"bench", "--concurrency", "8", "--prompt-tokens=1024", "--no-progress", "-n", "5", "--label", "x"},
		Flags: map[string]string{"max-num-seqs": "64"}}
	raw, _ := json.Marshal(man)
	got := runParams(raw, map[string]string{"concurrency": "16"})
	want := map[string]string{"concurrency": "16", "prompt_tokens": "1024", "max_num_seqs": "64", "label": "x"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["no_progress"]; ok {
		t.Errorf("boolean flag taken as a value: %v", got)
	}
}

func TestReportExpandsSweepDirectory(t *testing.T) {
	tmp := t.TempDir()
	sw := filepath.Join(tmp, "sweep")
	i := 0
	for _, c := range []int{1, 4} {
		for _, p := range []int{256, 1024} {
			writeFakeRunDir(t, filepath.Join(sw, fmt.Sprintf("point-%03d", i)), 60, uint64(i+1), float64(10+c*p/50),
				map[string]string{"concurrency": fmt.Sprint(c), "prompt_tokens": fmt.Sprint(p)})
			i++
		}
	}
	os.WriteFile(filepath.Join(sw, "sweep.json"), []byte("{}"), 0o644)
	html := filepath.Join(tmp, "sweep.html")
	code, out, errOut := runCLI(t, "report", sw, "-o", html, "--db", filepath.Join(tmp, "unused.db"))
	if code != 0 || !strings.Contains(out, "4 runs") {
		t.Fatalf("report of a sweep directory: %d %q %q", code, out, errOut)
	}
	page, _ := os.ReadFile(html)
	if !strings.Contains(string(page), `id="chart-heatmap"`) || !strings.Contains(string(page), `id="chart-sweep"`) {
		t.Fatal("sweep directory report lacks the heatmap or the sweep curve")
	}
	if !strings.Contains(string(page), "concurrency=4 prompt_tokens=1024") {
		t.Fatal("sweep points are not named by their varying parameters")
	}
	if _, err := os.Stat(filepath.Join(tmp, "unused.db")); err == nil {
		t.Fatal("a report of directories opened the database")
	}
}

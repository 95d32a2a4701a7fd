package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// slowServer streams a two-token chat answer whose first token comes after
// ttft, on a real loopback port, and reports the most requests it ever had
// in flight at once.
func slowServer(t *testing.T, ttft time.Duration) (url string, maxInFlight func() int64) {
	t.Helper()
	var cur, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case <-time.After(ttft):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, tok := range []string{"a", "b"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL, peak.Load
}

func writeScenario(t *testing.T, rate float64, ttftLimitMs int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "load.yaml")
	body := fmt.Sprintf(`name: load
prompt_tokens: 8
output_tokens: 2
arrival: {process: constant, rate: %g}
slo:
  - {metric: ttft, stat: p95, max: %d}
`, rate, ttftLimitMs)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A scenario's arrival process is its load: the default -c 8 must not cap
// it (it did, and the run passed at half the asked rate).
func TestScenarioLoadIsNotCappedByConcurrency(t *testing.T) {
	url, peak := slowServer(t, 400*time.Millisecond)
	// 40 req/s × 0.4 s ≈ 16 in flight; a closed loop of 8 reaches 8.
	sc := writeScenario(t, 40, 5000)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--target", url, "--model", "m", "--scenario", sc, "-n", "40",
		"--no-progress", "--no-store", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if p := peak(); p < 12 {
		t.Errorf("server saw at most %d requests in flight; the scenario's 40 req/s at 0.4 s needs ≈16 (capped by -c 8?)", p)
	}
	if !strings.Contains(stderr, "the scenario's 40 req/s constant") {
		t.Errorf("the load line does not describe the scenario's load:\n%s", stderr)
	}
	var sum record.Summary
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil || json.Unmarshal(data, &sum) != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if sum.TTFTBasis != record.BasisIntended || len(sum.SLO) != 1 || sum.SLO[0].Basis != record.BasisIntended {
		t.Errorf("basis %q, verdicts %+v; want TTFT judged from the intended send time", sum.TTFTBasis, sum.SLO)
	}
	// The cap is only the one the user sets.
	url2, peak2 := slowServer(t, 400*time.Millisecond)
	code, _, stderr = runCLI(t, "bench", "--target", url2, "--model", "m", "--scenario", sc, "-n", "20",
		"--max-concurrency", "3", "--no-progress", "--no-store", "--out", t.TempDir())
	if p := peak2(); code != 0 || p != 3 {
		t.Errorf("--max-concurrency 3: exit %d, server saw %d in flight\n%s", code, p, stderr)
	}
}

// In open loop the verdict judges TTFT from the intended send time: a
// client held back by --max-concurrency cannot hide the queue it built.
func TestOpenLoopVerdictUsesIntendedTime(t *testing.T) {
	url, _ := slowServer(t, 200*time.Millisecond)
	// 20 req/s into 2 slots of 0.2 s serves 10 req/s: by request 30 the
	// schedule is ≈1.5 s behind. TTFT from the send stays ≈200 ms < 600.
	sc := writeScenario(t, 20, 600)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--target", url, "--model", "m", "--scenario", sc, "-n", "30",
		"--max-concurrency", "2", "--no-progress", "--no-store", "--out", out)
	if code != ExitFail {
		t.Fatalf("exit %d, want %d (SLO not met from the intended send time)\n%s\n%s", code, ExitFail, stdout, stderr)
	}
	if !strings.Contains(stdout, "FAIL  ttft_p95") || !strings.Contains(stdout, "from the intended send time") {
		t.Errorf("verdict line does not fail or name its basis:\n%s", stdout)
	}
	var sum record.Summary
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil || json.Unmarshal(data, &sum) != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if sum.TTFT.P95 > 600 {
		t.Fatalf("TTFT from the send P95 %.0f ms: the test needs it under the 600 ms limit", sum.TTFT.P95)
	}
	if v := sum.SLO[0]; v.ValueMs != sum.TTFTIntended.P95 || v.Pass {
		t.Errorf("verdict %+v; want the TTFT-from-schedule P95 %.0f ms", v, sum.TTFTIntended.P95)
	}
	if sum.Goodput == nil || sum.Goodput.Attainment > 0.5 {
		t.Errorf("goodput %+v: requests late by seconds met the SLO", sum.Goodput)
	}

	// The same load in a closed loop judges TTFT from the send and says so.
	code, stdout, _ = runCLI(t, "bench", "--target", url, "--model", "m", "--scenario", sc, "-n", "10", "-c", "2",
		"--no-progress", "--no-store", "--out", t.TempDir())
	if code != 0 || !strings.Contains(stdout, "PASS  ttft_p95") || !strings.Contains(stdout, "from the send") {
		t.Errorf("closed loop: exit %d\n%s", code, stdout)
	}
}

// sim run sends a scenario's schedule as bench does: not capped at -c 8.
func TestSimRunScenarioLoadIsNotCapped(t *testing.T) {
	sc := writeScenario(t, 4000, 5000)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "sim", "run", "--scenario", sc, "-n", "400", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if p := peakOverlap(recs); p <= 8 {
		t.Errorf("at most %d requests in flight at 4,000 req/s; want more than the default -c 8", p)
	}
}

// peakOverlap is the most records whose [Sent, End) intervals overlap.
func peakOverlap(recs []record.Record) int {
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, r := range recs {
		evs = append(evs, ev{r.Sent, 1}, ev{r.End, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // ends before starts at the same instant
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.d
		peak = max(peak, cur)
	}
	return peak
}

// An impossible load says so instead of printing P95s of minutes as if
// they were a steady state.
func TestSimRunSaysWhenOverloaded(t *testing.T) {
	args := []string{"sim", "run", "--model", "llama-3-70b", "--gpu", "a100-80gb", "--tensor-parallel-size", "4",
		"-n", "300", "--prompt-tokens", "2048", "--max-tokens", "512", "--out", t.TempDir()}
	code, stdout, stderr := runCLI(t, append(args, "--rate", "8")...)
	if code != 0 || !strings.Contains(stdout, "OVERLOADED: throughput") {
		t.Errorf("8 req/s on one 70B TP4 A100 replica: exit %d, no overload warning\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, append(args, "--rate", "0.5")...)
	if code != 0 || strings.Contains(stdout, "OVERLOADED") {
		t.Errorf("0.5 req/s: exit %d, overload warning on a load it serves\n%s", code, stdout)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/testutil"
)

func runSimCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, args...) // a private HOME: results never land in a shared data directory
}

func TestSimRunWritesBenchFiles(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runSimCLI(t, "sim", "run", "--model", "llama-3-70b", "--gpu", "a100-80gb", "--tensor-parallel-size", "4",
		"--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--prompt-tokens", "256", "--max-tokens", "16", "--concurrency", "4", "--requests", "40", "--out", dir)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "ttft_ms") {
		t.Errorf("stdout lacks the summary table:\n%s", stdout)
	}
	recs, err := record.ReadJSONL(filepath.Join(dir, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 40 {
		t.Fatalf("%d records, want 40", len(recs))
	}
	for _, r := range recs {
		if r.Source != "sim" || !r.OK() || r.OutputTokens() != 16 || r.PromptTokens != 256 || r.TTFTMs <= 0 {
			t.Fatalf("bad record %+v", r)
		}
	}
	var sum record.Summary
	if err := record.ReadJSON(filepath.Join(dir, "summary.json"), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Source != "sim" || sum.Requests.Completed != 40 || sum.TTFT.P50 <= 0 {
		t.Errorf("summary %+v", sum.Requests)
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		t.Error(err)
	}
}

func TestSimRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "run", "--model", "nope-13b"}, "known models"},
		{[]string{"sim", "run", "--model", "llama-3-70b", "--gpu", "l4"}, "weights need"},
		{[]string{"sim", "run", "--model", "llama-3-70b", "--gpu", "h100", "--tensor-parallel-size", "3"}, "does not divide"},
		{[]string{"plan", "--model", "llama-3.1-8b"}, "give at least one SLO"},
		{[]string{"sim", "validate", "--draw", "2"}, "--draw applies to --loso"},
		{[]string{"sim", "validate", "--loso", "--draw", "-1"}, "is negative"},
	} {
		code, _, stderr := runSimCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestPlanFindsCheapest(t *testing.T) {
	code, stdout, stderr := runSimCLI(t, "plan", "--model", "llama-3.1-8b", "--gpu", "l4,h100-sxm", "--tensor-parallel-size", "1", "--fp8", "no",
		"--rate", "4", "--prompt-tokens", "512", "--max-tokens", "32", "--ttft-p95", "400", "--requests", "200")
	if code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	lines := strings.Split(stdout, "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[2], "*") {
		t.Fatalf("first candidate not marked as the pick:\n%s", stdout)
	}
}

// plan --replicas prints every candidate at the counts asked, and says
// which of them cannot keep up at all.
func TestPlanAtAskedReplicas(t *testing.T) {
	code, stdout, stderr := runSimCLI(t, "plan", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--tensor-parallel-size", "4", "--fp8", "no",
		"--rate", "8", "--prompt-tokens", "2048", "--max-tokens", "128", "--ttft-p95", "650", "--requests", "300", "--replicas", "1,4", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	var rows []sim.PlanRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 || len(rows[0].At) != 2 {
		t.Fatalf("%v\n%s", err, stdout)
	}
	one, four := rows[0].At[0], rows[0].At[1]
	if one.Replicas != 1 || four.Replicas != 4 || !one.Overloaded || one.Meets || four.Overloaded || !four.Meets || !(four.TTFTP95Ms < one.TTFTP95Ms) {
		t.Errorf("at 1 and 4 replicas: %+v %+v", one, four)
	}
	if code, _, stderr := runSimCLI(t, "plan", "--ttft-p95", "100", "--replicas", "0"); code != ExitUsage || !strings.Contains(stderr, "--replicas") {
		t.Errorf("--replicas 0: exit %d %s", code, stderr)
	}
}

func TestSimServeReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, Env{Args: []string{"sim", "serve", "--port", "0", "--replicas", "2", "--served-model-name", "tiny"}, Stdout: &out, Stderr: &errb})
	}()
	re := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/v1`)
	var urls [][]string
	for i := 0; i < 200 && len(urls) < 2; i++ {
		time.Sleep(20 * time.Millisecond)
		urls = re.FindAllStringSubmatch(out.String(), -1)
	}
	if len(urls) != 2 {
		cancel()
		t.Fatalf("did not see two replicas start: %s %s", out.String(), errb.String())
	}
	for _, u := range urls {
		resp, err := http.Get(u[1] + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Data []struct{ ID string } }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if len(m.Data) != 1 || m.Data[0].ID != "tiny" {
			t.Errorf("%s/v1/models = %+v", u[1], m)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("serve exited %d: %s", code, errb.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not stop on cancel")
	}
}

// TestBenchAgreesWithSimRun: ttft bench measuring the built-in simulator
// over loopback HTTP and ttft sim run on the virtual clock, same workload
// and load. Stated tolerance: throughput and mean ITL within 15 %, mean
// TTFT within 5 ms + 25 % (live requests drift out of lockstep, offline
// ones do not).
func TestBenchAgreesWithSimRun(t *testing.T) {
	live, off := t.TempDir(), t.TempDir()
	common := []string{"--requests", "40", "--concurrency", "4", "--prompt-tokens", "256", "--max-tokens", "32"}
	if code, _, stderr := runSimCLI(t, append([]string{"bench", "--out", live}, common...)...); code != ExitOK {
		t.Fatalf("bench exit %d: %s", code, stderr)
	}
	if code, _, stderr := runSimCLI(t, append([]string{"sim", "run", "--enable-prefix-caching", "--max-model-len", "32768", "--out", off}, common...)...); code != ExitOK {
		t.Fatalf("sim run exit %d: %s", code, stderr)
	}
	var a, b record.Summary
	if err := record.ReadJSON(filepath.Join(live, "summary.json"), &a); err != nil {
		t.Fatal(err)
	}
	if err := record.ReadJSON(filepath.Join(off, "summary.json"), &b); err != nil {
		t.Fatal(err)
	}
	within := func(name string, got, want, abs, rel float64) {
		t.Logf("%s: bench %.2f, sim run %.2f", name, got, want)
		if d := got - want; d > abs+rel*want || d < -abs-rel*want {
			t.Errorf("%s: bench %.2f vs sim run %.2f: outside %.0f + %.0f%%", name, got, want, abs, rel*100)
		}
	}
	within("requests/s", a.Throughput.RequestsPerS, b.Throughput.RequestsPerS, 0, 0.15)
	within("ITL mean ms", a.ITL.Mean, b.ITL.Mean, 0, 0.15)
	within("TTFT mean ms", a.TTFT.Mean, b.TTFT.Mean, 5, 0.25)
	if a.Tokens.OutputUsage != b.Tokens.OutputUsage || a.Tokens.PromptUsage != b.Tokens.PromptUsage {
		t.Errorf("token totals differ: bench %+v, sim %+v", a.Tokens, b.Tokens)
	}
}

// sim run --replicas N simulates a round-robin fleet: every replica serves
// its share, records name their replica, and the fleet keeps up with a load
// one replica cannot.
func TestSimRunReplicas(t *testing.T) {
	run := func(n string) ([]record.Record, string) {
		out := t.TempDir()
		code, stdout, stderr := runCLI(t, "sim", "run", "--model", "llama-3-70b", "--gpu", "a100-80gb", "--tensor-parallel-size", "4",
			"--rate", "8", "-n", "400", "--prompt-tokens", "2048", "--max-tokens", "256", "--replicas", n, "--out", out, "--no-store")
		if code != 0 {
			t.Fatalf("--replicas %s: exit %d\n%s\n%s", n, code, stdout, stderr)
		}
		recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
		if err != nil || len(recs) != 400 {
			t.Fatalf("--replicas %s: %d records, %v", n, len(recs), err)
		}
		return recs, stdout
	}
	_, out1 := run("1")
	four, out4 := run("4")
	byBackend := map[string]int{}
	seen := map[int]bool{}
	for _, r := range four {
		byBackend[r.Backend]++
		seen[r.Index] = true
	}
	if len(byBackend) != 4 || len(seen) != 400 {
		t.Errorf("4 replicas: records by backend %v, %d distinct indexes", byBackend, len(seen))
	}
	for b, n := range byBackend {
		if n != 100 {
			t.Errorf("replica %s served %d of 400, want 100 (round robin)", b, n)
		}
	}
	if !strings.Contains(out1, "OVERLOADED") || strings.Contains(out4, "OVERLOADED") {
		t.Errorf("one replica should be overloaded at 8 req/s and four not:\n%s\n%s", out1, out4)
	}
	if code, _, stderr := runCLI(t, "sim", "run", "--sessions", "4", "--replicas", "2", "--no-store", "--out", t.TempDir()); code != ExitUsage || !strings.Contains(stderr, "multi-turn") {
		t.Errorf("sessions on a fleet: exit %d %s", code, stderr)
	}
}

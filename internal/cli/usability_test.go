package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// A failed run says why: the first error of each class is printed, and a
// --model the server does not list is warned about before the run.
func TestFailedRunSaysWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"llama-3.1-8b"}]}`)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"The model llama-3.1-8bb does not exist."}}`)
	}))
	defer srv.Close()
	code, stdout, stderr := runCLI(t, "bench", "--target", srv.URL, "--model", "llama-3.1-8bb", "-n", "2", "--no-store", "--no-progress", "--out", t.TempDir(), "--no-probe")
	if code != ExitFail {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stdout, "first http_status: HTTP 404") || !strings.Contains(stdout, "does not exist") {
		t.Errorf("the error's message is not shown:\n%s", stdout)
	}
	if !strings.Contains(stderr, `--model "llama-3.1-8bb" is not among`) || !strings.Contains(stderr, "llama-3.1-8b") {
		t.Errorf("no warning about the unlisted model:\n%s", stderr)
	}
}

// A multi-turn workload without --requests runs all its turns; --requests 0
// without --duration on an endless workload is refused.
func TestRequestCountFollowsWorkload(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--sessions", "2", "--turns", "3", "--prompt-tokens", "16", "--max-tokens", "4", "-c", "2",
		"--no-store", "--no-progress", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 6 {
		t.Fatalf("%d records (%v), want 2 sessions × 3 turns", len(recs), err)
	}
	if code, _, stderr := runCLI(t, "bench", "-n", "0", "--no-store"); code != ExitUsage || !strings.Contains(stderr, "--duration") {
		t.Fatalf("-n 0 without --duration: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "bench", "--self-check", "--target", "http://127.0.0.1:1"); code != ExitUsage || !strings.Contains(stderr, "no --target") {
		t.Fatalf("--self-check with --target: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "bench", "--nope"); code != ExitUsage || !strings.HasPrefix(stderr, "ttft: bench: unknown flag") {
		t.Fatalf("unknown flag: exit %d, %q", code, stderr)
	}
}

func TestSimRunPrintsVerdicts(t *testing.T) {
	code, stdout, _ := runCLI(t, "sim", "run", "--scenario", "code", "-n", "20", "--gpu", "l4", "--max-model-len", "8192", "--out", t.TempDir())
	if code != ExitFail || !strings.Contains(stdout, "SLO verdicts (scenario code)") || !strings.Contains(stdout, "FAIL  ttft_p95") {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
}

func TestGatewayPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, stdout, stderr := runCLI(t, "gateway", "--backend", "http://127.0.0.1:1", "--listen", ln.Addr().String(), "--no-access-log")
	if code != ExitUsage || !strings.Contains(stderr, "address already in use") || strings.Contains(stdout+stderr, "gateway listening") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

func TestArgumentErrorsNameTheCommand(t *testing.T) {
	code, _, stderr := runCLI(t, "compare")
	if code != ExitUsage || !strings.HasPrefix(stderr, "ttft: compare: requires at least 1 arg") || !strings.Contains(stderr, "usage: ttft compare RUN") {
		t.Fatalf("exit %d, %q", code, stderr)
	}
}

func TestDatasetDropsAreReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sg.json")
	body := `[{"conversations":[{"from":"gpt","value":"x"}]},{"conversations":[{"from":"human","value":"hello there"},{"from":"gpt","value":"hi"}]}]`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "bench", "--dataset", path, "-n", "1", "--no-store", "--no-progress", "--out", t.TempDir())
	if code != 0 || !strings.Contains(stderr, "dropped 1 record(s)") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// A target that refuses the one-token check (a wrong --model, key or path)
// stops before the run, with the server's message and exit 2; one that is
// only busy (503, 429) is left to the run.
func TestWrongModelFailsFast(t *testing.T) {
	var chats atomic.Int64
	status := atomic.Int64{}
	status.Store(http.StatusNotFound)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"llama-3.1-8b"}]}`)
			return
		}
		chats.Add(1)
		w.WriteHeader(int(status.Load()))
		io.WriteString(w, `{"error":{"message":"The model gpt-5 does not exist."}}`)
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "--target", srv.URL, "--model", "gpt-5", "-n", "50", "--no-progress", "--out", out)
	if code != ExitUsage || !strings.Contains(stderr, "HTTP 404") || !strings.Contains(stderr, "The model gpt-5 does not exist.") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if n := chats.Load(); n != 1 {
		t.Errorf("the server saw %d requests; want only the check", n)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a run directory was made for a run that never ran: %v", err)
	}
	status.Store(http.StatusServiceUnavailable)
	chats.Store(0)
	code, stdout, _ = runCLI(t, "bench", "--target", srv.URL, "--model", "llama-3.1-8b", "-n", "3", "--no-progress", "--no-store", "--out", t.TempDir())
	if code != ExitFail || chats.Load() != 4 || !strings.Contains(stdout, "http_status 3") {
		t.Errorf("busy server: exit %d after %d requests; want the run to go on and record 3 failures\n%s", code, chats.Load(), stdout)
	}
}

// vLLM benchmark_serving's flag names work where they mean the same, and
// --request-rate inf is its "all at once, at most --max-concurrency".
func TestVLLMFlagNames(t *testing.T) {
	url, peak := slowServer(t, 50*time.Millisecond)
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--base-url", url, "--model", "m", "--num-prompts", "12", "--request-rate", "inf",
		"--max-concurrency", "3", "--random-input-len", "32", "--random-output-len", "2", "--no-progress", "--no-store", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 12 || recs[0].PromptTokens != 32 || recs[0].MaxTokens != 2 {
		t.Fatalf("%d records (%v), first %+v", len(recs), err, recs)
	}
	if p := peak(); p != 3 || !strings.Contains(stderr, "concurrency 3") {
		t.Errorf("--request-rate inf --max-concurrency 3: %d in flight\n%s", p, stderr)
	}
}

func TestVersionFlag(t *testing.T) {
	code, stdout, _ := runCLI(t, "--version")
	if code != 0 || !strings.HasPrefix(stdout, "ttft version ") {
		t.Fatalf("exit %d, %q", code, stdout)
	}
}

// A bench run has one ID: its directory's name is its ID in the database.
func TestOneRunID(t *testing.T) {
	out := filepath.Join(t.TempDir(), "20990101-000000-abc123")
	code, _, stderr := runCLI(t, "bench", "-n", "2", "--max-tokens", "4", "--no-progress", "--out", out, "--db", filepath.Join(t.TempDir(), "db"))
	var man record.Manifest
	data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(data, &man)
	}
	if code != 0 || err != nil || !strings.Contains(stderr, "stored as run "+man.RunID+"\n") {
		t.Fatalf("exit %d, manifest run_id %q (%v)\n%s", code, man.RunID, err, stderr)
	}
}

// Every description of a run states its load, and compare warns when two
// runs' loads differ.
func TestLoadIsDescribed(t *testing.T) {
	home := t.TempDir()
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := Main(context.Background(), Env{Args: args, Stdout: &out, Stderr: &out, Getenv: func(k string) string {
			if k == "HOME" {
				return home
			}
			return ""
		}})
		return code, out.String()
	}
	if code, out := run("bench", "-n", "4", "-c", "2", "--max-tokens", "8", "--no-progress", "--label", "gpu=h100"); code != 0 {
		t.Fatalf("bench: %d\n%s", code, out)
	}
	if code, out := run("bench", "-n", "4", "--rate", "40", "--max-tokens", "8", "--no-progress"); code != 0 {
		t.Fatalf("bench: %d\n%s", code, out)
	}
	code, out := run("runs", "list")
	if code != 0 || !strings.Contains(out, "closed loop, concurrency 2; 128-token prompts, ≤8 output tokens") ||
		!strings.Contains(out, "open loop, 40 req/s poisson; 128-token prompts, ≤8 output tokens") || !strings.Contains(out, "gpu=h100") {
		t.Fatalf("runs list:\n%s", out)
	}
	code, out = run("runs", "list", "--label", "concurrency=2")
	if code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("runs list --label concurrency=2 should find the closed-loop run only:\n%s", out)
	}
	code, out = run("runs", "show", "latest")
	if code != 0 || !strings.Contains(out, "load: open loop, 40 req/s poisson") {
		t.Errorf("runs show:\n%s", out)
	}
	var list []struct{ ID string }
	if _, js := run("runs", "list", "--json"); json.Unmarshal([]byte(js), &list) != nil || len(list) != 2 {
		t.Fatalf("runs list --json: %s", js)
	}
	code, out = run("compare", list[1].ID, list[0].ID)
	if !strings.Contains(out, "the loads differ") || !strings.Contains(out, "load of ") {
		t.Errorf("compare does not warn that the loads differ (exit %d):\n%s", code, out)
	}
}

// Ollama lists "name:latest" and answers to "name": no warning for it.
func TestOllamaLatestIsListed(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  bool
	}{
		{"tinyllm-tiny", true}, {"tinyllm-tiny:latest", true}, {"tinyllm", false}, {"tinyllm-tiny:q4", false},
	} {
		if got := listsModel([]string{"tinyllm-tiny:latest", "other"}, tc.model); got != tc.want {
			t.Errorf("listsModel(%q) = %v", tc.model, got)
		}
	}
}

// runs export --csv writes a run, stored or a directory, as two CSV files.
func TestRunsExportCSV(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	if code, stdout, stderr := runCLI(t, "bench", "-n", "5", "--max-tokens", "4", "--no-progress", "--no-store", "--out", run); code != 0 {
		t.Fatalf("bench: %d\n%s\n%s", code, stdout, stderr)
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "runs", "export", run, out, "--csv")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "requests.csv"))
	if err != nil || strings.Count(string(data), "\n") != 6 || !strings.HasPrefix(string(data), "index,id,warmup") {
		t.Errorf("requests.csv (%v):\n%s", err, data)
	}
	if data, err := os.ReadFile(filepath.Join(out, "summary.csv")); err != nil || !strings.Contains(string(data), "\nttft_ms,5,") {
		t.Errorf("summary.csv (%v):\n%s", err, data)
	}
}

// --goodput (vLLM's objectives) puts goodput in the summary, the table and
// the vLLM result file without a scenario.
func TestGoodputFlag(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "-n", "8", "--max-tokens", "8", "--no-progress", "--no-store", "--out", out,
		"--goodput", "ttft:10000,e2el:60000", "--format", "vllm")
	if code != 0 || !strings.Contains(stdout, "goodput") || !strings.Contains(stdout, "attainment 100.0%") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var sum record.Summary
	if b, err := os.ReadFile(filepath.Join(out, "summary.json")); err != nil || json.Unmarshal(b, &sum) != nil || sum.Goodput == nil || sum.Goodput.Attainment != 1 || len(sum.SLO) != 0 {
		t.Fatalf("summary goodput %+v (%v)", sum.Goodput, err)
	}
	var v map[string]any
	if b, err := os.ReadFile(filepath.Join(out, "summary.vllm.json")); err != nil || json.Unmarshal(b, &v) != nil || v["request_goodput"] == nil {
		t.Errorf("vllm request_goodput: %v", v["request_goodput"])
	}
	// An impossible objective: nothing meets it.
	code, stdout, _ = runCLI(t, "bench", "-n", "4", "--max-tokens", "4", "--no-progress", "--no-store", "--out", t.TempDir(), "--goodput", "ttft:0.001")
	if code != 0 || !strings.Contains(stdout, "attainment 0.0%") {
		t.Errorf("ttft:0.001: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := runCLI(t, "bench", "--goodput", "latency:5"); code != ExitUsage || !strings.Contains(stderr, "ttft, tpot or e2el") {
		t.Errorf("bad objective: exit %d %s", code, stderr)
	}
}

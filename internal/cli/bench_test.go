package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/record"
)

// runCLI runs ttft in-process with a private HOME and returns its exit code
// and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	home := t.TempDir()
	env := map[string]string{"HOME": home}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] }})
	return code, stdout.String(), stderr.String()
}

func TestBenchDefaultTargetWritesResults(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "-n", "12", "-c", "4", "--max-tokens", "16", "--out", out, "--format", "vllm", "--no-progress")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "TTFT") || !strings.Contains(stdout, "built-in simulator") {
		t.Fatalf("summary table missing:\n%s", stdout)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 12 {
		t.Fatalf("requests.jsonl: %d records, %v", len(recs), err)
	}
	if runtime.GOOS == "linux" {
		kernel := 0
		for _, r := range recs {
			if r.ArrivalClock == record.ClockKernel {
				kernel++
			}
		}
		// The host switches receive stamping on lazily for its first
		// socket, so the very first events may go unstamped.
		if kernel < 8 {
			t.Errorf("%d of 12 records timed by kernel receive timestamps, want nearly all on Linux", kernel)
		}
	}
	var sum map[string]any
	if err := record.ReadJSON(filepath.Join(out, "summary.json"), &sum); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"} {
		m, ok := sum[k].(map[string]any)
		if !ok {
			t.Fatalf("summary.json lacks %s", k)
		}
		for _, s := range []string{"mean", "std", "min", "max", "p50", "p90", "p95", "p99"} {
			if _, ok := m[s]; !ok {
				t.Errorf("summary.json %s lacks %s", k, s)
			}
		}
	}
	req := sum["requests"].(map[string]any)
	if req["completed"].(float64) != 12 || req["failed"].(float64) != 0 {
		t.Errorf("requests %v", req)
	}
	if ttft := sum["ttft_ms"].(map[string]any)["mean"].(float64); ttft <= 0 {
		t.Errorf("mean TTFT %v", ttft)
	}
	var v map[string]any
	if err := record.ReadJSON(filepath.Join(out, "summary.vllm.json"), &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "mean_tpot_ms", "completed", "request_throughput"} {
		if _, ok := v[k]; !ok {
			t.Errorf("vllm summary lacks %s", k)
		}
	}
	var man record.Manifest
	if err := record.ReadJSON(filepath.Join(out, "manifest.json"), &man); err != nil || man.Model == "" || man.Ended.IsZero() {
		t.Fatalf("manifest %+v %v", man, err)
	}
}

// TestBenchReadClock: --read-clock times events at the read, and the
// records say so by carrying no arrival clock.
func TestBenchReadClock(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "-n", "4", "-c", "2", "--max-tokens", "4", "--out", out, "--no-progress", "--read-clock")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 4 {
		t.Fatalf("requests.jsonl: %d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if r.ArrivalClock != "" || r.FirstTokenReadDelayMs != 0 {
			t.Errorf("record %d: arrival clock %q, read delay %v with --read-clock", r.Index, r.ArrivalClock, r.FirstTokenReadDelayMs)
		}
	}
	if strings.Contains(stdout, "client read delay") {
		t.Errorf("the table shows a client read delay without kernel stamps:\n%s", stdout)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--concurrency", "0"}, "--concurrency"},
		{[]string{"bench", "--api", "grpc"}, "unknown API"},
		{[]string{"bench", "--bogus"}, "unknown flag"},
		{[]string{"bench", "--target", "localhost:8000"}, "http://"},
		{[]string{"bench", "--target", dead, "--model", "m"}, "cannot reach"},
		{[]string{"bench", "--target", dead}, "cannot reach"},
		{[]string{"bench", "--header", "novalue"}, "--header"},
		{[]string{"bench", "--arrival", "weibull", "--rate", "1"}, "--arrival"},
		// Combinations that were silently ignored.
		{[]string{"bench", "--rate", "0"}, "--rate must be > 0"},
		{[]string{"bench", "--rate", "2", "-c", "4"}, "two different loads"},
		{[]string{"bench", "--rate", "2", "--ramp-up", "5s"}, "--ramp-up"},
		{[]string{"bench", "--arrival", "gamma"}, "need --rate"},
		{[]string{"bench", "--rate", "2", "--burstiness", "0.5"}, "--arrival gamma"},
		{[]string{"bench", "--max-concurrency", "4", "-n", "1"}, "--max-concurrency caps an open loop"},
		{[]string{"sim", "run", "--max-concurrency", "4", "-n", "1"}, "--max-concurrency caps an open loop"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, stderr, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
			t.Errorf("%v: want one line, got %q", tc.args, stderr)
		}
	}
}

func TestBenchModelDiscoveryErrorsAndSecrets(t *testing.T) {
	ts := bench.NewTimingServer(2*time.Millisecond, time.Millisecond, 4)
	var sawAuth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth.Store(r.Header.Get("Authorization"))
		ts.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out := t.TempDir()
	// Every request fails: exit 1 above --max-error-rate, all recorded.
	code, stdout, stderr := runCLI(t, "bench", "--target", srv.URL+"/v1/", "-n", "5", "--out", out, "--no-progress",
		"--api-key", "sk-supersecret", "-H", "X-Test-Fault: status", "-H", "X-Api-Key: hidden-token-value")
	if code != ExitFail {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "timing-server") || !strings.Contains(stdout, "http_status 5") {
		t.Errorf("model discovery or error count missing:\n%s\n%s", stderr, stdout)
	}
	if sawAuth.Load() != "Bearer sk-supersecret" {
		t.Errorf("server saw Authorization %q", sawAuth.Load())
	}
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if info != nil && !info.IsDir() {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte("supersecret")) || bytes.Contains(b, []byte("hidden-token-value")) {
				t.Errorf("%s contains a secret", p)
			}
		}
		return nil
	})
	if strings.Contains(stdout+stderr, "supersecret") {
		t.Error("secret printed")
	}
}

// TestKilledRunKeepsCompletedRequests kills a bench process with SIGKILL
// mid-run and checks every request it had completed is in requests.jsonl.
// With concurrency 1, request k+1 is only sent after request k's record was
// written, so when the server sees request k+1 arrive, k+1 records
// (0..k) must be on disk.
func TestKilledRunKeepsCompletedRequests(t *testing.T) {
	if os.Getenv("TTFT_KILL_CHILD") != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	ts := bench.NewTimingServer(time.Millisecond, time.Millisecond, 3)
	var arrived atomic.Int64
	killAt := int64(8)
	kill := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The one-token check before the run is not one of its requests.
		probe := strings.HasSuffix(r.Header.Get("X-Request-Id"), "-probe")
		if r.URL.Path == "/v1/chat/completions" && !probe && arrived.Add(1) == killAt {
			io.Copy(io.Discard, r.Body) // lets the server notice the client's death
			close(kill)
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		ts.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out := t.TempDir()
	cmd := exec.Command(exe, "-test.run=^TestBenchChildProcess$")
	cmd.Env = append(os.Environ(), "TTFT_KILL_CHILD=1", "TTFT_KILL_TARGET="+srv.URL, "TTFT_KILL_OUT="+out, "HOME="+out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kill:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child never reached the kill point")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(recs)) != killAt-1 {
		t.Fatalf("requests.jsonl has %d records, want %d", len(recs), killAt-1)
	}
	for i, r := range recs {
		if r.Index != i || !r.OK() {
			t.Fatalf("record %d: index %d class %q", i, r.Index, r.ErrorClass)
		}
	}
}

// TestBenchChildProcess is the child of TestKilledRunKeepsCompletedRequests.
func TestBenchChildProcess(t *testing.T) {
	if os.Getenv("TTFT_KILL_CHILD") == "" {
		t.Skip("helper process for TestKilledRunKeepsCompletedRequests")
	}
	env := map[string]string{"HOME": os.Getenv("TTFT_KILL_OUT")}
	Main(context.Background(), Env{Args: []string{"bench", "--target", os.Getenv("TTFT_KILL_TARGET"), "-c", "1", "-n", "100",
		"--out", os.Getenv("TTFT_KILL_OUT"), "--no-progress", "--no-store"}, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: func(k string) string { return env[k] }})
}

func TestBenchSelfCheck(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bench", "--self-check", "-c", "20", "-n", "40")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"accuracy at 20 concurrent streams, 40 requests (0 failed)", "added TTFT error", "token events/s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("self-check output lacks %q:\n%s", want, stdout)
		}
	}
}

// The helper-process server of --self-check, run in-process: it announces
// its URL, serves streams, reports its stamps and stops when stdin closes.
func TestTimingServerCommand(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), Env{Args: []string{"timing-server", "--first", "1ms", "--interval", "1ms", "--tokens", "3"},
			Stdin: inR, Stdout: outW, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	}()
	buf := make([]byte, 128)
	n, err := outR.Read(buf)
	url := strings.TrimSpace(string(buf[:n]))
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("announced %q, %v", url, err)
	}
	code, stdout, stderr := runCLI(t, "bench", "--target", url, "-n", "3", "-c", "1", "--no-progress", "--no-store", "--out", t.TempDir())
	if code != 0 {
		t.Fatalf("bench against the timing server: %d\n%s\n%s", code, stdout, stderr)
	}
	stamps, err := fetchTimings(context.Background(), url)
	for id := range stamps {
		if strings.HasSuffix(id, "-probe") {
			delete(stamps, id) // the one-token check before the run
		}
	}
	if err != nil || len(stamps) != 3 {
		t.Fatalf("stamps %v, %v", stamps, err)
	}
	inW.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("timing-server exit %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("timing-server did not stop when stdin closed")
	}
}

// A TLS target with a self-signed certificate: refused by default (one
// clear sentence, exit 2), measured with --insecure.
func TestBenchInsecureTLS(t *testing.T) {
	srv := httptest.NewTLSServer(bench.NewTimingServer(time.Millisecond, time.Millisecond, 3))
	defer srv.Close()
	code, _, stderr := runCLI(t, "bench", "--target", srv.URL, "-n", "2", "--no-progress", "--no-store", "--out", t.TempDir())
	if code != ExitUsage || !strings.Contains(stderr, "cannot reach") {
		t.Fatalf("self-signed target without --insecure: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "bench", "--target", srv.URL, "--insecure", "-n", "2", "--no-progress", "--no-store", "--out", t.TempDir())
	if code != 0 {
		t.Fatalf("with --insecure: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// bench stores its run where "ttft runs list" looks, whichever of the data
// directory variables is set.
func TestBenchRunIsListed(t *testing.T) {
	for _, v := range []string{"HOME", "XDG_DATA_HOME", "TTFT_DATA_DIR"} {
		env := map[string]string{"HOME": t.TempDir(), v: t.TempDir()}
		run := func(args ...string) (int, string) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
			return code, out.String() + errb.String()
		}
		if code, out := run("bench", "-n", "3", "--max-tokens", "4", "--no-progress"); code != 0 {
			t.Fatalf("%s: bench exit %d\n%s", v, code, out)
		}
		code, out := run("runs", "list")
		if code != 0 || !strings.Contains(out, "built-in simulator") {
			t.Fatalf("%s: runs list exit %d, the bench run is missing:\n%s", v, code, out)
		}
	}
}

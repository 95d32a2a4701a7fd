package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
)

// A multi-turn simulation on the virtual clock must repeat exactly: the
// session source is polled, never raced against wall-clock timeouts.
func TestSimRunSessionsRepeat(t *testing.T) {
	var got []record.Summary
	for range 2 {
		out := filepath.Join(t.TempDir(), "run")
		code, stdout, stderr := runCLI(t, "sim", "run", "--sessions", "12", "--turns", "4", "-c", "4", "--max-tokens", "24", "--out", out, "--no-store")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, "KV cache per session after its last turn (full") {
			t.Errorf("no per-session memory line:\n%s", stdout)
		}
		var s record.Summary
		if err := record.ReadJSON(filepath.Join(out, "summary.json"), &s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	a, b := got[0], got[1]
	if a.Requests.Completed != 48 || a.TTFT.Mean != b.TTFT.Mean || a.TTFT.P99 != b.TTFT.P99 || a.E2E.Mean != b.E2E.Mean {
		t.Fatalf("runs differ or incomplete: %d requests, TTFT mean %v vs %v, P99 %v vs %v", a.Requests.Completed, a.TTFT.Mean, b.TTFT.Mean, a.TTFT.P99, b.TTFT.P99)
	}
}

package cli

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/sim"
)

func simSession(t *testing.T, args ...string) simSessionReport {
	t.Helper()
	code, stdout, stderr := runSimCLI(t, append([]string{"sim", "session", "--json"}, args...)...)
	if code != ExitOK {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	var rep simSessionReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stdout)
	}
	return rep
}

// TestSimSessionMatchesModel: the command prints what SimulateSession
// computes for the §3.3 conversation (10 × 400 + 240 tokens, Llama-3-70B on
// 4× A100-80GB), session KV over the 4 GPUs; evict:0 is full; eviction
// holds less than full and less for a larger F.
func TestSimSessionMatchesModel(t *testing.T) {
	dep := []string{"--model", "llama-3-70b", "--gpu", "a100-80gb", "--tensor-parallel-size", "4", "--turns", "10", "--user-tokens", "400", "--output-tokens", "240"}
	d, err := sim.Resolve(nil, sim.Config{Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]sim.TurnSpec, 10)
	for i := range specs {
		specs[i] = sim.TurnSpec{UserTokens: 400, OutputTokens: 240}
	}
	reps := map[string]simSessionReport{}
	for _, p := range []string{"full", "evict:0", "evict:0.1", "evict:0.3", "sliding:2048", "none"} {
		rep := simSession(t, append(dep, "--kv-retention", p)...)
		reps[p] = rep
		pol, _ := sim.ParseRetention(p)
		want, err := d.SimulateSession(pol, specs)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Turns) != 10 || rep.TP != 4 || rep.Policy != pol.String() {
			t.Fatalf("%s: %d turns, tp %d, policy %q", p, len(rep.Turns), rep.TP, rep.Policy)
		}
		for i, w := range want {
			g := rep.Turns[i]
			if g.History != w.History || g.Attended != w.Attended || g.Prefilled != w.Prefilled || g.Held != w.HeldTokens ||
				math.Abs(g.TTFTMs-w.TTFT.Seconds()*1e3) > 1e-9 || math.Abs(g.SessionKVBytes-4*w.SessionKVBytes) > 1e-6*g.SessionKVBytes+1e-9 {
				t.Errorf("%s turn %d: printed %+v, model %+v", p, i+1, g, w)
			}
		}
	}
	full := reps["full"]
	if z := reps["evict:0"]; z.P95TTFTMs != full.P95TTFTMs || z.Turns[9].SessionKVBytes != full.Turns[9].SessionKVBytes {
		t.Errorf("evict:0 differs from full: %+v vs %+v", z.Turns[9], full.Turns[9])
	}
	if gb := full.Turns[9].SessionKVBytes / 1e9; math.Abs(gb-2.1) > 0.01 {
		t.Errorf("full holds %.3f GB after 10 turns, want the article's 2.1", gb)
	}
	for i := range full.Turns {
		a, b, c := full.Turns[i].Held, reps["evict:0.1"].Turns[i].Held, reps["evict:0.3"].Turns[i].Held
		if !(a > b && b > c) {
			t.Errorf("turn %d: held full %.0f, evict:0.1 %.0f, evict:0.3 %.0f; want decreasing", i+1, a, b, c)
		}
	}
	if !(reps["none"].P95TTFTMs > full.P95TTFTMs && full.P95TTFTMs > reps["evict:0.3"].P95TTFTMs) {
		t.Errorf("P95 none %.1f, full %.1f, evict:0.3 %.1f: want decreasing", reps["none"].P95TTFTMs, full.P95TTFTMs, reps["evict:0.3"].P95TTFTMs)
	}
}

// TestSimSessionTable: the text form has a header, one row per turn, the
// summary and the quality caveat; per-turn lists and the system prompt
// reach the model.
func TestSimSessionTable(t *testing.T) {
	code, stdout, stderr := runSimCLI(t, "sim", "session", "--kv-retention", "evict:0.3", "--turns", "3", "--user-tokens", "100,200,300", "--output-tokens", "50", "--system-tokens", "1000")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], "kv retention evict:0.3") || !strings.Contains(lines[1], "session KV MB") ||
		!strings.Contains(lines[5], "P95 TTFT") || !strings.Contains(lines[6], "out of the simulator's reach") {
		t.Fatalf("unexpected output:\n%s", stdout)
	}
	// Turn 1 prefills the system prompt and the first message: 1100.
	if f := strings.Fields(lines[2]); len(f) != 7 || f[0] != "1" || f[3] != "1100" {
		t.Errorf("turn 1 row %q, want 1100 prefilled", lines[2])
	}
	// Turn 3's history: 1100 + 50 + 200 + 50.
	if f := strings.Fields(lines[4]); len(f) != 7 || f[1] != "1400" || f[3] != "300" {
		t.Errorf("turn 3 row %q, want history 1400 and 300 prefilled", lines[4])
	}
}

func TestSimSessionRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kv-retention", "lru"}, "unknown policy"},
		{[]string{"--kv-retention", "evict:1.5"}, "fraction F"},
		{[]string{"--turns", "0"}, "--turns must be at least 1"},
		{[]string{"--output-tokens", "-5"}, "--output-tokens must not be negative"},
		{[]string{"--user-tokens", "0"}, "--user-tokens must be at least 1"},
		{[]string{"--user-tokens", "1,2"}, "one value or one per turn"},
		{[]string{"--system-tokens", "-1"}, "--system-tokens must not be negative"},
		{[]string{"--model", "nope-13b"}, "known models"},
		{[]string{"--turns", "200", "--user-tokens", "4000", "--max-model-len", "8192"}, "exceeds max model length"},
	} {
		code, stdout, stderr := runSimCLI(t, append([]string{"sim", "session"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q and no output", tc.args, code, stderr, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
			t.Errorf("%v: %d-line error, want one line: %q", tc.args, n+1, stderr)
		}
	}
}

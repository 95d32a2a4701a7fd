package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLiveEvalResultsOnDisk: a suite writes every run to its results
// directory (by default a new one under the data directory, named on
// stderr at the start), and --report prints from it exactly the tables
// the suite printed; a damaged run file is named and left out, a missing
// suite.json is an error naming it.
func TestLiveEvalResultsOnDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs")
	}
	code, stdout, stderr := runCLI(t, "gateway", "live-eval", "--fleets", "two", "--policies", "round-robin,prefix-affinity,slo-predictive",
		"--seeds", "2", "--requests", "40")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`writing results to (\S+)`).FindStringSubmatch(stderr)
	if m == nil || !strings.Contains(m[1], filepath.Join(".local", "share", "ttft", "live-eval")) {
		t.Fatalf("no results directory under the data directory on stderr:\n%s", stderr)
	}
	dir := m[1]
	runs, err := filepath.Glob(filepath.Join(dir, "runs", "*.json"))
	if err != nil || len(runs) != 6 {
		t.Fatalf("%d run files (%v), want 6", len(runs), err)
	}
	for _, want := range []string{"pooled P99 ms", "90% CI", "verdict"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in the tables:\n%s", want, stdout)
		}
	}

	code, again, errs := runCLI(t, "gateway", "live-eval", "--report", dir)
	if code != 0 || again != stdout {
		t.Fatalf("--report: exit %d, stderr %s\nprinted:\n%s\nthe suite printed:\n%s", code, errs, again, stdout)
	}

	if err := os.WriteFile(runs[1], []byte(`{"schema": "ttft.live-eval.run/v1", "seq": `), 0o644); err != nil {
		t.Fatal(err)
	}
	code, part, errs := runCLI(t, "gateway", "live-eval", "--report", dir)
	if code != 0 || !strings.Contains(errs, filepath.Base(runs[1])) || !strings.Contains(part, "| two ") {
		t.Errorf("one damaged run: exit %d\nstdout:\n%s\nstderr:\n%s", code, part, errs)
	}

	// The directory holds a suite: a new one is refused before it runs.
	code, _, errs = runCLI(t, "gateway", "live-eval", "--fleets", "two", "--seeds", "1", "--out", dir)
	if code != ExitUsage || !strings.Contains(errs, "holds a suite") {
		t.Errorf("--out onto a suite: exit %d, stderr %s", code, errs)
	}

	if err := os.Remove(filepath.Join(dir, "suite.json")); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "gateway", "live-eval", "--report", dir)
	if code != ExitUsage || !strings.Contains(errs, filepath.Join(dir, "suite.json")) {
		t.Errorf("no suite.json: exit %d, stderr %s", code, errs)
	}
}

// --report reads a finished directory: flags that shape a new suite are a
// usage error beside it.
func TestLiveEvalReportFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--report", "x", "--seeds", "2"},
		{"--report", "x", "--out", "y"},
		{"--report", "x", "--fleets", "two"},
		{"--report", "x", "--resume"},
	} {
		code, _, errs := runCLI(t, append([]string{"gateway", "live-eval"}, args...)...)
		if code != ExitUsage || !strings.Contains(errs, "--report") {
			t.Errorf("%v: exit %d, stderr %s", args, code, errs)
		}
	}
}

// TestLiveEvalResume: a suite that lost runs is taken up again with the
// flags it was started with: the runs on disk are kept as they are, only
// the missing one runs, and the tables cover all; other flags are refused.
func TestLiveEvalResume(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs")
	}
	dir := filepath.Join(t.TempDir(), "suite")
	args := []string{"gateway", "live-eval", "--fleets", "two", "--policies", "round-robin,slo-predictive", "--seeds", "2", "--requests", "40", "--out", dir}
	if code, stdout, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	runs, err := filepath.Glob(filepath.Join(dir, "runs", "*.json"))
	if err != nil || len(runs) != 4 {
		t.Fatalf("%d run files (%v), want 4", len(runs), err)
	}
	kept := map[string][]byte{}
	for _, p := range runs[1:] {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		kept[p] = b
	}
	if err := os.Remove(runs[0]); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLI(t, append(args, "--resume")...)
	if code != 0 || !strings.Contains(stderr, "3 of 4 runs on disk") {
		t.Fatalf("--resume: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	now, err := filepath.Glob(filepath.Join(dir, "runs", "*.json"))
	if err != nil || len(now) != 4 {
		t.Fatalf("after --resume: %d run files (%v), want 4", len(now), err)
	}
	for p, b := range kept {
		if got, err := os.ReadFile(p); err != nil || string(got) != string(b) {
			t.Errorf("%s was rewritten (%v)", p, err)
		}
	}
	if !strings.Contains(stdout, "| two ") || !strings.Contains(stdout, "pooled P99 ms") {
		t.Errorf("no tables after --resume:\n%s", stdout)
	}
	if code, again, errs := runCLI(t, "gateway", "live-eval", "--report", dir); code != 0 || again != stdout {
		t.Errorf("--report after --resume: exit %d, stderr %s\nprinted:\n%s\nthe suite printed:\n%s", code, errs, again, stdout)
	}

	code, _, errs := runCLI(t, "gateway", "live-eval", "--fleets", "two", "--policies", "round-robin,slo-predictive", "--seeds", "3", "--requests", "40", "--out", dir, "--resume")
	if code != ExitUsage || !strings.Contains(errs, "seeds") {
		t.Errorf("--resume with other seeds: exit %d, stderr %s", code, errs)
	}
	code, _, errs = runCLI(t, "gateway", "live-eval", "--fleets", "two", "--resume")
	if code != ExitUsage || !strings.Contains(errs, "--out") {
		t.Errorf("--resume without --out: exit %d, stderr %s", code, errs)
	}
}

// TestLiveEvalCompare: two suites' tables side by side, round by round; a
// suite against itself reads 1.00; unpaired rounds and a --compare
// without --report are usage errors.
func TestLiveEvalCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("live runs")
	}
	var dirs []string
	for _, name := range []string{"a", "b"} {
		dir := filepath.Join(t.TempDir(), name)
		code, stdout, stderr := runCLI(t, "gateway", "live-eval", "--fleets", "two", "--policies", "prefix-affinity", "--seeds", "2", "--requests", "40", "--out", dir)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		dirs = append(dirs, dir)
	}
	code, stdout, stderr := runCLI(t, "gateway", "live-eval", "--report", dirs[1], "--compare", dirs[0])
	if code != 0 || !regexp.MustCompile(`\| two +\| prefix-affinity +\| 2 +\|`).MatchString(stdout) || !strings.Contains(stdout, "after ÷ before") {
		t.Fatalf("--compare: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "gateway", "live-eval", "--report", dirs[0]+","+dirs[1], "--compare", dirs[0]+","+dirs[1])
	if code != 0 || !strings.Contains(stdout, "| 4 ") || !strings.Contains(stdout, "1.00 [1.00–1.00]") {
		t.Errorf("two rounds against themselves: exit %d\n%s", code, stdout)
	}
	for _, args := range [][]string{
		{"--report", dirs[1], "--compare", dirs[0] + "," + dirs[1]},
		{"--compare", dirs[0]},
		{"--report", dirs[0] + "," + dirs[1]},
	} {
		code, _, errs := runCLI(t, append([]string{"gateway", "live-eval"}, args...)...)
		if code != ExitUsage || !strings.Contains(errs, "--") {
			t.Errorf("%v: exit %d, stderr %s", args, code, errs)
		}
	}
}

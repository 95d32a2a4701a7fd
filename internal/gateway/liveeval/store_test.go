package liveeval

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// fullResult has every field of Result set, so that a field the run file
// forgets shows in the round trip (and a new field fails the check below
// until it is given a value here).
func fullResult(t *testing.T, seed uint64) Result {
	r := Result{
		Fleet: "two", Policy: "epp:" + sched.SLOPredictive + "+reject", Seed: seed, N: 3, Failed: 1,
		Mean: 11 * time.Millisecond, P50: 9 * time.Millisecond, P95: 30 * time.Millisecond, P99: 31*time.Millisecond + 7,
		Attainment: 2.0 / 3, Goodput: 123.456, HitRate: 0.75, Learned: []int{96, 0}, Reasons: map[string]int{"affinity": 7},
		Wall: 3 * time.Second, Rejected: 1, Admitted: 2, AdmittedAttainment: 1, Degraded: 4,
		MAPE: map[string]float64{"linear": 0.12}, MAPEN: 50, Active: map[string]int{"gbt": 2},
		BackendN: 2, BackendMean: 8 * time.Millisecond, BackendP95: 20 * time.Millisecond, BackendP99: 21 * time.Millisecond,
		BackendQueued: time.Millisecond, BackendAttainment: 0.5, HostLate: 1,
		Requests: []Scored{
			{ID: "le-101", TTFT: 12345678, Status: 200, BackendTTFT: 11111111, Backend: "fast", BackendQueued: 2500000, PromptChars: 4500, HitChars: 4096, Group: "C", BackendLate: 12500000},
			{ID: "le-102", TTFT: 987654321, Status: 200},
			{ID: "le-103", Status: 429},
		},
	}
	v := reflect.ValueOf(r)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fullResult leaves %s unset", v.Type().Field(i).Name)
		}
	}
	return r
}

func newTestStore(t *testing.T, dir string) *Store {
	t.Helper()
	opt := Options{Fleets: []Fleet{{Name: "two", CacheMatters: true, SLO: 60 * time.Millisecond}}, Policies: []string{sched.SLOPredictive}, Seeds: []uint64{1, 2}}
	st, err := CreateStore(dir, NewSuite(opt, ModePolicies, sched.SLOPredictive, "v-test", []string{"gateway", "live-eval"}))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStoreRoundTrip: what a run file holds reads back as the Result
// written, in the order written, with the suite's description; a NaN
// figure (a simulator fleet's hit rate) survives as NaN.
func TestStoreRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "suite")
	st := newTestStore(t, dir)
	a, b := fullResult(t, 2), fullResult(t, 1)
	b.HitRate = math.NaN()
	meta := RunMeta{Requests: 3, Started: time.Now(), Ended: time.Now(), LoadStart: []float64{1, 2, 3}}
	for _, r := range []Result{a, b} {
		if _, err := st.WriteRun(r, meta); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Finish(nil); err != nil {
		t.Fatal(err)
	}
	suite, rs, warns, err := ReadDir(dir)
	if err != nil || len(warns) > 0 {
		t.Fatalf("ReadDir: %v, warnings %v", err, warns)
	}
	if suite.Status != "complete" || suite.Finished == nil || suite.ToolVersion != "v-test" || len(suite.Fleets) != 1 || !suite.ReportFleets()[0].CacheMatters {
		t.Errorf("suite %+v", suite)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	if !reflect.DeepEqual(rs[0], a) {
		t.Errorf("read back\n%+v\nwrote\n%+v", rs[0], a)
	}
	if !math.IsNaN(rs[1].HitRate) {
		t.Errorf("NaN hit rate read back as %v", rs[1].HitRate)
	}
	rs[1].HitRate, b.HitRate = 0, 0
	if !reflect.DeepEqual(rs[1], b) {
		t.Errorf("read back\n%+v\nwrote\n%+v", rs[1], b)
	}
	// An earlier suite is never overwritten.
	if _, err := CreateStore(dir, Suite{}); err == nil || !strings.Contains(err.Error(), "holds a suite") {
		t.Errorf("second CreateStore on %s: %v", dir, err)
	}
}

// TestReadDirDamage: a missing or malformed suite.json is an error naming
// it; a malformed run file is left out with a warning naming it.
func TestReadDirDamage(t *testing.T) {
	tests := []struct {
		name     string
		damage   func(dir string, runs []string) error
		wantErr  string // "" for none
		wantWarn string
		wantRuns int
	}{
		{"intact", func(string, []string) error { return nil }, "", "", 2},
		{"no suite.json", func(dir string, _ []string) error { return os.Remove(filepath.Join(dir, SuiteFile)) }, SuiteFile, "", 0},
		{"malformed suite.json", func(dir string, _ []string) error {
			return os.WriteFile(filepath.Join(dir, SuiteFile), []byte(`{"schema": "ttft.live`), 0o644)
		}, SuiteFile + ": malformed JSON", "", 0},
		{"other schema", func(dir string, _ []string) error {
			return os.WriteFile(filepath.Join(dir, SuiteFile), []byte(`{"schema": "other"}`), 0o644)
		}, `schema "other"`, "", 0},
		{"one truncated run", func(_ string, runs []string) error {
			b, err := os.ReadFile(runs[0])
			if err != nil {
				return err
			}
			return os.WriteFile(runs[0], b[:len(b)/2], 0o644)
		}, "", "0001-two-", 1},
		{"every run unreadable", func(_ string, runs []string) error {
			for _, p := range runs {
				if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
					return err
				}
			}
			return nil
		}, "no readable run file", "schema", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			st := newTestStore(t, dir)
			var runs []string
			for seed := range uint64(2) {
				p, err := st.WriteRun(fullResult(t, seed+1), RunMeta{})
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, p)
			}
			if err := tt.damage(dir, runs); err != nil {
				t.Fatal(err)
			}
			_, rs, warns, err := ReadDir(dir)
			if (err != nil) != (tt.wantErr != "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if w := errors.Join(warns...); (w != nil) != (tt.wantWarn != "") || w != nil && !strings.Contains(w.Error(), tt.wantWarn) {
				t.Errorf("warnings %v, want %q", w, tt.wantWarn)
			}
			if len(rs) != tt.wantRuns {
				t.Errorf("%d runs, want %d", len(rs), tt.wantRuns)
			}
		})
	}
}

func TestSafeName(t *testing.T) {
	if got := safeName("epp:slo-predictive+reject/x"); got != "epp_slo-predictive+reject_x" {
		t.Errorf("safeName = %q", got)
	}
}

// TestResumeStore: a stopped suite reopens with the runs on disk, numbers
// new runs after them and is running again; a damaged run file is warned
// of and left to run again; a command asking for another suite is refused
// with the difference named.
func TestResumeStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "suite")
	st := newTestStore(t, dir)
	want := st.Suite()
	run := func(seed uint64) Result {
		r := fullResult(t, seed)
		r.Policy = sched.SLOPredictive // one of the suite's runs
		return r
	}
	var runs []string
	for _, seed := range []uint64{1, 2} {
		p, err := st.WriteRun(run(seed), RunMeta{})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, p)
	}
	if err := st.Finish(errors.New("interrupted")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runs[0], []byte(`{"schema": "ttft.live-eval.run/v1", "seq": `), 0o644); err != nil {
		t.Fatal(err)
	}

	again, done, warns, err := ResumeStore(dir, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].Error(), filepath.Base(runs[0])) {
		t.Errorf("warnings %v, want one naming %s", warns, filepath.Base(runs[0]))
	}
	if len(done) != 1 || done[0].Seed != 2 {
		t.Fatalf("done %+v, want seed 2's run", done)
	}
	s := again.Suite()
	if s.Status != "running" || s.Finished != nil || len(s.Resumed) != 1 || !s.Started.Equal(want.Started) {
		t.Errorf("resumed suite %+v", s)
	}
	p, err := again.WriteRun(run(1), RunMeta{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(p), "0003-") {
		t.Errorf("new run written as %s, want number 3", filepath.Base(p))
	}
	if err := again.Finish(nil); err != nil {
		t.Fatal(err)
	}
	// In the suite's order, seed 1 first, although it was run last.
	onDisk, rs, _, err := ReadDir(dir)
	if err != nil || onDisk.Status != "complete" || len(rs) != 2 || rs[0].Seed != 1 || rs[1].Seed != 2 {
		t.Errorf("after resuming: %v, status %q, %d runs", err, onDisk.Status, len(rs))
	}

	for _, tt := range []struct {
		name  string
		alter func(*Suite)
		want  string
	}{
		{"seeds", func(s *Suite) { s.Seeds = []uint64{1, 2, 3} }, "seeds"},
		{"policies", func(s *Suite) { s.Policies = []string{"round-robin"} }, "policies"},
		{"mode", func(s *Suite) { s.Mode = ModeAdmission }, "admission"},
		{"fleet", func(s *Suite) { s.Fleets = []SuiteFleet{{Name: "eight"}} }, "fleets"},
		{"requests", func(s *Suite) { s.Fleets = []SuiteFleet{want.Fleets[0]}; s.Fleets[0].Requests = 40 }, "fleet two"},
	} {
		other := want
		tt.alter(&other)
		if _, _, _, err := ResumeStore(dir, other); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s differs: %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
	if _, _, _, err := ResumeStore(filepath.Join(t.TempDir(), "none"), want); err == nil || !strings.Contains(err.Error(), SuiteFile) {
		t.Errorf("no suite: %v", err)
	}
}

// TestRunSkipsDone: a resumed suite's runs on disk are not run again, and
// a fleet whose runs are all done does not start its engines (here an
// ollama binary that does not exist); with one run left it does.
func TestRunSkipsDone(t *testing.T) {
	f := OllamaFleets()[0]
	opt := Options{Fleets: []Fleet{f}, Policies: []string{sched.RoundRobin}, Seeds: []uint64{1},
		Ollama: filepath.Join(t.TempDir(), "no-ollama"), Done: []Result{{Fleet: f.Name, Policy: sched.RoundRobin, Seed: 1, N: 7}}}
	rs, err := Run(context.Background(), opt)
	if err != nil || len(rs) != 1 || rs[0].N != 7 {
		t.Fatalf("every run done: %v, results %+v", err, rs)
	}
	opt.Seeds = []uint64{1, 2}
	if _, err := Run(context.Background(), opt); err == nil || !strings.Contains(err.Error(), "no-ollama") {
		t.Errorf("seed 2 left to run: %v, want the engines' start to fail", err)
	}
}

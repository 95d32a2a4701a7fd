package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func runSweepCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		if k == "TTFT_DATA_DIR" {
			return t.TempDir()
		}
		return ""
	}})
	return code, out.String(), errb.String()
}

func TestSweepSimGrid(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runSweepCLI(t, "sweep", "--sim", "--out", dir,
		"--over", "concurrency=1,4", "--over", "prompt-tokens=256,1024", "--grid", "concurrency,prompt-tokens",
		"--", "--requests", "12", "--max-tokens", "16")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"concurrency=4 prompt-tokens=1024", "vs linear", "TTFT p95"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var doc struct {
		Points []struct {
			Settings map[string]string `json:"settings"`
			Summary  *struct {
				Requests struct{ Completed int } `json:"requests"`
				TTFT     struct{ P50 float64 }   `json:"ttft_ms"`
			} `json:"summary"`
		} `json:"points"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 4 {
		t.Fatalf("%d points", len(doc.Points))
	}
	// Longer prompts at the same concurrency take longer to first token.
	p := doc.Points
	if p[0].Summary.Requests.Completed != 12 || !(p[1].Summary.TTFT.P50 > p[0].Summary.TTFT.P50) {
		t.Fatalf("points %+v %+v", p[0].Summary, p[1].Summary)
	}
	if _, err := os.Stat(filepath.Join(dir, "point-003", "summary.json")); err != nil {
		t.Fatal(err)
	}
}

// Each point is stored labelled with its settings.
func TestSweepPointsAreLabelled(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ttft.db")
	code, out, errs := runSweepCLI(t, "sweep", "--sim", "--out", t.TempDir(), "--over", "concurrency=1,4",
		"--", "--requests", "8", "--max-tokens", "8", "--db", db)
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runSweepCLI(t, "runs", "list", "--db", db, "--label", "concurrency=4", "--json")
	var runs []struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(out), &runs); code != ExitOK || err != nil || len(runs) != 1 || runs[0].Labels["concurrency"] != "4" {
		t.Fatalf("runs list --label concurrency=4: exit %d, %v\n%s\n%s", code, err, out, errs)
	}
}

func TestSweepUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"sweep"},
		{"sweep", "--over", "concurrency"},
		{"sweep", "--over", "concurrency=1", "--", "--out", "x"},
		{"sweep", "--sim", "--over", "concurrency=1", "--", "--no-such-flag"},
		{"sweep", "--sim", "--search", "concurrency", "--lo", "1", "--hi", "2", "--", "--requests", "3"},
	} {
		if code, out, errs := runSweepCLI(t, append(args[:1:1], append([]string{"--out", t.TempDir()}, args[1:]...)...)...); code != ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s%s", args, code, out, errs)
		}
	}
}

// The watcher sees a live point's records as they finish and stops the
// run once the queue grows without bound, not before.
func TestWatchSaturation(t *testing.T) {
	var stopped int
	w := &saturationWatch{stop: func() { stopped++ }}
	t0 := time.Unix(1000, 0)
	for i := 0; i < 100; i++ {
		sent := t0.Add(time.Duration(i) * time.Second)
		w.observe(&record.Record{Index: i, Intended: sent.Add(-time.Millisecond), Sent: sent, TTFTMs: 50 + 10*float64(i)})
		if i == 20 && stopped > 0 {
			t.Fatalf("stopped after 21 requests")
		}
	}
	recs, why := w.result()
	if stopped != 1 || len(recs) != 100 || !strings.Contains(why, "TTFT median rose") {
		t.Fatalf("stopped %d times, %d records, reason %q", stopped, len(recs), why)
	}
}

// Ctrl-C during a sweep exits 130, keeps the points run so far and marks
// the one it cut as incomplete, with what that point completed.
func TestSweepInterruptExits130(t *testing.T) {
	url, _ := slowServer(t, 30*time.Millisecond)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Interrupt once the second point has completed a few requests.
		for ctx.Err() == nil {
			if recs, _ := record.ReadJSONL(filepath.Join(dir, "point-001", "requests.jsonl")); len(recs) >= 3 {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var out, errb bytes.Buffer
	code := Main(ctx, Env{Args: []string{"sweep", "--out", dir, "--over", "concurrency=1,2,4", "--",
		"--target", url, "--model", "m", "-n", "60", "--no-progress", "--no-store"},
		Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	if code != 130 || !strings.Contains(errb.String(), "sweep interrupted during concurrency=2, kept as incomplete: 2 of 3 points") {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	var doc struct {
		Points []struct {
			Incomplete bool `json:"incomplete"`
			Summary    *struct {
				Requests struct{ Completed int } `json:"requests"`
			} `json:"summary"`
		} `json:"points"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil || len(doc.Points) != 2 || doc.Points[0].Incomplete || !doc.Points[1].Incomplete ||
		doc.Points[1].Summary == nil || doc.Points[1].Summary.Requests.Completed < 3 || doc.Points[1].Summary.Requests.Completed >= 60 {
		t.Fatalf("sweep.json: %v\n%s", err, data)
	}
	if !strings.Contains(out.String(), "incomplete (interrupted)") {
		t.Errorf("table does not mark the cut point:\n%s", out.String())
	}
}

// sweep --auto (GuideLLM's sweep profile) on the simulator's virtual clock:
// synchronous, maximum throughput, then rates strictly between the two
// throughputs, increasing, each point in sweep.json; loads given after
// "--" are refused, as --auto chooses them.
func TestSweepAuto(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runSweepCLI(t, "sweep", "--auto", "--sim", "--auto-rates", "3", "--auto-concurrency", "32", "--no-stop", "--out", dir,
		"--", "-n", "60", "--max-tokens", "16", "--prompt-tokens", "64", "--no-store")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var doc struct {
		Points []struct {
			Settings map[string]string `json:"settings"`
			Summary  *record.Summary   `json:"summary"`
		} `json:"points"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Points) != 5 {
		t.Fatalf("%d points, want synchronous, throughput and 3 rates:\n%s", len(doc.Points), out)
	}
	if doc.Points[0].Settings["concurrency"] != "1" || doc.Points[1].Settings["concurrency"] != "32" {
		t.Fatalf("first points %v, %v; want concurrency 1 then 32", doc.Points[0].Settings, doc.Points[1].Settings)
	}
	syncR, maxR := doc.Points[0].Summary.Throughput.RequestsPerS, doc.Points[1].Summary.Throughput.RequestsPerS
	prev := syncR
	for _, p := range doc.Points[2:] {
		var r float64
		if _, err := fmt.Sscan(p.Settings["rate"], &r); err != nil || r <= prev || r >= maxR {
			t.Errorf("rate %q: want increasing rates strictly between %.3g and %.3g req/s", p.Settings["rate"], syncR, maxR)
		}
		prev = r
	}
	if !strings.Contains(out, "maximum throughput") {
		t.Errorf("no summary line:\n%s", out)
	}
	if code, _, _ := runSweepCLI(t, "sweep", "--auto", "--sim", "--out", t.TempDir(), "--", "--rate", "3"); code != ExitUsage {
		t.Errorf("--auto with --rate after --: exit %d, want 2", code)
	}
	if code, _, _ := runSweepCLI(t, "sweep", "--auto", "--over", "concurrency=1", "--out", t.TempDir()); code != ExitUsage {
		t.Errorf("--auto with --over: exit %d, want 2", code)
	}
}

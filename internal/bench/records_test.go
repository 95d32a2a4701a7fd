package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

func jsonlIndexes(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s ends in a half line", path)
	}
	return decodeIndexes(t, path, data)
}

// jsonlIndexesSoFar is jsonlIndexes of a file other requests may be
// appending to as it is read: a read that overlaps a write(2) can see
// the part of its line copied so far (the kernel extends the file page
// by page), so a trailing half line is left out. A record whose write
// has returned is whole either way.
func jsonlIndexesSoFar(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeIndexes(t, path, data[:bytes.LastIndexByte(data, '\n')+1])
}

func decodeIndexes(t *testing.T, path string, data []byte) []int {
	t.Helper()
	recs, err := record.DecodeJSONL(bytes.NewReader(data), path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(recs))
	for i, r := range recs {
		out[i] = r.Index
	}
	return out
}

// When Run returns, at its end or interrupted, requests.jsonl holds every
// record the sinks were given (nothing waits for Close).
func TestRecordsWrittenWhenTheRunEnds(t *testing.T) {
	srv := httptest.NewServer(NewTimingServer(5*time.Millisecond, time.Millisecond, 2))
	defer srv.Close()
	for _, tc := range []struct {
		name      string
		interrupt time.Duration
	}{
		{"end", 0},
		{"interrupt", 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "requests.jsonl")
			w, err := record.NewJSONLWriter(path)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			mem := &memSink{}
			n := 400
			if tc.interrupt > 0 {
				n = 1 << 20 // until interrupted
			}
			r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Concurrency: 32, Requests: n,
				Sinks: []Sink{w, mem}, Request: wire.RequestOptions{Model: "m"}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.interrupt > 0 {
				time.AfterFunc(tc.interrupt, cancel)
			}
			res, err := r.Run(ctx, fixedSource(t, 8, 2))
			if err != nil {
				t.Fatal(err)
			}
			got := jsonlIndexes(t, path) // before Close
			var want []int
			for _, rec := range mem.recs {
				want = append(want, rec.Index)
			}
			// Concurrent requests may reach the two sinks in either order.
			slices.Sort(got)
			slices.Sort(want)
			if len(want) == 0 || !slices.Equal(got, want) {
				t.Fatalf("requests.jsonl holds %d records, the sinks were given %d (%d in the result)", len(got), len(want), len(res.Records))
			}
			if tc.interrupt == 0 && len(res.Records) != n {
				t.Fatalf("%d records, want %d", len(res.Records), n)
			}
		})
	}
}

// Environment of the helper process below.
const (
	envCommitChild = "TTFT_BENCH_COMMIT_CHILD" // its requests.jsonl
	envCommitURL   = "TTFT_BENCH_COMMIT_URL"
)

// printObserver tells the parent, on stdout, each record that reached the
// sinks.
type printObserver struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (p *printObserver) Start(ctx context.Context, _ *workload.Request, _ *record.Record) context.Context {
	return ctx
}

func (p *printObserver) Done(_ context.Context, rec *record.Record) {
	p.mu.Lock()
	fmt.Fprintln(p.w, rec.Index)
	p.w.Flush()
	p.mu.Unlock()
}

// TestRecordsChildProcess is the helper process: a run into a run
// directory until SIGINT (then it ends normally) or SIGKILL.
func TestRecordsChildProcess(t *testing.T) {
	path := os.Getenv(envCommitChild)
	if path == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rd, err := rundir.Create(path, record.Manifest{Schema: record.ManifestSchema, RunID: "commit"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: os.Getenv(envCommitURL), Concurrency: 8, Requests: 1 << 20,
		Sinks: []Sink{rd}, Observers: []Observer{&printObserver{w: bufio.NewWriter(os.Stdout)}}, Request: wire.RequestOptions{Model: "m"}})
	src, _ := workload.NewFixed(workload.FixedOptions{PromptTokens: 8, MaxTokens: 2, Chat: true, Seed: 1})
	if _, err := r.Run(ctx, src); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := rd.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("done")
	os.Exit(0)
}

// Nothing that finished is lost, killed or interrupted: a helper process
// runs until the signal and prints each request's index once its record
// has gone to the sinks (observers run after them); requests.jsonl must
// then hold every index printed, after a SIGKILL as after a SIGINT.
func TestRecordsSurviveKillAndInterrupt(t *testing.T) {
	const runFor = time.Second
	srv := httptest.NewServer(NewTimingServer(time.Millisecond, time.Millisecond, 2))
	defer srv.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"SIGKILL", syscall.SIGKILL},
		{"SIGINT", syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			cmd := exec.Command(exe, "-test.run=^TestRecordsChildProcess$")
			cmd.Env = append(os.Environ(), envCommitChild+"="+dir, envCommitURL+"="+srv.URL)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				lines []int
				ended bool
			)
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					mu.Lock()
					if sc.Text() == "done" {
						ended = true
					} else if i, err := strconv.Atoi(sc.Text()); err == nil {
						lines = append(lines, i)
					}
					mu.Unlock()
				}
			}()
			time.Sleep(runFor)
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			<-readDone
			werr := cmd.Wait()
			got := map[int]bool{}
			for _, i := range jsonlIndexes(t, filepath.Join(dir, rundir.RequestsFile)) {
				got[i] = true
			}
			mu.Lock()
			defer mu.Unlock()
			if len(lines) < 20 {
				t.Fatalf("only %d records in %v", len(lines), runFor)
			}
			missing := 0
			for _, i := range lines {
				if !got[i] {
					missing++
				}
			}
			if tc.sig == syscall.SIGINT && (werr != nil || !ended) {
				t.Errorf("the interrupted run did not end normally: %v", werr)
			}
			if missing > 0 {
				t.Errorf("%d of %d finished records missing from requests.jsonl", missing, len(lines))
			}
			t.Logf("%d records finished, %d in the file", len(lines), len(got))
		})
	}
}

// fileCheck is an observer that checks, as each request ends, that its
// record is already in the file.
type fileCheck struct {
	t    *testing.T
	path string
}

func (f fileCheck) Start(ctx context.Context, _ *workload.Request, _ *record.Record) context.Context {
	return ctx
}

func (f fileCheck) Done(_ context.Context, rec *record.Record) {
	if !slices.Contains(jsonlIndexesSoFar(f.t, f.path), rec.Index) {
		f.t.Errorf("record %d not written when its request ended", rec.Index)
	}
}

// A record is in requests.jsonl when its request ends, before anything
// else learns of it.
func TestRecordWrittenWhenItsRequestEnds(t *testing.T) {
	srv := httptest.NewServer(NewTimingServer(2*time.Millisecond, time.Millisecond, 2))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	w, err := record.NewJSONLWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Concurrency: 4, Requests: 32,
		Sinks: []Sink{w}, Observers: []Observer{fileCheck{t, path}}, Request: wire.RequestOptions{Model: "m"}})
	if _, err := r.Run(context.Background(), fixedSource(t, 8, 2)); err != nil {
		t.Fatal(err)
	}
	if got := len(jsonlIndexes(t, path)); got != 32 {
		t.Fatalf("%d records written, want 32", got)
	}
}

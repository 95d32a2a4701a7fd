package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// envServerChild makes the test binary a timing server in a helper process,
// so that the comparison below charges each client its own CPU alone.
const envServerChild = "TTFT_BENCH_SERVER_CHILD"

func TestTimingServerProcess(t *testing.T) {
	if os.Getenv(envServerChild) == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ts := NewTimingServer(20*time.Millisecond, 5*time.Millisecond, 8)
	srv := ts.Start(ln)
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent is done
	srv.Close()
	os.Exit(0)
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minimalClient is the floor a Go streaming client can reach: a pooled
// net/http client, one JSON body, a line scan for the first content event
// and [DONE], the body read to its end so the connection is reused. No
// records, no files, no tokenizer, no kernel stamps.
func minimalClient(ctx context.Context, base string, streams, requests int) (int64, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: streams + 16, MaxConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := []byte(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(requests) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				br := bufio.NewReader(resp.Body)
				var first time.Duration
				for {
					line, err := br.ReadSlice('\n')
					if bytes.HasPrefix(line, []byte("data: [DONE]")) || err != nil {
						break
					}
					if first == 0 && bytes.Contains(line, []byte(`"content":"`)) {
						first = time.Since(start)
					}
				}
				_, _ = io.Copy(io.Discard, br)
				resp.Body.Close()
				if first > 0 {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return ok.Load(), err
	default:
	}
	return ok.Load(), nil
}

// ttftClient is the whole of ttft bench's per-request work: the runner
// with kernel stamps, the output tokenizer, the run directory's JSONL sink
// and the default request limits, as the CLI runs it.
// bare leaves out the tokenizer and the sink, to apportion the difference.
func ttftClient(ctx context.Context, base string, streams, requests int, dir string, bare bool) (int64, error) {
	rd, err := rundir.Create(dir, record.Manifest{Schema: record.ManifestSchema, RunID: "cpu"})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	tr := NewTransport(streams)
	if os.Getenv("TTFT_CPU_PLAIN_DIAL") != "" {
		tr.DialContext = (&net.Dialer{}).DialContext // experiment: no kernel stamps
	}
	ClosedLoop(tr, streams)
	defer tr.CloseIdleConnections()
	// The limits are ttft bench's defaults (--timeout 5m, --ttft-timeout 1m):
	// the CLI arms them on every request.
	opt := Options{API: wire.OpenAIChat, BaseURL: base, Request: wire.RequestOptions{Model: "m"}, Concurrency: streams, Requests: requests,
		Timeout: 5 * time.Minute, TTFTTimeout: time.Minute,
		Tokenizer: workload.DefaultTokenizer(), Sinks: []Sink{rd}, Client: &http.Client{Transport: tr}, RunID: "cpu"}
	if bare {
		opt.Tokenizer, opt.Sinks = nil, nil
	}
	r, err := New(opt)
	if err != nil {
		return 0, err
	}
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 4, MaxTokens: 8, Chat: true, Seed: 1, SamePrompt: true})
	if err != nil {
		return 0, err
	}
	res, err := r.Run(ctx, src)
	n := int64(0)
	for _, rec := range res.Records {
		if rec.OK() {
			n++
		}
	}
	return n, err
}

// TestCPUPerRequestAgainstMinimalClient measures whole-process CPU (user +
// system, getrusage) per request of ttft's client and of a minimal Go
// streaming client (and of ttft's client without its output tokenizer and
// JSONL sink, "ttft-bare", to apportion the difference), alternated in one
// run against one timing server in a
// helper process (8 tokens per reply, first after 20 ms, then every 5 ms).
// It is a measurement, not a gate: run it with
//
//	TTFT_CPU_COMPARE=1 go test ./internal/bench -run TestCPUPerRequestAgainstMinimalClient -v
//
// (TTFT_CPU_STREAMS, default 1000; TTFT_CPU_PER_STREAM requests per stream
// and round, default 5; TTFT_CPU_ROUNDS, default 2, after TTFT_CPU_WARMUP
// uncounted rounds, default 1;
// TTFT_CPU_ONLY=NAME runs one client, for -cpuprofile; TTFT_CPU_PLAIN_DIAL=1
// dials ttft's connections without kernel receive timestamps, to price them).
func TestCPUPerRequestAgainstMinimalClient(t *testing.T) {
	if os.Getenv("TTFT_CPU_COMPARE") == "" {
		t.Skip("a measurement: set TTFT_CPU_COMPARE=1")
	}
	streams, _ := strconv.Atoi(os.Getenv("TTFT_CPU_STREAMS"))
	if streams <= 0 {
		streams = 1000
	}
	rounds, _ := strconv.Atoi(os.Getenv("TTFT_CPU_ROUNDS"))
	if rounds <= 0 {
		rounds = 2
	}
	perStream, _ := strconv.Atoi(os.Getenv("TTFT_CPU_PER_STREAM"))
	if perStream <= 0 {
		perStream = 5
	}
	requests := perStream * streams
	// A warm-up round, not counted: the first use of the workload's
	// prompt generator and of the tokenizer builds their tables (≈ 26 ms
	// of CPU once per process), which would otherwise land on whichever
	// client runs first.
	warm := 1
	if v, err := strconv.Atoi(os.Getenv("TTFT_CPU_WARMUP")); err == nil && v >= 0 {
		warm = v
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestTimingServerProcess$")
	cmd.Env = append(os.Environ(), envServerChild+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + strings.TrimSpace(addr)
	// As ttft bench runs: no collections below a 2 GiB heap, for both.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(2 << 30))
	ctx := context.Background()
	var sumT, sumM float64
	for round := -warm; round < rounds; round++ {
		for _, who := range []string{"ttft", "minimal", "ttft-bare"} {
			if only := os.Getenv("TTFT_CPU_ONLY"); only != "" && only != who {
				continue // profiling one client (TTFT_CPU_ONLY=ttft|minimal|ttft-bare)
			}
			c0, w0 := rusage(), time.Now()
			var n int64
			if who != "minimal" {
				n, err = ttftClient(ctx, base, streams, requests, filepath.Join(t.TempDir(), "run"), who == "ttft-bare")
			} else {
				n, err = minimalClient(ctx, base, streams, requests)
			}
			cpu, wall := rusage()-c0, time.Since(w0)
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			if n < int64(requests)*99/100 {
				t.Fatalf("%s: %d of %d requests completed", who, n, requests)
			}
			per := float64(cpu.Microseconds()) / float64(n)
			what := fmt.Sprintf("round %d", round)
			if round < 0 {
				what = "warm-up"
			}
			t.Logf("%s %-7s %d streams: %d requests in %v, CPU %v: %.1f µs/request, %.1f µs/token event", what, who, streams, n, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), per, per/8)
			switch {
			case round < 0:
			case who == "ttft":
				sumT += per
			case who == "minimal":
				sumM += per
			}
		}
	}
	if sumM > 0 && sumT > 0 {
		t.Logf("ttft / minimal CPU per request: %.2f×", sumT/sumM)
	}
}

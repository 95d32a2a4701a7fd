package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// errStats is a distribution of an error in milliseconds.
type errStats struct{ P50, P99, Max float64 }

func describeErr(xs []float64) errStats {
	m := stats.Describe(xs, stats.DescribeOptions{})
	return errStats{m.P50, m.P99, m.Max}
}

// selfCheckResult is what --self-check measured. The client's added TTFT
// error of one request is its measured TTFT minus the server's true one:
// (first token seen − written) + (request arrived − sent), the receive
// and send sides, both against the server's kernel-stamped arrival and
// its stamp just before writing the first token.
type selfCheckResult struct {
	Streams  int
	Requests int
	Failed   int
	// Kernel counts first tokens timed by the kernel's receive stamp;
	// NewConns the measured requests that had to open a connection.
	Kernel, NewConns  int
	Total, Recv, Send errStats
	// Read is Total had events been timed when each read returned.
	Read          errStats
	EventsPerS    float64
	CPUPerEventUs float64 // this process's CPU per token event
}

// timingTarget is an exact-timing server, in this process or in a helper
// process, and how to ask it when it wrote each first token.
type timingTarget struct {
	url     string
	timings func(ctx context.Context) (map[string][2]time.Time, error)
	stop    func()
	// external is true when the server runs in its own process, so this
	// process's CPU time is the client's alone.
	external bool
}

// runSelfCheck measures the client's own error against a server that stamps
// the moment each first token is written. By default the server runs in
// this process: on a 2-core machine that gave lower tails than a helper
// process (two Go runtimes time-sliced by the kernel). With
// TTFT_SELFCHECK_SERVER=process it runs in a helper process instead, and
// the CPU figures are then the client's alone.
func runSelfCheck(ctx context.Context, env *Env, o *benchOptions) error {
	streams := 1000
	if o.load.fs != nil && o.load.fs.Changed("concurrency") {
		streams = o.load.Concurrency
	}
	requests := 3 * streams
	if o.load.fs != nil && o.load.fs.Changed("requests") && o.load.Requests > 0 {
		requests = o.load.Requests
	}
	defer tuneGC(env)() // as bench runs
	external := env.getenv("TTFT_SELFCHECK_SERVER") == "process" && env.Executable != ""
	where := "in this process"
	if external {
		where = "in a helper process"
	}
	fmt.Fprintf(env.Stderr, "ttft bench --self-check: %d concurrent streams, %d requests against an exact-timing server on loopback (%s)\n", streams, requests, where)
	acc, err := selfCheckAccuracy(ctx, env, external, streams, requests)
	if err != nil {
		return err
	}
	rateStreams := min(256, streams)
	fmt.Fprintf(env.Stderr, "ttft bench --self-check: event-rate phase (%d streams, tokens as fast as possible)\n", rateStreams)
	rate, external, err := selfCheckRate(ctx, env, external, rateStreams, 4*rateStreams, 200)
	if err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "\nclient self-check on %d CPUs (%s), server %s\n", runtime.GOMAXPROCS(0), runtime.Version(), where)
	fmt.Fprintf(w, "  accuracy at %d concurrent streams, %d requests (%d failed):\n", acc.Streams, acc.Requests, acc.Failed)
	clock := fmt.Sprintf("first tokens timed by kernel receive timestamps: %d of %d", acc.Kernel, acc.Requests-acc.Failed)
	if acc.Kernel == 0 {
		clock = "first tokens timed when each read returned (no kernel receive timestamps here)"
	}
	fmt.Fprintf(w, "    %s; on new connections (set-up counted as error): %d\n", clock, acc.NewConns)
	line := func(name string, e errStats) {
		fmt.Fprintf(w, "    %-52s p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", name, e.P50, e.P99, e.Max)
	}
	line("added TTFT error (measured − server's true TTFT)", acc.Total)
	line("  receive side (first token seen − written)", acc.Recv)
	line("  send side (request arrived − sent)", acc.Send)
	if acc.Kernel > 0 {
		line("added error had events been timed at read return", acc.Read)
	}
	who := "client and in-process server together: an upper bound"
	if external {
		who = "client alone"
	}
	fmt.Fprintf(w, "  throughput at %d streams: %.0f token events/s sustained; %.2f µs of CPU per event (%s)\n",
		rate.Streams, rate.EventsPerS, rate.CPUPerEventUs, who)
	if acc.Total.P99 > 0.5 {
		fmt.Fprintf(w, "  warning: added error P99 %.3f ms is above 0.5 ms on this machine (is something else using the CPUs?): TTFT differences smaller than ~%.1f ms are not resolvable here\n", acc.Total.P99, 2*acc.Total.P99)
	}
	if acc.Failed > 0 {
		return failErr("self-check: %d requests failed", acc.Failed)
	}
	return nil
}

func startTimingTarget(ctx context.Context, env *Env, external bool, first, interval time.Duration, tokens int) (*timingTarget, error) {
	if external {
		t, err := startExternalTimingServer(ctx, env.Executable, first, interval, tokens)
		if err == nil {
			return t, nil
		}
		fmt.Fprintf(env.Stderr, "ttft bench --self-check: helper process failed (%v); running the server in this process\n", err)
	}
	ts := bench.NewTimingServer(first, interval, tokens)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("self-check server: %w", err)
	}
	srv := ts.Start(ln)
	url := "http://" + ln.Addr().String()
	return &timingTarget{url: url, stop: func() { _ = srv.Close() }, timings: func(ctx context.Context) (map[string][2]time.Time, error) {
		return fetchTimings(ctx, url)
	}}, nil
}

// startExternalTimingServer runs "ttft timing-server" and reads its URL from
// the first line it prints; closing its stdin stops it.
func startExternalTimingServer(ctx context.Context, exe string, first, interval time.Duration, tokens int) (*timingTarget, error) {
	cmd := exec.CommandContext(ctx, exe, "timing-server", "--first", first.String(), "--interval", interval.String(), "--tokens", fmt.Sprint(tokens))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { stdin.Close(); _ = cmd.Wait() }
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(url, "http://") {
		stop()
		return nil, fmt.Errorf("timing server did not announce its address (%q, %v)", url, err)
	}
	return &timingTarget{url: url, stop: stop, external: true, timings: func(ctx context.Context) (map[string][2]time.Time, error) {
		return fetchTimings(ctx, url)
	}}, nil
}

func fetchTimings(ctx context.Context, url string) (map[string][2]time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/_timings", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the timing server's stamps: %w", err)
	}
	defer resp.Body.Close()
	var raw map[string][2]int64
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("reading the timing server's stamps: %w", err)
	}
	out := make(map[string][2]time.Time, len(raw))
	for id, v := range raw {
		out[id] = [2]time.Time{time.Unix(0, v[0]), time.Unix(0, v[1])}
	}
	return out, nil
}

func selfCheckAccuracy(ctx context.Context, env *Env, external bool, streams, requests int) (selfCheckResult, error) {
	// Long first-token delays keep many streams open at modest request
	// rates, and the ramp-up spreads arrivals so that first tokens are not
	// all written in the same instant (no real server does that).
	const firstDelay, interval, tokens = 500 * time.Millisecond, 50 * time.Millisecond, 8
	tt, err := startTimingTarget(ctx, env, external, firstDelay, interval, tokens)
	if err != nil {
		return selfCheckResult{}, err
	}
	defer tt.stop()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 16, MaxTokens: tokens, Chat: true, Seed: 1})
	if err != nil {
		return selfCheckResult{}, err
	}
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: tt.url, Request: wire.RequestOptions{Model: "timing-server"},
		Concurrency: streams, Requests: requests, RunID: "selfcheck", RampUp: firstDelay + interval*(tokens-1), TTFTTimeout: 30 * time.Second,
		// One warm-up request per stream opens the connections, as the
		// article's 50 warm-up requests do: a new connection's set-up is in
		// TTFT by design (a user waits for it) but is not the client's error.
		Warmup: streams})
	if err != nil {
		return selfCheckResult{}, err
	}
	res, err := r.Run(ctx, src)
	if err != nil {
		return selfCheckResult{}, err
	}
	if res.Interrupted {
		return selfCheckResult{}, errors.New("self-check interrupted")
	}
	stamps, err := tt.timings(ctx)
	if err != nil {
		return selfCheckResult{}, err
	}
	out := selfCheckResult{Streams: streams, Requests: requests}
	var total, recv, send, read []float64
	for _, rec := range res.Records {
		if rec.Warmup {
			continue
		}
		if !rec.OK() {
			out.Failed++
			continue
		}
		if !rec.ReusedConn {
			out.NewConns++
		}
		st, ok := stamps[rec.ID]
		if !ok {
			continue
		}
		// Wall-clock instants: the server may be another process.
		rv := float64(rec.FirstToken.Round(0).Sub(st[0])) / 1e6
		sd := float64(st[1].Sub(rec.Sent.Round(0))) / 1e6
		recv, send = append(recv, rv), append(send, sd)
		total = append(total, rv+sd)
		read = append(read, rv+sd+rec.FirstTokenReadDelayMs)
		if rec.ArrivalClock == record.ClockKernel {
			out.Kernel++
		}
	}
	out.Total, out.Recv, out.Send, out.Read = describeErr(total), describeErr(recv), describeErr(send), describeErr(read)
	return out, nil
}

func selfCheckRate(ctx context.Context, env *Env, external bool, streams, requests, tokens int) (selfCheckResult, bool, error) {
	tt, err := startTimingTarget(ctx, env, external, 0, 0, tokens)
	if err != nil {
		return selfCheckResult{}, false, err
	}
	defer tt.stop()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 16, MaxTokens: tokens, Chat: true, Seed: 2})
	if err != nil {
		return selfCheckResult{}, false, err
	}
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: tt.url, Request: wire.RequestOptions{Model: "timing-server"},
		Concurrency: streams, Requests: requests})
	if err != nil {
		return selfCheckResult{}, false, err
	}
	cpu0, t0 := cpuTime(), time.Now()
	res, err := r.Run(ctx, src)
	cpu, wall := cpuTime()-cpu0, time.Since(t0)
	if err != nil {
		return selfCheckResult{}, false, err
	}
	events := 0
	for _, rec := range res.Records {
		events += rec.OutputEvents
	}
	out := selfCheckResult{Streams: streams, Requests: len(res.Records)}
	if events > 0 {
		out.EventsPerS = float64(events) / wall.Seconds()
		out.CPUPerEventUs = float64(cpu.Microseconds()) / float64(events)
	}
	return out, tt.external, nil
}

// newTimingServerCmd is the hidden helper process of --self-check.
func newTimingServerCmd(env *Env) *cobra.Command {
	var (
		first, interval time.Duration
		tokens          int
		listen          string
	)
	cmd := &cobra.Command{
		Use:    "timing-server",
		Short:  "Exact-timing streaming server for bench --self-check (runs until stdin closes)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usageErr("timing-server: %v", err)
			}
			defer tuneGC(env)()
			srv := bench.NewTimingServer(first, interval, tokens).Start(ln)
			fmt.Fprintf(env.Stdout, "http://%s\n", ln.Addr())
			done := make(chan struct{})
			go func() {
				if env.Stdin != nil {
					_, _ = io.Copy(io.Discard, env.Stdin)
				}
				close(done)
			}()
			select {
			case <-done:
			case <-cmd.Context().Done():
			}
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.DurationVar(&first, "first", 500*time.Millisecond, "delay from arrival to the first token")
	f.DurationVar(&interval, "interval", 50*time.Millisecond, "gap between tokens")
	f.IntVar(&tokens, "tokens", 8, "tokens per response")
	f.StringVar(&listen, "listen", "127.0.0.1:0", "address (loopback)")
	return cmd
}

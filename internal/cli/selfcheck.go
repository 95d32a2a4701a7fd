package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// selfCheckResult is what --self-check measured.
type selfCheckResult struct {
	Streams                            int
	Requests                           int
	Failed                             int
	RecvErrP50, RecvErrP99, RecvErrMax float64 // ms: first token seen − first token written
	SendP50, SendP99                   float64 // ms: request arrived at server − client start
	EventsPerS                         float64
	CPUPerEventUs                      float64 // process CPU (client + in-process server) per token event
	CPUPerRequestUs                    float64
}

// runSelfCheck measures the client's own error against an in-process server
// that stamps the moment each first token is written.
func runSelfCheck(ctx context.Context, env *Env, o *benchOptions) error {
	streams := 1000
	if o.load.fs != nil && o.load.fs.Changed("concurrency") {
		streams = o.load.Concurrency
	}
	requests := 3 * streams
	if o.load.fs != nil && o.load.fs.Changed("requests") && o.load.Requests > 0 {
		requests = o.load.Requests
	}
	fmt.Fprintf(env.Stderr, "ttft bench --self-check: %d concurrent streams, %d requests against an exact-timing server on loopback\n", streams, requests)
	defer tuneGC(env)() // as bench runs
	acc, err := selfCheckAccuracy(ctx, streams, requests)
	if err != nil {
		return err
	}
	rateStreams := min(256, streams)
	fmt.Fprintf(env.Stderr, "ttft bench --self-check: event-rate phase (%d streams, tokens as fast as possible)\n", rateStreams)
	rate, err := selfCheckRate(ctx, rateStreams, 4*rateStreams, 200)
	if err != nil {
		return err
	}
	w := env.Stdout
	fmt.Fprintf(w, "\nclient self-check on %d CPUs (%s)\n", runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintf(w, "  accuracy at %d concurrent streams, %d requests (%d failed):\n", acc.Streams, acc.Requests, acc.Failed)
	fmt.Fprintf(w, "    added TTFT error (first token seen − written)  p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", acc.RecvErrP50, acc.RecvErrP99, acc.RecvErrMax)
	fmt.Fprintf(w, "    send path (request arrived − client start)      p50 %.3f ms  p99 %.3f ms\n", acc.SendP50, acc.SendP99)
	fmt.Fprintf(w, "  throughput at %d streams: %.0f token events/s sustained; process CPU %.2f µs per event (client + in-process server: an upper bound)\n",
		rate.Streams, rate.EventsPerS, rate.CPUPerEventUs)
	if acc.RecvErrP99 > 0.5 {
		fmt.Fprintf(w, "  warning: added error P99 %.3f ms is above 0.5 ms on this machine: TTFT differences smaller than ~%.1f ms are not resolvable here\n", acc.RecvErrP99, 2*acc.RecvErrP99)
	}
	if acc.Failed > 0 {
		return failErr("self-check: %d requests failed", acc.Failed)
	}
	return nil
}

func startTimingServer(ts *bench.TimingServer) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("self-check server: %w", err)
	}
	srv := &http.Server{Handler: ts}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func selfCheckAccuracy(ctx context.Context, streams, requests int) (selfCheckResult, error) {
	// Long first-token delays keep many streams open at modest request
	// rates, and the ramp-up spreads arrivals so that first tokens are not
	// all written in the same instant (no real server does that).
	const firstDelay, interval, tokens = 500 * time.Millisecond, 50 * time.Millisecond, 8
	ts := bench.NewTimingServer(firstDelay, interval, tokens)
	url, stop, err := startTimingServer(ts)
	if err != nil {
		return selfCheckResult{}, err
	}
	defer stop()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 16, MaxTokens: 8, Chat: true, Seed: 1})
	if err != nil {
		return selfCheckResult{}, err
	}
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: url, Request: wire.RequestOptions{Model: "timing-server"},
		Concurrency: streams, Requests: requests, RunID: "selfcheck", RampUp: firstDelay + interval*(tokens-1), TTFTTimeout: 30 * time.Second})
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
	out := selfCheckResult{Streams: streams, Requests: len(res.Records)}
	var recv, send []float64
	for _, rec := range res.Records {
		if !rec.OK() {
			out.Failed++
			continue
		}
		first, arrived, ok := ts.FirstTokenWrite(rec.ID)
		if !ok {
			continue
		}
		recv = append(recv, float64(rec.FirstToken.Sub(first))/1e6)
		send = append(send, float64(arrived.Sub(rec.Sent))/1e6)
	}
	rm := stats.Describe(recv, stats.DescribeOptions{})
	sm := stats.Describe(send, stats.DescribeOptions{})
	out.RecvErrP50, out.RecvErrP99, out.RecvErrMax = rm.P50, rm.P99, rm.Max
	out.SendP50, out.SendP99 = sm.P50, sm.P99
	return out, nil
}

func selfCheckRate(ctx context.Context, streams, requests, tokens int) (selfCheckResult, error) {
	ts := bench.NewTimingServer(0, 0, tokens)
	url, stop, err := startTimingServer(ts)
	if err != nil {
		return selfCheckResult{}, err
	}
	defer stop()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 16, MaxTokens: tokens, Chat: true, Seed: 2})
	if err != nil {
		return selfCheckResult{}, err
	}
	r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: url, Request: wire.RequestOptions{Model: "timing-server"},
		Concurrency: streams, Requests: requests})
	if err != nil {
		return selfCheckResult{}, err
	}
	cpu0, t0 := cpuTime(), time.Now()
	res, err := r.Run(ctx, src)
	cpu, wall := cpuTime()-cpu0, time.Since(t0)
	if err != nil {
		return selfCheckResult{}, err
	}
	events := 0
	for _, rec := range res.Records {
		events += rec.OutputEvents
	}
	out := selfCheckResult{Streams: streams, Requests: len(res.Records)}
	if events > 0 {
		out.EventsPerS = float64(events) / wall.Seconds()
		out.CPUPerEventUs = float64(cpu.Microseconds()) / float64(events)
		out.CPUPerRequestUs = float64(cpu.Microseconds()) / float64(len(res.Records))
	}
	return out, nil
}

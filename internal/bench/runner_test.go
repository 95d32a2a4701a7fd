package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

func fixedSource(t testing.TB, prompt, max int) workload.Source {
	t.Helper()
	src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: prompt, MaxTokens: max, Chat: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

type memSink struct {
	mu   sync.Mutex
	recs []record.Record
}

func (m *memSink) Write(r *record.Record) error {
	m.mu.Lock()
	m.recs = append(m.recs, *r)
	m.mu.Unlock()
	return nil
}

func TestClosedLoopMeasuresKnownTiming(t *testing.T) {
	ts := NewTimingServer(30*time.Millisecond, 5*time.Millisecond, 8)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	sink := &memSink{}
	r, err := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Request: wire.RequestOptions{Model: "m", Temperature: 0.7},
		Concurrency: 4, Requests: 12, Warmup: 2, RunID: "t", Sinks: []Sink{sink}, Tokenizer: workload.DefaultTokenizer()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), fixedSource(t, 64, 8))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 14 || len(sink.recs) != 14 {
		t.Fatalf("records %d, sink %d; want 14 (12 + 2 warm-up)", len(res.Records), len(sink.recs))
	}
	warm := 0
	for _, rec := range res.Records {
		if rec.Warmup {
			warm++
			continue
		}
		if !rec.OK() {
			t.Fatalf("request %d failed: %s %s", rec.Index, rec.ErrorClass, rec.Error)
		}
		first, recv, ok := ts.FirstTokenWrite(rec.ID)
		if !ok {
			t.Fatalf("server has no record of %s", rec.ID)
		}
		// The measured TTFT covers the server's designed delay and can only
		// exceed it by the client's and kernel's overhead.
		if rec.TTFTMs < 30 || rec.TTFTMs > 30+250 {
			t.Errorf("ttft %.2f ms, want ≥ 30 ms", rec.TTFTMs)
		}
		if rec.FirstToken.Before(first) || rec.Sent.After(recv) {
			t.Errorf("client times inconsistent with the server's: sent %v recv %v first write %v first seen %v", rec.Sent, recv, first, rec.FirstToken)
		}
		if rec.OutputEvents != 8 || len(rec.ITLMs) != 7 || rec.OutputTokensUsage != 8 {
			t.Errorf("events %d itl %d usage %d", rec.OutputEvents, len(rec.ITLMs), rec.OutputTokensUsage)
		}
		if rec.OutputTokensTokenizer != 16 { // " tok0" = " tok" + "0"
			t.Errorf("tokenizer count %d", rec.OutputTokensTokenizer)
		}
		if rec.TTFBMs <= 0 || rec.TTFBMs > rec.TTFTMs || rec.TTFEMs > rec.TTFTMs {
			t.Errorf("ttfb %.2f ttfe %.2f ttft %.2f", rec.TTFBMs, rec.TTFEMs, rec.TTFTMs)
		}
		if rec.PromptTokens != 64 {
			t.Errorf("prompt tokens %d", rec.PromptTokens)
		}
		if runtime.GOOS == "linux" && (rec.ArrivalClock != record.ClockKernel || rec.FirstTokenReadDelayMs < 0) {
			t.Errorf("arrival clock %q, read delay %.3f ms; want kernel receive timestamps on Linux", rec.ArrivalClock, rec.FirstTokenReadDelayMs)
		}
	}
	if warm != 2 {
		t.Errorf("warm-up records %d, want 2", warm)
	}
}

// TestReadClockTimesEventsAtTheRead: with ReadClock the kernel's stamps
// are not used, and the record says so.
func TestReadClockTimesEventsAtTheRead(t *testing.T) {
	ts := NewTimingServer(5*time.Millisecond, time.Millisecond, 3)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	r, err := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Request: wire.RequestOptions{Model: "m"},
		Concurrency: 2, Requests: 4, RunID: "rc", ReadClock: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), fixedSource(t, 8, 3))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range res.Records {
		if !rec.OK() || rec.ArrivalClock != "" || rec.FirstTokenReadDelayMs != 0 {
			t.Errorf("request %d: ok %v, arrival clock %q, read delay %v; want read-time stamps", rec.Index, rec.OK(), rec.ArrivalClock, rec.FirstTokenReadDelayMs)
		}
		first, _, _ := ts.FirstTokenWrite(rec.ID)
		if rec.FirstToken.Before(first) {
			t.Errorf("first token seen %v before it was written %v", rec.FirstToken, first)
		}
	}
}

func TestFaultsAreClassifiedAndTheRunGoesOn(t *testing.T) {
	ts := NewTimingServer(time.Millisecond, time.Millisecond, 4)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	for _, tc := range []struct {
		fault, class string
	}{
		{"status", record.ErrHTTPStatus},
		{"cut", record.ErrStreamCut},
		{"malformed", record.ErrMalformed},
		{"error-event", record.ErrStreamError},
		{"stall", record.ErrTTFTTimeout},
		{"no-done", ""},
		{"json", ""},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Concurrency: 2, Requests: 3,
				TTFTTimeout: 300 * time.Millisecond,
				Request:     wire.RequestOptions{Model: "m", Headers: http.Header{"X-Test-Fault": {tc.fault}}}})
			res, err := r.Run(context.Background(), fixedSource(t, 8, 4))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Records) != 3 {
				t.Fatalf("%d records, want 3", len(res.Records))
			}
			for _, rec := range res.Records {
				if rec.ErrorClass != tc.class {
					t.Errorf("class %q (%s), want %q", rec.ErrorClass, rec.Error, tc.class)
				}
			}
		})
	}
}

func TestRefusedConnection(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: "http://" + addr, Requests: 2, Request: wire.RequestOptions{Model: "m"}})
	res, _ := r.Run(context.Background(), fixedSource(t, 8, 4))
	if len(res.Records) != 2 || res.Records[0].ErrorClass != record.ErrConnect {
		t.Fatalf("%+v", res.Records)
	}
}

func TestWholeRequestTimeout(t *testing.T) {
	ts := NewTimingServer(time.Millisecond, 100*time.Millisecond, 50)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Requests: 1, Timeout: 250 * time.Millisecond, Request: wire.RequestOptions{Model: "m"}})
	res, _ := r.Run(context.Background(), fixedSource(t, 8, 50))
	if rec := res.Records[0]; rec.ErrorClass != record.ErrTimeout || rec.FirstToken.IsZero() {
		t.Fatalf("%s %s first=%v", rec.ErrorClass, rec.Error, rec.FirstToken)
	}
}

func TestOpenLoopKeepsTheSchedule(t *testing.T) {
	ts := NewTimingServer(20*time.Millisecond, time.Millisecond, 2)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	r, _ := New(Options{API: wire.OpenAICompletions, BaseURL: srv.URL, Rate: 50, Arrival: "constant", Requests: 20, Request: wire.RequestOptions{Model: "m"}})
	res, err := r.Run(context.Background(), fixedSource(t, 8, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 20 {
		t.Fatalf("%d records", len(res.Records))
	}
	byIdx := map[int]record.Record{}
	for _, rec := range res.Records {
		byIdx[rec.Index] = rec
		if !rec.OK() {
			t.Fatalf("%s %s", rec.ErrorClass, rec.Error)
		}
	}
	// Constant 50/s: intended times 20 ms apart regardless of the 20 ms TTFT.
	for i := 1; i < 20; i++ {
		gap := byIdx[i].Intended.Sub(byIdx[i-1].Intended)
		if gap != 20*time.Millisecond {
			t.Fatalf("intended gap %d = %v", i, gap)
		}
	}
}

func TestInterruptKeepsCompletedRecords(t *testing.T) {
	ts := NewTimingServer(5*time.Millisecond, 50*time.Millisecond, 1000)
	srv := httptest.NewServer(ts)
	defer srv.Close()
	sink := &memSink{}
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Concurrency: 2, Requests: 100, Sinks: []Sink{sink}, Request: wire.RequestOptions{Model: "m"}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ctx, stop := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, stop)
	start := time.Now()
	res, _ := r.Run(ctx, fixedSource(t, 8, 1000))
	if time.Since(start) > 2*time.Second {
		t.Fatalf("interrupt did not stop the run promptly")
	}
	if !res.Interrupted || res.Canceled != 2 || len(res.Records) != 0 {
		t.Fatalf("interrupted=%v canceled=%d records=%d", res.Interrupted, res.Canceled, len(res.Records))
	}
	for _, rec := range sink.recs {
		if rec.ErrorClass != record.ErrCanceled {
			t.Fatalf("sink got %s", rec.ErrorClass)
		}
	}
}

func TestNonStreamedAnswerIsRecordedAsSuch(t *testing.T) {
	srv := httptest.NewServer(NewTimingServer(20*time.Millisecond, time.Millisecond, 4))
	defer srv.Close()
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Requests: 2,
		Request: wire.RequestOptions{Model: "m", Headers: http.Header{"X-Test-Fault": {"json"}}}})
	res, err := r.Run(context.Background(), fixedSource(t, 8, 4))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range res.Records {
		if !rec.OK() || !rec.NotStreamed || rec.TTFTMs != rec.E2EMs || rec.TTFTMs < 20 || rec.OutputTokensUsage != 2 || rec.OutputEvents != 1 {
			t.Fatalf("%+v", rec)
		}
	}
}

// TestKernelStampsOverTLS: over HTTPS/1.1 events are still timed by the
// kernel (the stamping connection sits under TLS); over HTTP/2, whose reads
// carry many streams, they are timed at the read.
func TestKernelStampsOverTLS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive timestamps are read on Linux only")
	}
	for _, h2 := range []bool{false, true} {
		ts := NewTimingServer(20*time.Millisecond, time.Millisecond, 3)
		var h2Requests atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 {
				h2Requests.Add(1)
			}
			ts.ServeHTTP(w, r)
		}))
		srv.EnableHTTP2 = h2
		srv.StartTLS()
		tr := NewTransport(2)
		tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		r, err := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Request: wire.RequestOptions{Model: "m"},
			Concurrency: 2, Requests: 6, RunID: "tls", Client: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run(context.Background(), fixedSource(t, 8, 3))
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := h2Requests.Load() > 0; got != h2 {
			t.Fatalf("HTTP/2 negotiated %v, want %v", got, h2)
		}
		want := record.ClockKernel
		if h2 {
			want = ""
		}
		kernel := 0
		for _, rec := range res.Records {
			if !rec.OK() {
				t.Fatalf("h2=%v: request %d failed: %s", h2, rec.Index, rec.Error)
			}
			if rec.ArrivalClock == record.ClockKernel {
				kernel++
			}
			if h2 && rec.ArrivalClock != "" {
				t.Errorf("HTTP/2 request %d timed by the kernel", rec.Index)
			}
			if first, _, _ := ts.FirstTokenWrite(rec.ID); rec.FirstToken.Before(first) {
				t.Errorf("h2=%v: first token seen %v before it was written %v", h2, rec.FirstToken, first)
			}
		}
		// The host-wide switch that turns stamping on may miss the very
		// first segments of a process (see rxstamp_linux_test.go).
		if !h2 && kernel < len(res.Records)-2 {
			t.Errorf("HTTPS/1.1: %d of %d requests timed by the kernel, want %q on (almost) all", kernel, len(res.Records), want)
		}
	}
}

// TestConnectionReusedAfterEndMarker: a server whose chunked stream ends a
// little after its [DONE] keeps one connection for a closed loop of one
// worker. Closing the body at [DONE] would drop the connection each time,
// and each next request would pay a new connect inside its TTFT.
func TestConnectionReusedAfterEndMarker(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"}}]}\n\ndata: [DONE]\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // the chunked terminator comes later
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	r, err := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Request: wire.RequestOptions{Model: "m"},
		Concurrency: 1, Requests: 5, RunID: "reuse"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), fixedSource(t, 8, 1))
	if err != nil {
		t.Fatal(err)
	}
	for i, rec := range res.Records {
		if !rec.OK() {
			t.Fatalf("request %d failed: %s", i, rec.Error)
		}
		if rec.TTFTMs >= 20 {
			t.Errorf("request %d: TTFT %.1f ms includes the wait for the stream's end", i, rec.TTFTMs)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 sequential requests, want 1", n)
	}
}

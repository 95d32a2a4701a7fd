package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

type cannedTransport struct{ body []byte }

func (c cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(c.body)), Request: r}, nil
}

func cannedStream(tokens int) []byte {
	var b strings.Builder
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for i := range tokens {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok%d"},"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":16,"completion_tokens":` + fmt.Sprint(tokens) + `}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

// BenchmarkClientPerRequest measures the client's CPU per request and per
// token event with no server and no socket: the HTTP exchange returns a
// canned 100-event stream, so everything timed is ttft's own work
// (request building, SSE parsing, decoding, timestamps, the record).
func BenchmarkClientPerRequest(b *testing.B) {
	const tokens = 100
	r, err := New(Options{API: wire.OpenAIChat, BaseURL: "http://127.0.0.1:1", Request: wire.RequestOptions{Model: "m", Temperature: 0.7},
		Client: &http.Client{Transport: cannedTransport{cannedStream(tokens)}}})
	if err != nil {
		b.Fatal(err)
	}
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: strings.Repeat("word ", 128)}}, MaxTokens: tokens, PromptTokens: 128}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r.do(ctx, req, time.Time{})
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/1000, "µs/request")
	b.ReportMetric(per/1000/tokens, "µs/event")
	r.recs = nil
}

// BenchmarkClientPerRequestOneToken isolates the per-request cost: the
// same exchange with a single token event.
func BenchmarkClientPerRequestOneToken(b *testing.B) {
	r, err := New(Options{API: wire.OpenAIChat, BaseURL: "http://127.0.0.1:1", Request: wire.RequestOptions{Model: "m", Temperature: 0.7},
		Client: &http.Client{Transport: cannedTransport{cannedStream(1)}}})
	if err != nil {
		b.Fatal(err)
	}
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: strings.Repeat("word ", 128)}}, MaxTokens: 1, PromptTokens: 128}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r.do(ctx, req, time.Time{})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "µs/request")
	r.recs = nil
}

// BenchmarkLoopbackStream runs whole requests against the in-process timing
// server over loopback: client and server CPU together, an upper bound.
func BenchmarkLoopbackStream(b *testing.B) {
	const tokens = 100
	srv := httptest.NewServer(NewTimingServer(0, 0, tokens))
	defer srv.Close()
	r, _ := New(Options{API: wire.OpenAIChat, BaseURL: srv.URL, Request: wire.RequestOptions{Model: "m"}})
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: "hi"}}, MaxTokens: tokens}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r.do(ctx, req, time.Time{})
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/1000/tokens, "µs/event")
}

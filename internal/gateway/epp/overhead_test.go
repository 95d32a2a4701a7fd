package epp

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The decision overhead is the time from the request body's end reaching
// the picker to its header mutation being sent (Options.OnDecision), the
// picker's share of every request's TTFT. These measure it on loopback
// with the whole protocol exchange per request, as Envoy drives it, but
// no engine behind (the response is a canned two-event stream), so that
// only the picker's and gRPC's costs are in it.

// overheadFleet is n endpoints the picker never scrapes (all eligible),
// serving model "m".
func overheadFleet(n int) []Endpoint {
	eps := make([]Endpoint, n)
	for i := range eps {
		eps[i] = Endpoint{Addr: fmt.Sprintf("127.0.100.%d:8000", i+1), Models: []string{"m"}}
	}
	return eps
}

var cannedStream = []byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n")

// exchangeOnce runs one request's full ext_proc exchange and returns the
// latency the data plane saw from its last body message to the header
// mutation.
func exchangeOnce(ctx context.Context, e *envoy, body []byte) (time.Duration, error) {
	st, err := e.proc.Process(ctx)
	if err != nil {
		return 0, err
	}
	defer st.CloseSend()
	send := func(r *extprocv3.ProcessingRequest) error { return st.Send(r) }
	if err := send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(map[string]string{
			":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json", "x-slo-class": "chat"})}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED},
	}); err != nil {
		return 0, err
	}
	sent := time.Now()
	if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}}); err != nil {
		return 0, err
	}
	r, err := st.Recv()
	if err != nil {
		return 0, err
	}
	seen := time.Since(sent)
	if r.GetRequestHeaders() == nil {
		return 0, fmt.Errorf("first answer %v", r)
	}
	dest := r.GetDynamicMetadata().GetFields()[DestinationNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	if _, err := st.Recv(); err != nil { // the body echo
		return 0, err
	}
	if err := send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(map[string]string{":status": "200", "content-type": "text/event-stream"})}},
		MetadataContext: lbMetadata(DestinationNamespace, ServedKey, structpb.NewStringValue(dest)),
	}); err != nil {
		return 0, err
	}
	if _, err := st.Recv(); err != nil {
		return 0, err
	}
	if err := send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: cannedStream, EndOfStream: true}}}); err != nil {
		return 0, err
	}
	if _, err := st.Recv(); err != nil {
		return 0, err
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		return 0, fmt.Errorf("stream not ended: %v", err)
	}
	return seen, nil
}

// durations collects overheads from concurrent streams.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (c *durations) add(d time.Duration) {
	c.mu.Lock()
	c.d = append(c.d, d)
	c.mu.Unlock()
}

func (c *durations) quantiles() (p50, p99 time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.d) == 0 {
		return 0, 0
	}
	s := slices.Clone(c.d)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// overheadBody is a realistic chat request: a 2 KiB shared system prompt
// and a short question (≈ 600 tokens).
func overheadBody(i int) []byte {
	return chatBody("m", prefixPrompt(i % 16)[:2048], fmt.Sprintf("question %d: what is the time to first token?", i))
}

// TestDecisionOverhead drives the picker open-loop at a fixed rate
// (TTFT_EPP_RATE req/s, default 1000; TTFT_EPP_SECONDS, default 2) and
// reports the decision overhead's P50 and P99. The target is
// P99 ≤ 200 µs at 2,000 req/s on loopback; the test asserts only a bound
// a loaded 2-core CI machine keeps (5 ms), and logs the figures.
//
//	TTFT_EPP_RATE=2000 TTFT_EPP_SECONDS=5 go test -run TestDecisionOverhead -v ./internal/gateway/epp/
func TestDecisionOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	rate, secs := 1000.0, 2.0
	if raceEnabled {
		// The race detector makes each exchange many times dearer: the
		// protocol is still exercised concurrently, the figures are not
		// judged.
		rate, secs = 200, 1
	}
	if v, err := strconv.ParseFloat(os.Getenv("TTFT_EPP_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("TTFT_EPP_SECONDS"), 64); err == nil && v > 0 {
		secs = v
	}
	var inside, seen durations
	_, env := startPicker(t, Options{ScrapeInterval: -1, Seed: 1, OnDecision: inside.add}, overheadFleet(8))
	// Warm up connections and the predictors' pools.
	for i := range 50 {
		if _, err := exchangeOnce(context.Background(), env, overheadBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	inside = durations{}
	n := int(rate * secs)
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		// Open loop: arrivals at their intended times, whatever the
		// picker's pace.
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := exchangeOnce(ctx, env, overheadBody(i))
			if err != nil {
				errs <- err
				return
			}
			seen.add(d)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p50, p99 := inside.quantiles()
	s50, s99 := seen.quantiles()
	t.Logf("%d requests at %.0f req/s (achieved %.0f req/s): decision overhead P50 %v P99 %v (picker: body end → header mutation sent); "+
		"as the data plane sees it (last body message sent → mutation received) P50 %v P99 %v",
		n, rate, float64(n)/elapsed.Seconds(), p50, p99, s50, s99)
	if len(inside.d) != n {
		t.Errorf("%d decisions observed, want %d", len(inside.d), n)
	}
	if raceEnabled {
		return
	}
	// The median holds even on a machine shared with other work; the tail
	// is judged only when the load generator kept its rate (the machine
	// was not saturated by others), and loosely: the 200 µs is a
	// figure for an idle multi-core machine (docs/endpoint-picker.md).
	if p50 > time.Millisecond {
		t.Errorf("decision overhead P50 %v exceeds 1 ms", p50)
	}
	if achieved := float64(n) / elapsed.Seconds(); achieved < 0.95*rate {
		t.Logf("achieved %.0f of %.0f req/s: the machine is saturated, P99 not judged", achieved, rate)
	} else if p99 > 5*time.Millisecond {
		t.Errorf("decision overhead P99 %v exceeds 5 ms", p99)
	}
}

// BenchmarkDecision runs whole exchanges back to back from parallel
// streams and reports the picker's decision overhead quantiles.
//
//	go test -run '^$' -bench BenchmarkDecision -benchtime 5000x ./internal/gateway/epp/
func BenchmarkDecision(b *testing.B) {
	var inside durations
	_, env := startPicker(b, Options{ScrapeInterval: -1, Seed: 1, OnDecision: inside.add}, overheadFleet(8))
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = overheadBody(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var mu sync.Mutex
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			body := bodies[i%len(bodies)]
			i++
			mu.Unlock()
			if _, err := exchangeOnce(context.Background(), env, body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	p50, p99 := inside.quantiles()
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkPick is the decision alone, without gRPC: body parse, prefix
// hashing, the scheduler's profile, the destination list.
//
//	go test -run '^$' -bench BenchmarkPick -benchmem ./internal/gateway/epp/
func BenchmarkPick(b *testing.B) {
	s, err := New(Options{ScrapeInterval: -1, Seed: 1}, overheadFleet(8))
	if err != nil {
		b.Fatal(err)
	}
	hm := hdrMap(map[string]string{":path": "/v1/chat/completions", "x-slo-class": "chat"})
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = overheadBody(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d := s.pick(hm, bodies[i%len(bodies)], nil, false)
		if d.t == nil {
			b.Fatal(d.msg)
		}
		d.t.FirstToken()
		d.t.End(0)
	}
}

// BenchmarkParseBody is the request body's parse alone.
func BenchmarkParseBody(b *testing.B) {
	body := overheadBody(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseBody(body); err != nil {
			b.Fatal(err)
		}
	}
}

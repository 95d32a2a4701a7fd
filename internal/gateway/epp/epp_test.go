package epp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// prefixPrompt is a system prompt long enough to span many hashed blocks.
func prefixPrompt(group int) string {
	return strings.Repeat(fmt.Sprintf("You are assistant number %d of a test fleet; answer briefly. ", group), 40)
}

func TestPrefixAffinityThroughEnvoyHarness(t *testing.T) {
	engines := startEngines(t, 3, nil)
	var eps []Endpoint
	for _, e := range engines {
		eps = append(eps, Endpoint{Addr: hostPort(e.URL())})
	}
	for _, policy := range []string{sched.CacheAware, sched.PrefixAffinity} {
		t.Run(policy, func(t *testing.T) {
			s, env := startPicker(t, Options{Policy: policy, Seed: 7, Fallbacks: 0}, eps)
			waitReady(t, s)
			model := engines[0].ModelName()
			const groups, perGroup = 4, 5
			chosen := map[int]string{}
			for i := range groups * perGroup {
				g := i % groups
				o := env.mustDo(call{headers: map[string]string{"x-slo-class": "chat"},
					body: chatBody(model, prefixPrompt(g), fmt.Sprintf("question %d", i))})
				if o.status != 200 || !bytes.Contains(o.body, []byte("data: [DONE]")) {
					t.Fatalf("request %d: status %d, body %q", i, o.status, o.body)
				}
				if !o.clearRouteCache {
					t.Error("the header response must clear the route cache")
				}
				if strings.Contains(o.dest, ",") {
					t.Fatalf("dest %q: no fallbacks were asked for", o.dest)
				}
				if prev, ok := chosen[g]; !ok {
					chosen[g] = o.dest
				} else if prev != o.dest {
					t.Errorf("group %d: request %d went to %s, its prefix is on %s", g, i, o.dest, prev)
				}
			}
			// Every ticket ended and the predictors learnt TTFTs from the
			// streamed first tokens.
			learnt := 0
			for _, b := range s.Scheduler().Backends() {
				if b.InFlight() != 0 || b.QueuedTokens() != 0 {
					t.Errorf("%s: %d in flight, %d queued tokens after all requests ended", b.Name(), b.InFlight(), b.QueuedTokens())
				}
				if len(b.PredictorStats().MAPE) > 0 {
					learnt++
				}
			}
			if learnt == 0 {
				t.Error("no predictor learnt from the first tokens")
			}
			// Picks are counted by the scheduler's reason, as the
			// gateway's decisions are: each group's later requests
			// found their prefix.
			if got := testutil.ToFloat64(s.m.reasons.WithLabelValues(sched.ReasonPrefixHit)); got < groups*(perGroup-1) {
				t.Errorf("%v picks counted as prefix hits, want at least %d", got, groups*(perGroup-1))
			}
			if got := testutil.CollectAndCount(s.m.reasons); got < 2 {
				t.Errorf("picks counted under %d reasons: the first request of each group found no prefix", got)
			}
		})
	}
}

func TestSLOPredictiveKeepsPrefixesTogether(t *testing.T) {
	engines := startEngines(t, 3, nil)
	var eps []Endpoint
	for _, e := range engines {
		eps = append(eps, Endpoint{Addr: hostPort(e.URL())})
	}
	s, env := startPicker(t, Options{Seed: 11}, eps)
	waitReady(t, s)
	model := engines[0].ModelName()
	const groups, perGroup = 3, 8
	byGroup := make([]counter, groups)
	for i := range groups * perGroup {
		g := i % groups
		o := env.mustDo(call{body: chatBody(model, prefixPrompt(g), fmt.Sprintf("q%d", i))})
		byGroup[g].add(o.dest)
	}
	for g := range groups {
		top := 0
		for _, n := range byGroup[g].m {
			top = max(top, n)
		}
		// The first request of a group has no prefix anywhere; after it
		// the prefix-cache hit lowers the predicted TTFT on its engine.
		if top < perGroup-2 {
			t.Errorf("group %d spread over %v: the prefix should hold most of it on one engine", g, byGroup[g].m)
		}
	}
}

func TestDeadAndDrainingEndpointsNotPicked(t *testing.T) {
	engines := startEngines(t, 3, func(i int, c *serve.Config) {
		if i == 2 {
			// Still loading weights for the whole test: /metrics answers 503.
			c.StartupDelay = time.Hour
		}
	})
	// A dead endpoint: an address where nothing listens.
	ln, err := net.Listen("tcp", loopbackAddr(t, 3)+":0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	live, draining, loading := hostPort(engines[0].URL()), hostPort(engines[1].URL()), hostPort(engines[2].URL())
	eps := []Endpoint{{Addr: dead}, {Addr: live}, {Addr: draining}, {Addr: loading}}
	s, env := startPicker(t, Options{ScrapeInterval: 20 * time.Millisecond, Fallbacks: 3}, eps)
	if !s.SetDraining(draining, true) {
		t.Fatal("draining endpoint unknown")
	}
	waitReady(t, s)
	model := engines[0].ModelName()
	for i := range 12 {
		o := env.mustDo(call{body: chatBody(model, prefixPrompt(i), "hi")})
		if o.dest != live {
			t.Fatalf("request %d: destination %q; only %s is alive and not draining", i, o.dest, live)
		}
	}
	if _, eligible, _ := s.Endpoint(dead); eligible {
		t.Error("dead endpoint eligible")
	}
	// Draining the last one leaves nothing: 503 from the picker itself.
	s.SetDraining(live, true)
	o := env.mustDo(call{body: chatBody(model, "sys", "hi")})
	if o.status != 503 || o.immediate == nil {
		t.Fatalf("status %d, immediate %v; want the picker's 503", o.status, o.immediate)
	}
	var eb struct {
		Error struct{ Message string } `json:"error"`
	}
	if err := json.Unmarshal(o.body, &eb); err != nil || eb.Error.Message == "" {
		t.Errorf("503 body %q is not an OpenAI error: %v", o.body, err)
	}
	// Back from draining, it is picked again.
	s.SetDraining(live, false)
	if o := env.mustDo(call{body: chatBody(model, "sys", "hi")}); o.dest != live {
		t.Errorf("after draining ended: destination %q, want %s", o.dest, live)
	}
}

func TestSubsetHint(t *testing.T) {
	engines := startEngines(t, 3, nil)
	var eps []Endpoint
	for _, e := range engines {
		eps = append(eps, Endpoint{Addr: hostPort(e.URL())})
	}
	s, env := startPicker(t, Options{Policy: sched.CacheAware, Fallbacks: 2}, eps)
	waitReady(t, s)
	model := engines[0].ModelName()
	body := chatBody(model, prefixPrompt(1), "hello")
	first := env.mustDo(call{body: body})
	// Same prefix, but the data plane allows only another endpoint.
	other := eps[0].Addr
	if other == first.primary() {
		other = eps[1].Addr
	}
	for range 3 {
		o := env.mustDo(call{body: body, subset: []string{other, "10.9.9.9:8000"}})
		if o.dest != other {
			t.Fatalf("subset hint [%s] not honoured: destination %q", other, o.dest)
		}
	}
	// Fallbacks stay within the subset too.
	two := []string{eps[1].Addr, eps[2].Addr}
	o := env.mustDo(call{body: body, subset: two})
	for _, d := range strings.Split(o.dest, ",") {
		if d != two[0] && d != two[1] {
			t.Errorf("destination list %q leaves the subset %v", o.dest, two)
		}
	}
	if n := len(strings.Split(o.dest, ",")); n != 2 {
		t.Errorf("destination list %q: want the pick and one fallback", o.dest)
	}
	for _, c := range []struct {
		name   string
		subset []string
	}{{"unknown endpoints only", []string{"10.9.9.9:8000"}}, {"empty list", nil}} {
		o := env.mustDo(call{body: body, subset: c.subset, hasSubset: true, noForward: true})
		if o.status != 503 {
			t.Errorf("%s: status %d, want 503", c.name, o.status)
		}
	}
}

func TestFallbackListAndServedEndpoint(t *testing.T) {
	engines := startEngines(t, 3, nil)
	var eps []Endpoint
	for _, e := range engines {
		eps = append(eps, Endpoint{Addr: hostPort(e.URL())})
	}
	reg := prometheus.NewRegistry()
	s, env := startPicker(t, Options{Fallbacks: 2, Registerer: reg}, eps)
	waitReady(t, s)
	model := engines[0].ModelName()
	o := env.mustDo(call{body: chatBody(model, "sys", "hi")})
	list := strings.Split(o.dest, ",")
	if len(list) != 3 || list[0] == list[1] || list[1] == list[2] || list[0] == list[2] {
		t.Fatalf("destination %q: want three distinct endpoints", o.dest)
	}
	if o.contentLength == "" {
		t.Error("content-length not set with the destination")
	}
	if got := testutil.ToFloat64(s.m.served.WithLabelValues(list[0], "true")); got != 1 {
		t.Errorf("served by the chosen endpoint: counted %v, want 1", got)
	}
	// The data plane reports it fell back to the second endpoint.
	o = env.mustDo(call{body: chatBody(model, "sys", "again"), served: list[1]})
	if p := o.primary(); p != list[1] {
		if got := testutil.ToFloat64(s.m.served.WithLabelValues(list[1], "false")); got != 1 {
			t.Errorf("served by a fallback: counted %v, want 1", got)
		}
	}
	for _, b := range s.Scheduler().Backends() {
		if b.InFlight() != 0 {
			t.Errorf("%s: %d in flight", b.Name(), b.InFlight())
		}
	}
	if n, err := testutil.GatherAndCount(reg, "ttft_epp_decision_duration_seconds"); err != nil || n != 1 {
		t.Errorf("decision overhead histogram: %d series, %v", n, err)
	}
}

// eventually polls cond for up to 5 s: a stream's end reaches the picker
// after the harness has moved on.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: %s", what)
		}
	}
}

func TestServedElsewhereEndsChosenTicketAsFailed(t *testing.T) {
	engines := startEngines(t, 2, nil)
	a, b := hostPort(engines[0].URL()), hostPort(engines[1].URL())
	s, env := startPicker(t, Options{Policy: sched.RoundRobin, Fallbacks: 1}, []Endpoint{{Addr: a}, {Addr: b}})
	waitReady(t, s)
	model := engines[0].ModelName()
	failed := map[string]int{}
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		o, err := env.do(ctx, call{body: chatBody(model, "sys", fmt.Sprint(i)), noForward: true})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		_ = o
	}
	// noForward ends streams without a response: canceled, no verdict.
	for _, be := range s.Scheduler().Backends() {
		eventually(t, be.Name()+" has nothing in flight after canceled streams", func() bool { return be.InFlight() == 0 })
		if be.BreakerState(time.Now()) != sched.BreakerClosed {
			t.Fatalf("%s: breaker moved on canceled streams", be.Name())
		}
	}
	// Five failures open a breaker: report every request as served by
	// another endpoint, as Envoy does after the chosen one failed.
	for i := range 12 {
		o := env.mustDo(call{body: chatBody(model, "sys", fmt.Sprint(i)), served: "10.1.1.1:1"})
		failed[o.primary()]++
	}
	open := 0
	for _, be := range s.Scheduler().Backends() {
		if be.BreakerState(time.Now()) != sched.BreakerClosed {
			open++
		}
	}
	if open == 0 {
		t.Errorf("picks %v all reported served elsewhere, yet no breaker opened", failed)
	}
}

func TestShedding(t *testing.T) {
	ip := loopbackAddr(t, 0)
	saturated := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 9\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n"
	a := fakeEngine(t, ip, func() string { return saturated })
	b := fakeEngine(t, ip, func() string { return strings.ReplaceAll(saturated, "0.5", "0.95") })
	s, env := startPicker(t, Options{SheddableClasses: []string{"summary"}}, []Endpoint{{Addr: a}, {Addr: b}})
	waitReady(t, s)
	body := chatBody("m", "sys", "hi")
	o := env.mustDo(call{body: body, headers: map[string]string{"x-slo-class": "summary"}, noForward: true})
	if o.status != 429 {
		t.Errorf("sheddable request on a saturated pool: status %d, want 429", o.status)
	}
	o = env.mustDo(call{body: body, headers: map[string]string{"x-slo-class": "chat"}, noForward: true})
	if o.immediate != nil || o.dest == "" {
		t.Errorf("critical request on a saturated pool: %+v, want a pick", o.immediate)
	}
}

func TestBadRequests(t *testing.T) {
	ip := loopbackAddr(t, 0)
	a := fakeEngine(t, ip, func() string { return "vllm:num_requests_waiting 0\n" })
	s, env := startPicker(t, Options{MaxBodyBytes: 4096}, []Endpoint{{Addr: a, Models: []string{"m"}}})
	waitReady(t, s)
	for _, c := range []struct {
		name    string
		call    call
		want    int
		wantErr string
	}{
		{"not JSON", call{body: []byte("{nope")}, 400, "invalid_request_error"},
		{"bad SLO header", call{body: chatBody("m", "s", "u"), headers: map[string]string{"x-ttft-slo-ms": "NaN"}}, 400, "x-ttft-slo-ms"},
		{"unknown SLO class", call{body: chatBody("m", "s", "u"), headers: map[string]string{"x-slo-class": "gold"}}, 400, "x-slo-class"},
		{"too large", call{body: chatBody("m", strings.Repeat("x", 5000), "u")}, 413, "exceeds"},
		{"unknown model", call{body: chatBody("other", "s", "u")}, 404, "no endpoint serves"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.call.noForward = true
			o := env.mustDo(c.call)
			if o.status != c.want || !bytes.Contains(o.body, []byte(c.wantErr)) {
				t.Errorf("status %d body %s; want %d with %q", o.status, o.body, c.want, c.wantErr)
			}
		})
	}
}

func TestLargeBodyWithTrailers(t *testing.T) {
	engines := startEngines(t, 1, nil)
	s, env := startPicker(t, Options{}, []Endpoint{{Addr: hostPort(engines[0].URL())}})
	waitReady(t, s)
	// 150 KB: echoed in three chunks of at most 62 KiB.
	body := chatBody(engines[0].ModelName(), strings.Repeat("long context ", 12000), "sum it up")
	o := env.mustDo(call{body: body, chunks: 7, trailers: true})
	if o.status != 200 || !bytes.Contains(o.body, []byte("[DONE]")) {
		t.Fatalf("status %d body %.200q", o.status, o.body)
	}
	if o.contentLength != fmt.Sprint(len(body)) {
		t.Errorf("content-length %q, want %d", o.contentLength, len(body))
	}
}

func TestNonStreamedAnswerEndsTicket(t *testing.T) {
	engines := startEngines(t, 1, nil)
	s, env := startPicker(t, Options{}, []Endpoint{{Addr: hostPort(engines[0].URL())}})
	waitReady(t, s)
	body := fmt.Appendf(nil, `{"model":%q,"max_tokens":4,"prompt":"once upon a time"}`, engines[0].ModelName())
	o := env.mustDo(call{path: "/v1/completions", body: body})
	if o.status != 200 || !bytes.Contains(o.body, []byte(`"choices"`)) {
		t.Fatalf("status %d body %q", o.status, o.body)
	}
	if b := s.Scheduler().Backends()[0]; b.InFlight() != 0 {
		t.Errorf("%d in flight after a whole answer", b.InFlight())
	}
}

func TestHealthServices(t *testing.T) {
	ip := loopbackAddr(t, 0)
	gate := make(chan struct{})
	a := fakeEngine(t, ip, func() string { <-gate; return "vllm:num_requests_waiting 0\n" })
	s, env := startPicker(t, Options{}, []Endpoint{{Addr: a}})
	hc := healthpb.NewHealthClient(env.conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		return r.GetStatus()
	}
	serving, not := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	if check(LivenessService) != serving {
		t.Error("liveness must serve from the start")
	}
	if check(ReadinessService) != not || check(ExtProcService) != not {
		t.Error("readiness must wait for the first scrape")
	}
	close(gate)
	waitReady(t, s)
	if check(ReadinessService) != serving || check(ExtProcService) != serving {
		t.Error("ready after the first scrape")
	}
	s.SetLeader(false)
	if check(LivenessService) != serving || check(ReadinessService) != not || check(ExtProcService) != not {
		t.Error("a standby is alive but not ready")
	}
}

// TestBufferedMode: a data plane configured with BUFFERED request bodies
// (the protocol's older mode) gets the headers answered at once and the
// pick on the body's answer.
func TestBufferedMode(t *testing.T) {
	ip := loopbackAddr(t, 0)
	a := fakeEngine(t, ip, func() string { return "vllm:num_requests_waiting 0\n" })
	s, env := startPicker(t, Options{}, []Endpoint{{Addr: a}})
	waitReady(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := env.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{
		Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrMap(map[string]string{":path": "/v1/completions"})}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_BUFFERED, ResponseBodyMode: procmodev3.ProcessingMode_NONE},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil || r.GetRequestHeaders() == nil || r.GetRequestHeaders().GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("want a plain headers response first, got %v, %v", r, err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","prompt":"x"}`), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var dest string
	for _, h := range r.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == DestinationKey {
			dest = string(h.GetHeader().GetRawValue())
		}
	}
	meta := r.GetDynamicMetadata().GetFields()[DestinationNamespace].GetStructValue().GetFields()[DestinationKey].GetStringValue()
	if dest != a || meta != a {
		t.Errorf("body response names %q (metadata %q), want %s", dest, meta, a)
	}
	if r.GetRequestBody().GetResponse().GetBodyMutation() != nil {
		t.Error("a buffered body must not be echoed as a mutation")
	}
	st.CloseSend()
}

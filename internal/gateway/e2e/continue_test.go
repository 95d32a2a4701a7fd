package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// replicaEnv makes this test binary a simulator replica listening on the
// address it holds (TestMain): a replica in a process of its own, which a
// test can SIGKILL as an engine dies.
const replicaEnv = "TTFT_E2E_SIM_REPLICA"

func TestMain(m *testing.M) {
	if addr := os.Getenv(replicaEnv); addr != "" {
		cfg := serve.DefaultConfig()
		cfg.ServedModelName = "m"
		cfg.Addr = addr
		if _, err := serve.Start(context.Background(), cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		select {} // until killed
	}
	os.Exit(m.Run())
}

// freeAddr is a loopback address nothing listens on (for a replica that
// must keep its port across a restart).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startReplicaProcess starts a simulator replica in a process of its own
// on addr and waits until it answers.
func startReplicaProcess(t *testing.T, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; {
		if resp, err := http.Get("http://" + addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return cmd
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGateway serves cfg on a loopback port; the registry holds its
// metrics.
func startGateway(t *testing.T, ctx context.Context, cfg gateway.Config) (string, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := gateway.New(cfg, gateway.Options{Seed: 1, Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ctx, ln)
	return "http://" + ln.Addr().String(), reg
}

// counter sums a counter's series whose labels include want.
func counter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// apiCase is one client API's request and its stream's reading.
type apiCase struct {
	name, path string
	anthropic  bool
}

var (
	chatAPI        = apiCase{name: "chat", path: "/v1/chat/completions"}
	anthropicAPI   = apiCase{name: "anthropic", path: "/v1/messages", anthropic: true}
	completionsAPI = apiCase{name: "completions", path: "/v1/completions"}
)

// body is a streamed request for prompt with maxTokens.
func (c apiCase) body(prompt string, maxTokens int) string {
	switch c {
	case completionsAPI:
		return fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"prompt":%q}`, maxTokens, prompt)
	case anthropicAPI:
		return fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, prompt)
	}
	return fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, prompt)
}

// delivered is what a client got from one stream.
type delivered struct {
	status     int
	backend    string
	text       string
	done       bool
	errEv      string
	completion int
	prompt     int
	transport  error
}

// streamOnce sends one request and reads its stream as a client would;
// slow reads it a few bytes at a time with pauses.
func streamOnce(ctx context.Context, url string, c apiCase, body string, slow bool) delivered {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+c.path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return delivered{transport: err}
	}
	defer resp.Body.Close()
	d := delivered{status: resp.StatusCode, backend: resp.Header.Get(gateway.HeaderBackend)}
	var r io.Reader = resp.Body
	if slow {
		r = &slowReader{r: resp.Body}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			d.done = true
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Output     int `json:"output_tokens"`
			} `json:"usage"`
			Message struct {
				Usage *struct {
					Input int `json:"input_tokens"`
				} `json:"usage"`
			} `json:"message"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			d.errEv = "malformed event: " + data
			continue
		}
		for _, ch := range ev.Choices {
			text.WriteString(ch.Delta.Content + ch.Text)
		}
		text.WriteString(ev.Delta.Text)
		if ev.Usage != nil {
			d.completion = max(ev.Usage.Completion, ev.Usage.Output)
			if ev.Usage.Prompt > 0 {
				d.prompt = ev.Usage.Prompt
			}
		}
		if ev.Message.Usage != nil {
			d.prompt = ev.Message.Usage.Input
		}
		if ev.Type == "message_stop" {
			d.done = true
		}
		if len(ev.Error) > 0 {
			d.errEv = string(ev.Error)
		}
	}
	if err := sc.Err(); err != nil {
		d.transport = err
	}
	d.text = text.String()
	return d
}

// slowReader is a client that reads its stream slowly: 512 bytes at a
// time, 2 ms apart.
type slowReader struct{ r io.Reader }

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return s.r.Read(p[:min(len(p), 512)])
}

// references are the unbroken answers of a healthy replica to each
// prompt: every replica answers a prompt with the same words, so the
// answer to a request for n tokens is the first n words of the longest.
type references struct {
	url string
	mu  sync.Mutex
	m   map[string][]string // API/prompt → words
	p   map[string]int      // API/prompt → prompt tokens
}

func newReferences(t *testing.T, ctx context.Context) *references {
	return &references{url: startSim(t, ctx, serve.FaultConfig{}).URL(), m: map[string][]string{}, p: map[string]int{}}
}

// refTokens is the longest reference answer: longer than any test asks for.
const refTokens = 64

// want is the unbroken answer's text.
func (rf *references) want(t *testing.T, c apiCase, prompt string, n int) string {
	text, _ := rf.wantUsage(t, c, prompt, n)
	return text
}

// wantUsage is the unbroken answer's text and prompt tokens.
func (rf *references) wantUsage(t *testing.T, c apiCase, prompt string, n int) (string, int) {
	key := c.name + "/" + prompt
	if c == anthropicAPI {
		key = chatAPI.name + "/" + prompt // translated to chat
	}
	rf.mu.Lock()
	words, ok := rf.m[key]
	rf.mu.Unlock()
	if !ok {
		rc := c
		if c == anthropicAPI {
			rc = chatAPI
		}
		d := streamOnce(context.Background(), rf.url, rc, rc.body(prompt, refTokens), false)
		if d.status != 200 || !d.done {
			t.Fatalf("reference answer: status %d, %+v", d.status, d)
		}
		words = splitWords(d.text)
		rf.mu.Lock()
		rf.m[key] = words
		rf.p[key] = d.prompt
		rf.mu.Unlock()
	}
	if n > len(words) {
		t.Fatalf("reference has %d words, want %d", len(words), n)
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return strings.Join(words[:n], ""), rf.p[key]
}

// splitWords cuts an answer into its output words, each a space and
// letters.
func splitWords(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// TestContinuationOverSimReplicas: one of three simulator replicas cuts
// every stream after 5 tokens. With continuation (chat and Anthropic by
// default, completions by its route), every stream the cut hit is finished
// by another replica: each client gets exactly the text an unbroken stream
// has (the simulator continues a prefix as its own answer), one end, no
// error, and usage that adds up (output tokens = all delivered; prompt
// tokens = the original prompt's).
func TestContinuationOverSimReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refs := newReferences(t, ctx)
	cut := startSim(t, ctx, serve.FaultConfig{CutAfter: 5})
	ok1 := startSim(t, ctx, serve.FaultConfig{})
	ok2 := startSim(t, ctx, serve.FaultConfig{})
	on := true
	cfg := gateway.Config{Policy: "round-robin", Routes: []gateway.Route{{Model: "m", Continuation: &on}}}
	for name, u := range map[string]string{"cut": cut.URL(), "ok1": ok1.URL(), "ok2": ok2.URL()} {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{Name: name, URL: u, Models: []string{"m"}})
	}
	cfg.Health.Path = "/health"
	url, reg := startGateway(t, ctx, cfg)
	for _, c := range []apiCase{chatAPI, anthropicAPI, completionsAPI} {
		t.Run(c.name, func(t *testing.T) {
			viaCut := 0
			for i := range 6 {
				prompt := fmt.Sprintf("%s request %d: tell me a story", c.name, i)
				const n = 16
				d := streamOnce(ctx, url, c, c.body(prompt, n), false)
				want, wantPrompt := refs.wantUsage(t, c, prompt, n)
				if c == anthropicAPI {
					wantPrompt = d.prompt // the translated stream's usage is checked in package translate
				}
				if d.status != 200 || d.text != want || !d.done || d.errEv != "" || d.completion != n || d.prompt != wantPrompt {
					t.Errorf("request %d via %s: status %d done %v error %q usage %d+%d (want %d+%d)\n got %q\nwant %q", i, d.backend, d.status, d.done, d.errEv, d.prompt, d.completion, wantPrompt, n, d.text, want)
				}
				if d.backend == "cut" {
					viaCut++
				}
			}
			if viaCut == 0 {
				t.Fatal("no stream started on the cutting replica")
			}
		})
	}
	if got := counter(t, reg, "ttft_gateway_continuations_total", map[string]string{"outcome": "completed"}); got < 3 {
		t.Errorf("%v continuations completed, want one per stream the cut hit", got)
	}
}

// TestReplicaSIGKILLMidRun is the target: four simulator replicas,
// each a process of its own, behind the gateway at concurrency 32; one is
// SIGKILLed mid-run and restarted on its port a second later. With
// continuation on (the default for chat): no request fails, every stream
// the kill cut is finished elsewhere with exactly the unbroken text (a
// prefix-consistent splice: nothing lost or repeated), and the restarted
// replica serves again.
func TestReplicaSIGKILLMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four replica processes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refs := newReferences(t, ctx)
	addrs := make([]string, 4)
	procs := make([]*exec.Cmd, 4)
	cfg := gateway.Config{Policy: "least-outstanding"}
	for i := range addrs {
		addrs[i] = freeAddr(t)
		procs[i] = startReplicaProcess(t, addrs[i])
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{Name: fmt.Sprint("r", i), URL: "http://" + addrs[i], Models: []string{"m"}})
	}
	cfg.Health.Path = "/health"
	cfg.Health.Interval = gateway.Duration(100 * time.Millisecond)
	cfg.Limits.FirstByteTimeout = gateway.Duration(5 * time.Second)
	url, reg := startGateway(t, ctx, cfg)

	const workers, maxTokens = 32, 48
	var (
		mu                sync.Mutex
		results           []delivered
		wants             []string
		restarted         atomic.Int64 // unix nanos of the restart
		servedAfterReturn atomic.Int64
	)
	const prompts = 16
	prompt := func(i int) string { return fmt.Sprintf("request %d: tell me a story", i%prompts) }
	var wg sync.WaitGroup
	for i := range prompts { // the references first, so that the run is all streams
		wg.Add(1)
		go func() { defer wg.Done(); refs.want(t, chatAPI, prompt(i), maxTokens) }()
	}
	wg.Wait()
	runFor := 5 * time.Second
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < runFor; i++ {
				prompt := prompt(w + i)
				sent := time.Now()
				d := streamOnce(ctx, url, chatAPI, chatAPI.body(prompt, maxTokens), false)
				want := refs.want(t, chatAPI, prompt, maxTokens)
				if r := restarted.Load(); r != 0 && sent.UnixNano() > r+int64(time.Second) && d.backend == "r0" {
					servedAfterReturn.Add(1)
				}
				mu.Lock()
				results = append(results, d)
				wants = append(wants, want)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	if err := procs[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[0].Wait()
	time.Sleep(time.Second)
	startReplicaProcess(t, addrs[0])
	restarted.Store(time.Now().UnixNano())
	wg.Wait()

	failed := 0
	for i, d := range results {
		if d.transport != nil || d.status != 200 || d.errEv != "" || !d.done || d.text != wants[i] || d.completion != maxTokens {
			failed++
			if failed <= 10 {
				t.Errorf("request %d via %s: status %d done %v error %q transport %v usage %d\n got %q\nwant %q", i, d.backend, d.status, d.done, d.errEv, d.transport, d.completion, d.text, wants[i])
			}
		}
	}
	continued := counter(t, reg, "ttft_gateway_continuations_total", map[string]string{"outcome": "completed"})
	per := map[string]int{}
	for _, d := range results {
		per[d.backend]++
	}
	t.Logf("%d requests (by backend %v), %d failed, %v continued after the kill, %d served by the restarted replica", len(results), per, failed, continued, servedAfterReturn.Load())
	if failed > 0 {
		t.Errorf("%d of %d requests failed, want 0", failed, len(results))
	}
	if continued == 0 {
		t.Errorf("no stream was continued: the kill hit no stream in flight, so the test proved nothing (stream errors %v, continuations %v)",
			counter(t, reg, "ttft_gateway_stream_errors_total", nil), counter(t, reg, "ttft_gateway_continuations_total", nil))
	}
	if servedAfterReturn.Load() == 0 {
		t.Error("the restarted replica served no request")
	}
}

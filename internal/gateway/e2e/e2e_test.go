package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

func startSim(t *testing.T, ctx context.Context, faults serve.FaultConfig) *serve.Server {
	t.Helper()
	cfg := serve.DefaultConfig()
	cfg.ServedModelName = "m"
	cfg.Faults = faults
	s, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type outcome struct {
	backend string
	tokens  int
	usage   int
	done    bool
	errEv   bool
	status  int
}

func stream(t *testing.T, url string, i, maxTokens int) outcome {
	body := fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"min_tokens":%d,"messages":[{"role":"user","content":"request %d: tell me a story"}]}`, maxTokens, maxTokens, i)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("request %d: %v", i, err)
		return outcome{}
	}
	defer resp.Body.Close()
	o := outcome{backend: resp.Header.Get(gateway.HeaderBackend), status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			o.done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Errorf("request %d: malformed event %q", i, data)
			continue
		}
		for _, c := range ev.Choices {
			if c.Delta.Content != "" {
				o.tokens++
			}
		}
		if ev.Usage != nil {
			o.usage = ev.Usage.CompletionTokens
		}
		if len(ev.Error) > 0 {
			o.errEv = true
		}
	}
	return o
}

// TestGatewayOverSimFleetWithFaults: four simulator replicas, one dead at
// start, one answering 503, one stalling its first token, one cutting every
// stream after 5 tokens, plus two healthy ones. With continuation off,
// every request is answered; those that reached the cutting replica end
// with an error event after exactly 5 tokens; all others complete with
// every token exactly once (continue_test.go has the continued case).
func TestGatewayOverSimFleetWithFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthy1 := startSim(t, ctx, serve.FaultConfig{})
	healthy2 := startSim(t, ctx, serve.FaultConfig{})
	errs := startSim(t, ctx, serve.FaultConfig{ErrorRate: 1, ErrorStatus: 503})
	stall := startSim(t, ctx, serve.FaultConfig{StallFirst: 10 * time.Second})
	cut := startSim(t, ctx, serve.FaultConfig{CutAfter: 5})
	// The dead backend's port is freed after every listener of the test
	// has its own: freed first, the kernel once gave it to a replica
	// started after, and "dead" answered.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cfg := gateway.Config{Policy: "round-robin", Continuation: gateway.Continuation{Max: -1}}
	for name, u := range map[string]string{"dead": dead, "ok1": healthy1.URL(), "ok2": healthy2.URL(), "503": errs.URL(), "stall": stall.URL(), "cut": cut.URL()} {
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{Name: name, URL: u, Models: []string{"m"}})
	}
	// Generous enough for a healthy replica under the race detector on a
	// loaded machine; far below the stalling replica's 10 s.
	cfg.Limits.FirstByteTimeout = gateway.Duration(time.Second)
	cfg.Health.Path = "/health"
	cfg.Health.Interval = gateway.Duration(100 * time.Millisecond)
	cfg.Retry.Attempts = 5
	// Four of six backends are broken: allow a retry per request on average
	// (the default budget, 0.2, protects a fleet from retry storms and would
	// rightly refuse some of these).
	cfg.Retry.Budget = 1
	g, err := gateway.New(cfg, gateway.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	go g.Serve(ctx, gl)
	url := "http://" + gl.Addr().String()

	const n, maxTokens = 48, 12
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = stream(t, url, i, maxTokens)
		}()
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	cutCount := 0
	for i, o := range out {
		switch o.backend {
		case "cut":
			cutCount++
			if !o.errEv || o.done || o.tokens != 5 {
				t.Errorf("request %d via cut: error event %v, done %v, %d tokens (want an error event after exactly 5)", i, o.errEv, o.done, o.tokens)
			}
		case "ok1", "ok2":
			if o.status != 200 || !o.done || o.errEv || o.tokens != maxTokens || o.usage != maxTokens {
				t.Errorf("request %d via %s: status %d done %v err %v tokens %d usage %d", i, o.backend, o.status, o.done, o.errEv, o.tokens, o.usage)
			}
		default:
			t.Errorf("request %d answered by %q (status %d): faulty backends must never answer", i, o.backend, o.status)
		}
	}
	if cutCount == 0 {
		t.Error("no request reached the cutting replica; the test proves nothing about mid-stream faults")
	}
}

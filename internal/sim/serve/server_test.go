package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/sim"
)

func startTest(t *testing.T, mut func(*Config)) *Server {
	t.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL %q is not loopback", s.URL())
	}
	return s
}

type sseResult struct {
	events     []map[string]any
	done       bool
	firstToken time.Duration
	status     int
	body       string
}

func postStream(t *testing.T, url, path, body string, hdr map[string]string) sseResult {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := sseResult{status: resp.StatusCode}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		res.body = string(b)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("bad chunk %q: %v", data, err)
		}
		if res.firstToken == 0 && hasContent(ev) {
			res.firstToken = time.Since(start)
		}
		res.events = append(res.events, ev)
	}
	return res
}

func hasContent(ev map[string]any) bool {
	ch, _ := ev["choices"].([]any)
	if len(ch) == 0 {
		return false
	}
	c := ch[0].(map[string]any)
	if d, ok := c["delta"].(map[string]any); ok {
		s, _ := d["content"].(string)
		return s != ""
	}
	s, _ := c["text"].(string)
	return s != ""
}

func TestServerChatStreamShape(t *testing.T) {
	s := startTest(t, nil)
	body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"Hello there, how are you today?"}],"stream":true,"max_tokens":5,"stream_options":{"include_usage":true}}`
	res := postStream(t, s.URL(), "/v1/chat/completions", body, nil)
	if res.status != 200 {
		t.Fatalf("status %d: %s", res.status, res.body)
	}
	// role chunk, 5 content chunks (last with finish_reason), usage chunk.
	if len(res.events) != 7 || !res.done {
		t.Fatalf("got %d events (done=%v), want 7 and [DONE]: %v", len(res.events), res.done, res.events)
	}
	first := res.events[0]["choices"].([]any)[0].(map[string]any)
	if d := first["delta"].(map[string]any); d["role"] != "assistant" || d["content"] != "" {
		t.Errorf("first chunk delta = %v, want role assistant with empty content", d)
	}
	var text strings.Builder
	for i := 1; i <= 5; i++ {
		c := res.events[i]["choices"].([]any)[0].(map[string]any)
		text.WriteString(c["delta"].(map[string]any)["content"].(string))
		wantReason := any(nil)
		if i == 5 {
			wantReason = "length"
		}
		if c["finish_reason"] != wantReason {
			t.Errorf("chunk %d finish_reason = %v, want %v", i, c["finish_reason"], wantReason)
		}
	}
	if n := s.tok.Count(text.String()); n != 5 {
		t.Errorf("output %q re-tokenises to %d tokens, want 5", text.String(), n)
	}
	u := res.events[6]["usage"].(map[string]any)
	wantPrompt := float64(s.tok.Count("Hello there, how are you today?"))
	if u["completion_tokens"] != 5.0 || u["prompt_tokens"] != wantPrompt {
		t.Errorf("usage = %v, want 5 completion and %v prompt tokens", u, wantPrompt)
	}
	if len(res.events[6]["choices"].([]any)) != 0 {
		t.Errorf("usage chunk has choices")
	}
}

func TestServerCompletionsNonStreamAndModels(t *testing.T) {
	s := startTest(t, func(c *Config) { c.ServedModelName = "sim-8b" })
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"sim-8b","prompt":"Once upon a time","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out.Object != "text_completion" || len(out.Choices) != 1 || out.Usage.CompletionTokens != 4 || out.Choices[0].FinishReason != "length" {
		t.Fatalf("unexpected response %+v", out)
	}
	if n := s.tok.Count(out.Choices[0].Text); n != 4 {
		t.Errorf("text %q is %d tokens, want 4", out.Choices[0].Text, n)
	}
	resp, err = http.Get(s.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"sim-8b"`) {
		t.Errorf("/v1/models = %s", b)
	}
	// Unknown model: 404 like vLLM.
	resp, err = http.Post(s.URL()+"/v1/completions", "application/json", strings.NewReader(`{"model":"gpt-9","prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown model: status %d, want 404", resp.StatusCode)
	}
}

func TestServerRejectsLongPrompt(t *testing.T) {
	s := startTest(t, func(c *Config) { c.MaxModelLen = 64 })
	long := strings.Repeat("word ", 100)
	res := postStream(t, s.URL(), "/v1/chat/completions", `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"`+long+`"}],"stream":true}`, nil)
	if res.status != 400 || !strings.Contains(res.body, "maximum context length is 64") {
		t.Fatalf("status %d body %s, want 400 naming the maximum context length", res.status, res.body)
	}
}

func TestServerFaults(t *testing.T) {
	s := startTest(t, nil)
	body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":30}`
	if res := postStream(t, s.URL(), "/v1/chat/completions", body, map[string]string{FaultHeader: "error=503"}); res.status != 503 {
		t.Errorf("error=503: status %d", res.status)
	}
	if res := postStream(t, s.URL(), "/v1/chat/completions", body, map[string]string{FaultHeader: "nonsense"}); res.status != 400 {
		t.Errorf("bad fault header: status %d, want 400", res.status)
	}
	// cut-after: the stream ends without [DONE] after 3 content chunks.
	res := postStream(t, s.URL(), "/v1/chat/completions", body, map[string]string{FaultHeader: "cut-after=3"})
	content := 0
	for _, ev := range res.events {
		if hasContent(ev) {
			content++
		}
	}
	if res.done || content != 3 {
		t.Errorf("cut-after=3: done=%v content chunks=%d, want no [DONE] and 3", res.done, content)
	}
	// stall-first delays the first token by at least the stall.
	res = postStream(t, s.URL(), "/v1/chat/completions", body, map[string]string{FaultHeader: "stall-first=300ms"})
	if res.firstToken < 300*time.Millisecond || !res.done {
		t.Errorf("stall-first=300ms: first token after %v (done=%v)", res.firstToken, res.done)
	}
}

func TestServerMetricsParse(t *testing.T) {
	s := startTest(t, nil)
	for i := 0; i < 3; i++ {
		body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"The same shared system prompt that is long enough to fill at least two KV blocks of sixteen tokens each, repeated here for effect."}],"stream":true,"max_tokens":3}`
		if res := postStream(t, s.URL(), "/v1/chat/completions", body, nil); !res.done {
			t.Fatalf("request %d did not finish", i)
		}
	}
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, b)
	}
	ttft := fams["vllm:time_to_first_token_seconds"]
	if ttft == nil || ttft.Metric[0].Histogram.GetSampleCount() != 3 {
		t.Fatalf("vllm:time_to_first_token_seconds missing or wrong count")
	}
	if got := len(ttft.Metric[0].Histogram.Bucket); got != len(ttftBuckets)+1 { // +Inf included
		t.Errorf("TTFT histogram has %d buckets, want vLLM's %d", got, len(ttftBuckets))
	}
	labels := map[string]string{}
	for _, l := range ttft.Metric[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["model_name"] != "llama-3.1-8b" || labels["engine"] != "0" {
		t.Errorf("labels %v, want model_name and engine", labels)
	}
	gen := fams["vllm:generation_tokens_total"].Metric[0].Counter.GetValue()
	if gen != 9 {
		t.Errorf("generation tokens = %v, want 9", gen)
	}
	q := fams["vllm:prefix_cache_queries_total"].Metric[0].Counter.GetValue()
	h := fams["vllm:prefix_cache_hits_total"].Metric[0].Counter.GetValue()
	if h <= 0 || h > q {
		t.Errorf("prefix cache hits %v of %v queries: want 0 < hits ≤ queries for a repeated prompt", h, q)
	}
	for _, name := range []string{"vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prompt_tokens_total"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestServerSpeculativeChunks(t *testing.T) {
	s := startTest(t, func(c *Config) {
		c.Speculative = sim.SpecConfig{NumSpeculativeTokens: 3, Acceptance: 0.8}
	})
	body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":20,"stream_options":{"include_usage":true}}`
	res := postStream(t, s.URL(), "/v1/chat/completions", body, nil)
	var text strings.Builder
	content := 0
	for _, ev := range res.events {
		if hasContent(ev) {
			content++
			text.WriteString(ev["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)["content"].(string))
		}
	}
	if n := s.tok.Count(text.String()); n != 20 {
		t.Errorf("speculative output is %d tokens, want 20", n)
	}
	// Expected tokens per step (1−0.8⁴)/(1−0.8) ≈ 2.95: far fewer chunks.
	if content >= 15 || content < 5 {
		t.Errorf("%d content chunks for 20 tokens with k=3, a=0.8", content)
	}
	u := res.events[len(res.events)-1]["usage"].(map[string]any)
	if u["completion_tokens"] != 20.0 {
		t.Errorf("usage %v", u)
	}
}

// TestServerClientDisconnectFreesEngine: a client that hangs up mid-stream
// is aborted in the engine (its sequence stops running).
func TestServerClientDisconnectFreesEngine(t *testing.T) {
	s := startTest(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/chat/completions", strings.NewReader(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5000}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for i := 0; i < 3 && sc.Scan(); i++ {
	}
	cancel()
	resp.Body.Close()
	running := func() float64 {
		r, err := http.Get(s.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return fams["vllm:num_requests_running"].Metric[0].Gauge.GetValue()
	}
	for i := 0; i < 100; i++ {
		if running() == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("engine still runs %v sequences 2 s after the client left", running())
}

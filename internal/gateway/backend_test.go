package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBackend is a small OpenAI/Anthropic-compatible streaming server on
// 127.0.0.1 with injectable faults, for proxy tests that must not depend on
// the simulator. Tokens are "t0 ", "t1 ", … so a client can check that
// nothing was lost or duplicated.
type fakeBackend struct {
	srv    *httptest.Server
	name   string
	tokens int
	gap    time.Duration // between token events
	ttft   time.Duration // before the first event
	// fault: "", "500", "cut-before" (200 then close), "cut-after-role"
	// (close after the first, token-less event), "stall-first" (stall after
	// it), "kill-mid" (close after 3 tokens), "stall-mid" (stop after 3
	// tokens), "stall-before" (no headers).
	fault atomic.Value
	hits  atomic.Int64

	mu      sync.Mutex
	headers []http.Header
}

func newFakeBackend(t testing.TB, name string, tokens int) *fakeBackend {
	t.Helper()
	fb := &fakeBackend{name: name, tokens: tokens}
	fb.fault.Store("")
	fb.srv = httptest.NewUnstartedServer(http.HandlerFunc(fb.serve))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb.srv.Listener = ln
	fb.srv.Start()
	t.Cleanup(fb.srv.Close)
	return fb
}

func (fb *fakeBackend) URL() string       { return fb.srv.URL }
func (fb *fakeBackend) setFault(f string) { fb.fault.Store(f) }

func (fb *fakeBackend) lastHeaders() []http.Header {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]http.Header(nil), fb.headers...)
}

func expectedText(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "t%d ", i)
	}
	return b.String()
}

func (fb *fakeBackend) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	}
	if r.URL.Path == "/metrics" {
		io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 3\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n")
		return
	}
	fb.hits.Add(1)
	fb.mu.Lock()
	fb.headers = append(fb.headers, r.Header.Clone())
	fb.mu.Unlock()
	var body struct {
		Stream bool   `json:"stream"`
		Model  string `json:"model"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad json", 400)
		return
	}
	fault := fb.fault.Load().(string)
	switch fault {
	case "500":
		http.Error(w, `{"error":"boom"}`, 500)
		return
	case "cut-before":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		hijackClose(w)
		return
	case "stall-before":
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	anthropic := r.URL.Path == "/v1/messages"
	if !body.Stream {
		w.Header().Set("Content-Type", "application/json")
		if anthropic {
			fmt.Fprintf(w, `{"type":"message","content":[{"type":"text","text":%q}],"usage":{"input_tokens":5,"output_tokens":%d}}`, expectedText(fb.tokens), fb.tokens)
		} else {
			fmt.Fprintf(w, `{"object":"chat.completion","model":%q,"choices":[{"message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":5,"completion_tokens":%d}}`, body.Model, expectedText(fb.tokens), fb.tokens)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Backend", fb.name)
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	if fb.ttft > 0 {
		time.Sleep(fb.ttft)
	}
	if anthropic {
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n")
	} else {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-%s\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", fb.name, body.Model)
	}
	fl.Flush()
	switch fault {
	case "cut-after-role":
		hijackClose(w)
		return
	case "stall-first":
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	for i := range fb.tokens {
		if i == 3 && fault == "kill-mid" {
			// Half an event, then the connection dies.
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t3")
			fl.Flush()
			hijackClose(w)
			return
		}
		if i == 3 && fault == "stall-mid" {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		if fb.gap > 0 {
			time.Sleep(fb.gap)
		}
		if anthropic {
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"t%d \"}}\n\n", i)
		} else {
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
		}
		fl.Flush()
	}
	if anthropic {
		fmt.Fprintf(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":%d}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", fb.tokens)
	} else {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", fb.tokens)
	}
	fl.Flush()
}

func hijackClose(w http.ResponseWriter) {
	c, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	buf.Flush()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// streamResult is what a client saw on one streamed request.
type streamResult struct {
	status   int
	backend  string
	attempts string
	text     string
	done     bool
	errEvent string
	raw      string
}

// readStream parses an SSE answer the way a client would.
func readStream(t testing.TB, resp *http.Response, anthropic bool) streamResult {
	t.Helper()
	defer resp.Body.Close()
	res := streamResult{status: resp.StatusCode, backend: resp.Header.Get(HeaderBackend), attempts: resp.Header.Get(HeaderAttempts)}
	raw, err := io.ReadAll(resp.Body)
	res.raw = string(raw)
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(res.raw))
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("malformed event %q: %v", data, err)
		}
		if len(ev.Error) > 0 {
			res.errEvent = string(ev.Error)
		}
		if ev.Type == "message_stop" {
			res.done = true
		}
		for _, c := range ev.Choices {
			text.WriteString(c.Delta.Content)
		}
		text.WriteString(ev.Delta.Text)
	}
	res.text = text.String()
	return res
}

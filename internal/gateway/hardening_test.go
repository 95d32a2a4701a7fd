package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/testutil"
)

// A key's tokens_per_minute counts the output tokens its requests receive,
// streamed (as they stream) or whole (from the answer's usage): once they
// exceed the budget the key's next request is refused.
func TestTokenLimitChargesOutputTokens(t *testing.T) {
	fb := newFakeBackend(t, "a", 300)
	slow := newFakeBackend(t, "slow", 400)
	slow.gap = 2 * time.Millisecond
	cfg := cfgFor("round-robin", fb)
	cfg.Backends[0].Models = []string{"m"}
	cfg.Backends = append(cfg.Backends, BackendConfig{Name: "slow", URL: slow.URL(), API: "both", Models: []string{"slow"}})
	for _, k := range []string{"k-stream", "k-whole", "k-live"} {
		cfg.Keys = append(cfg.Keys, ClientKey{Name: k, SHA256: HashKey(k), TokensPerMinute: 100})
	}
	_, url := startGateway(t, cfg, Options{})
	auth := func(k string) map[string]string { return map[string]string{"Authorization": "Bearer " + k} }
	refused := func(t *testing.T, key, why string) {
		t.Helper()
		resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), auth(key))
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "token rate limit") {
			t.Fatalf("%s (limit 100 tokens/min): %d Retry-After %q %q", why, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
	}
	t.Run("streamed", func(t *testing.T) {
		res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), auth("k-stream")), false)
		if res.status != 200 || res.text != expectedText(300) {
			t.Fatalf("first request: %d %q", res.status, res.text)
		}
		refused(t, "k-stream", "after a stream of 300 output tokens")
	})
	t.Run("whole answer", func(t *testing.T) {
		resp := post(t, url, "/v1/chat/completions", chatBody("m", false, "x"), auth("k-whole"))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("first request: %d", resp.StatusCode)
		}
		refused(t, "k-whole", "after an answer with usage of 300 output tokens")
	})
	t.Run("charged as it streams", func(t *testing.T) {
		resp := post(t, url, "/v1/chat/completions", chatBody("slow", true, "x"), auth("k-live"))
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for seen := 0; seen < 200; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("after %d token events: %v", seen, err)
			}
			if strings.Contains(line, `"content":"t`) {
				seen++
			}
		}
		refused(t, "k-live", "while the key's first stream is past 200 output tokens")
		io.Copy(io.Discard, br)
	})
}

// A chunked request body whose framing is malformed is the client's error:
// 400, logged as 400 (not as a client that went away), and the connection
// closed.
func TestMalformedChunkedBodyIs400(t *testing.T) {
	body := chatBody("m", true, "x")
	cases := []struct{ name, chunks string }{
		{"size zz", "zz\r\n" + body + "\r\n0\r\n\r\n"},
		{"size -1", "-1\r\n" + body + "\r\n0\r\n\r\n"},
		{"size 0x10", "0x10\r\n" + body + "\r\n0\r\n\r\n"},
		{"no CRLF after the data", fmt.Sprintf("%x\r\n%s0\r\n\r\n", len(body), body)},
	}
	for _, server := range []string{"ttft", "net/http"} {
		t.Run(server, func(t *testing.T) {
			fb := newFakeBackend(t, "a", 3)
			var log testutil.SyncBuffer
			_, url := startGateway(t, cfgFor("round-robin", fb), Options{AccessLog: &log, HTTPServer: server})
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					c, br := dial(t, strings.TrimPrefix(url, "http://"))
					io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
					time.Sleep(50 * time.Millisecond) // the body comes after the head, to the handler
					io.WriteString(c, tc.chunks)
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					resp, b := readResp(t, br, "POST")
					if resp.StatusCode != http.StatusBadRequest || !resp.Close {
						t.Fatalf("status %d close=%v %q, want 400 and the connection closed", resp.StatusCode, resp.Close, b)
					}
				})
			}
			lines := 0
			if out := strings.TrimSpace(log.String()); out != "" {
				lines = strings.Count(out, "\n") + 1
			}
			if n := strings.Count(log.String(), `"status":400`); n != lines || strings.Contains(log.String(), "client_canceled") ||
				(server == "ttft" && n != len(cases)) {
				// Behind Go's server, a malformed body that comes with its
				// head is refused before the handler (and the log) sees it.
				t.Fatalf("access log, want a line with status 400 per request:\n%s", log.String())
			}
			if fb.hits.Load() != 0 {
				t.Fatalf("backend got %d requests", fb.hits.Load())
			}
		})
	}
}

// A request with both Content-Length and Transfer-Encoding is refused and
// its connection closed, with either server: the bytes after its chunked
// body (a request smuggled past a front proxy that went by its
// Content-Length) are never answered.
func TestContentLengthWithTransferEncodingRefused(t *testing.T) {
	for _, server := range []string{"ttft", "net/http"} {
		t.Run(server, func(t *testing.T) {
			fb := newFakeBackend(t, "a", 3)
			_, url := startGateway(t, cfgFor("round-robin", fb), Options{HTTPServer: server})
			body := chatBody("m", false, "x")
			chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
			smuggled := "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
			c, br := dial(t, strings.TrimPrefix(url, "http://"))
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s%s",
				len(chunked)+len(smuggled), chunked, smuggled)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, b := readResp(t, br, "POST")
			if resp.StatusCode != http.StatusBadRequest || !resp.Close {
				t.Fatalf("status %d close=%v %q, want 400 and the connection closed", resp.StatusCode, resp.Close, b)
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				t.Fatalf("the smuggled request was answered: %d", resp.StatusCode)
			}
			if fb.hits.Load() != 0 {
				t.Fatalf("backend got %d requests", fb.hits.Load())
			}
		})
	}
}

func TestSLOHeaderMustBeFiniteAndPositive(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	_, url := startGateway(t, cfgFor("round-robin", fb), Options{})
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "0", "-5", "1e-9", "3600001"} {
		resp := post(t, url, "/v1/chat/completions", chatBody("m", false, "x"), map[string]string{"X-Ttft-Slo-Ms": v})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "X-Ttft-Slo-Ms") {
			t.Errorf("x-ttft-slo-ms: %s: %d %s, want 400", v, resp.StatusCode, b)
		}
	}
	resp := post(t, url, "/v1/chat/completions", chatBody("m", false, "x"), map[string]string{"X-Ttft-Slo-Ms": "250"})
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("x-ttft-slo-ms: 250: %d", resp.StatusCode)
	}
}

// A Content-Length over max_body_bytes is refused (413) before any of the
// body is read, and a client that waits for 100 Continue gets the 413
// instead, with either server.
func TestDeclaredBodyOverLimitRefusedUnread(t *testing.T) {
	for _, server := range []string{"ttft", "net/http"} {
		t.Run(server, func(t *testing.T) {
			fb := newFakeBackend(t, "a", 3)
			cfg := cfgFor("round-robin", fb)
			cfg.Limits.MaxBodyBytes = 2048
			_, url := startGateway(t, cfg, Options{HTTPServer: server})
			for name, expect := range map[string]string{"content-length": "", "expect 100-continue": "Expect: 100-continue\r\n"} {
				t.Run(name, func(t *testing.T) {
					c, br := dial(t, strings.TrimPrefix(url, "http://"))
					// The head only: a client that sends its body would be
					// answered either way.
					io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 9000000\r\n"+expect+"\r\n")
					c.SetReadDeadline(time.Now().Add(3 * time.Second))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("no answer within 3 s to a head declaring 9 MB (limit 2048): %v", err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusRequestEntityTooLarge {
						t.Fatalf("status %d, want 413", resp.StatusCode)
					}
				})
			}
		})
	}
}

// A stream whose first token event ends the bytes the backend sent before
// a transport error (here its last line ends in CR, which only the end of
// the stream decides) counts that token: it is forwarded, and the request
// has a TTFT, rather than "ended before its first token".
func TestFirstTokenBeforeTransportErrorCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"+
					"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\r")
				c.(*net.TCPConn).SetLinger(0) // reset: a transport error after the token
			}()
		}
	}()
	var log testutil.SyncBuffer
	cfg := Config{Policy: "round-robin", Backends: []BackendConfig{{Name: "b", URL: "http://" + ln.Addr().String(), Models: []string{"m"}}}}
	cfg.Retry.Attempts = 1
	cfg.Health.Disabled = true
	_, url := startGateway(t, cfg, Options{AccessLog: &log})
	resp := post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"content":"hi"`) {
		t.Fatalf("%d %q: want 200 with the token", resp.StatusCode, b)
	}
	var line struct {
		TTFT  float64 `json:"ttft_ms"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal([]byte(log.String()), &line); err != nil || line.TTFT <= 0 || strings.Contains(line.Error, "before its first token") {
		t.Fatalf("access log: %+v %v\n%s", line, err, log.String())
	}
}

// /metrics is open to scrapers without a key unless metrics_require_key
// says otherwise.
func TestMetricsKeyOption(t *testing.T) {
	fb := newFakeBackend(t, "a", 3)
	get := func(url, key string) int {
		req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	cfg := cfgFor("round-robin", fb)
	cfg.Keys = []ClientKey{{Name: "team", SHA256: HashKey("sk-team")}}
	_, open := startGateway(t, cfg, Options{})
	if s := get(open, ""); s != 200 {
		t.Fatalf("default: /metrics without a key: %d, want 200", s)
	}
	cfg.MetricsRequireKey = true
	_, closed := startGateway(t, cfg, Options{})
	for key, want := range map[string]int{"": 401, "wrong": 401, "sk-team": 200} {
		if s := get(closed, key); s != want {
			t.Errorf("metrics_require_key: /metrics with key %q: %d, want %d", key, s, want)
		}
	}
	cfg.Keys = nil
	if err := cfg.Validate(nil); err == nil || !strings.Contains(err.Error(), "metrics_require_key") {
		t.Fatalf("metrics_require_key without keys: %v", err)
	}
}

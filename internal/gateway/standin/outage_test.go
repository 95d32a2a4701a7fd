package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fresh connects anew for every request: a pooled connection to a server
// that has since gone down fails otherwise than a refused one would.
var fresh = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// post sends one non-streamed chat request; the status, or the error
// when no answer came.
func post(url, system string) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": "standin", "max_tokens": 1,
		"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": "x"}}})
	resp, err := fresh.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// metric reads one unlabelled or labelled sample's value from /metrics.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := fresh.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, b)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitUp polls until the server answers, or fails the test.
func waitUp(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := fresh.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s not back within %v", url, within)
}

// TestOutageRestartsEmpty: an outage cuts the request in flight, refuses
// connections while it lasts, and the server comes back as a restarted
// engine: nothing cached, counters from zero, a new start time. Its ends
// count the fleet's arrivals: the other server's requests bring it back.
func TestOutageRestartsEmpty(t *testing.T) {
	prompt := strings.Repeat("p", 2048)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := StartFleet(ctx, []Config{
		{Name: "r", CacheBlocks: 64, Overhead: time.Millisecond, DecodePerToken: 40 * time.Millisecond, DownAfter: 3, UpAfter: 5},
		{Name: "other"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, other := ss[0], ss[1]
	if st, err := post(s.URL(), prompt); err != nil || st != 200 {
		t.Fatalf("before the outage: %d, %v", st, err)
	}
	if _, n := ttft(t, s.URL(), prompt, "x", 1); n != 1 {
		t.Fatalf("before the outage: %d tokens", n)
	}
	hitsBefore := metric(t, s.URL(), "vllm:prefix_cache_hits_total")
	startBefore := metric(t, s.URL(), "process_start_time_seconds")
	if hitsBefore == 0 {
		t.Fatal("the second request found nothing cached")
	}
	// A long answer (2 s), the third arrival, is cut by the outage it
	// starts.
	body, _ := json.Marshal(map[string]any{"model": "standin", "stream": true, "max_tokens": 50,
		"messages": []map[string]any{{"role": "user", "content": "long"}}})
	// The cut may come before its headers or after: either way it must
	// not end cleanly.
	resp, err := fresh.Post(s.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a 2 s answer in flight at the outage ended cleanly")
	}
	for range 3 {
		_, err = post(s.URL(), prompt)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("during the outage: %v, want connection refused", err)
		}
	}
	if _, err := post(other.URL(), "x"); err != nil { // the fourth
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := post(s.URL(), prompt); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("four arrivals in, before UpAfter's five: %v, want connection refused", err)
	}
	if _, err := post(other.URL(), "x"); err != nil { // the fifth
		t.Fatal(err)
	}
	waitUp(t, s.URL(), time.Second)
	if h := metric(t, s.URL(), "vllm:prefix_cache_hits_total"); h != 0 {
		t.Errorf("hits after the restart = %v, want 0 (counters from zero)", h)
	}
	if st := metric(t, s.URL(), "process_start_time_seconds"); st <= startBefore {
		t.Errorf("start time %v after the restart, %v before", st, startBefore)
	}
	if st, err := post(s.URL(), prompt); err != nil || st != 200 {
		t.Fatalf("after the outage: %d, %v", st, err)
	}
	if h := metric(t, s.URL(), "vllm:prefix_cache_hits_total"); h != 0 {
		t.Errorf("the prompt cached before the outage was found after it (%v hits)", h)
	}
	if got := s.Stats(); got.HitChars != int64(hitsBefore*4) {
		t.Errorf("Stats over the run: %d hit chars, want the %v before the restart", got.HitChars, hitsBefore*4)
	}
}

// TestDownAtStart: DownAfter 0 is a replica that comes up late, once the
// fleet has taken UpAfter requests.
func TestDownAtStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := StartFleet(ctx, []Config{{Name: "late", UpAfter: 2}, {Name: "up"}})
	if err != nil {
		t.Fatal(err)
	}
	s := ss[0]
	for i := range 2 {
		if _, err := post(s.URL(), "x"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("before it came up: %v, want connection refused", err)
		}
		if _, err := post(ss[1].URL(), "x"); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitUp(t, s.URL(), time.Second)
	if st, err := post(s.URL(), "x"); err != nil || st != 200 {
		t.Fatalf("once up: %d, %v", st, err)
	}
}

// TestErrorShare: about ErrorShare of the requests are answered 503, the
// same ones for the same name.
func TestErrorShare(t *testing.T) {
	draw := func() string {
		s := start(t, Config{Name: "flaky", ErrorShare: 0.25})
		var b strings.Builder
		for range 200 {
			st, err := post(s.URL(), "x")
			if err != nil {
				t.Fatal(err)
			}
			if st != 200 && st != http.StatusServiceUnavailable {
				t.Fatalf("status %d", st)
			}
			b.WriteByte("x."[min(st/100-2, 1)])
		}
		return b.String()
	}
	a := draw()
	if n := strings.Count(a, "."); n < 30 || n > 70 {
		t.Errorf("%d of 200 answered 503, want about 50", n)
	}
	if b := draw(); b != a {
		t.Errorf("the same name drew other failures:\n%s\n%s", a, b)
	}
}

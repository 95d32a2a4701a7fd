package standin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// ttft sends one streamed chat request and returns the time to its first
// content event and the number of content events.
func ttft(t *testing.T, url, system, user string, maxTokens int) (time.Duration, int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "standin", "stream": true, "max_tokens": maxTokens,
		"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}}})
	start := time.Now()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var first time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &ch); err != nil {
			t.Fatal(err)
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			if n == 0 {
				first = time.Since(start)
			}
			n++
		}
	}
	return first, n
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// together sends n requests of prompt at once and returns their TTFTs.
func together(t *testing.T, url, prompt string, n int) []time.Duration {
	var wg sync.WaitGroup
	ds := make([]time.Duration, n)
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[i], _ = ttft(t, url, prompt, "x", 1)
		}()
	}
	wg.Wait()
	return ds
}

// TestLatencyModel checks each part of the model over real HTTP: a
// cached prefix is cheaper, a cache smaller than the working set forgets,
// slots queue, speed and drift scale the cost.
func TestLatencyModel(t *testing.T) {
	sys := strings.Repeat("s", 8000) // 8 kilo-chars: 80 ms uncached at 10 ms/kchar
	base := Config{BlockChars: 256, CacheBlocks: 64, Slots: 4, PrefillPerKChar: 10 * time.Millisecond, DecodePerToken: time.Millisecond}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"prefix hit is cheaper", func(t *testing.T) {
			// A dearer prefill (320 ms uncached) than the other cases: the
			// warm request's few milliseconds must stand out from a loaded
			// machine's scheduling delays.
			c := base
			c.PrefillPerKChar = 40 * time.Millisecond
			s := start(t, c)
			cold, n := ttft(t, s.URL(), sys, "a", 4)
			warm, _ := ttft(t, s.URL(), sys, "b", 4)
			if n != 4 {
				t.Errorf("%d content events, want 4", n)
			}
			if cold < 280*time.Millisecond || warm > cold/2 {
				t.Errorf("cold %v, warm %v: want cold ≥ 280 ms and warm < cold/2", cold, warm)
			}
			if st := s.Stats(); st.HitRate() < 0.4 || st.Requests != 2 {
				t.Errorf("stats %+v: want 2 requests, about half the characters hit", st)
			}
		}},
		{"small cache forgets", func(t *testing.T) {
			c := base
			c.CacheBlocks = 40 // < 2 prompts of 31 blocks
			s := start(t, c)
			ttft(t, s.URL(), sys, "a", 1)
			// Two other prompts push all 31 of its blocks out.
			ttft(t, s.URL(), strings.Repeat("t", 8000), "a", 1)
			ttft(t, s.URL(), strings.Repeat("u", 8000), "a", 1)
			again, _ := ttft(t, s.URL(), sys, "c", 1)
			if again < 60*time.Millisecond {
				t.Errorf("evicted prefix answered in %v, want a miss (≥ 60 ms)", again)
			}
		}},
		{"slots queue first in first out", func(t *testing.T) {
			c := base
			c.Slots, c.CacheBlocks = 1, 0
			s := start(t, c)
			ds := together(t, s.URL(), sys, 3)
			slowest := max(ds[0], ds[1], ds[2])
			if slowest < 220*time.Millisecond {
				t.Errorf("three requests on one slot: slowest TTFT %v, want ≥ 3×80 ms less slack", slowest)
			}
		}},
		{"speed and drift", func(t *testing.T) {
			c := base
			c.CacheBlocks, c.Speed, c.DriftAfter, c.DriftFactor = 0, 2, 2, 4
			s := start(t, c)
			long := sys + sys // 16 kilo-chars: 160 ms at speed 1
			fast, _ := ttft(t, s.URL(), long, "x", 1)
			slow, _ := ttft(t, s.URL(), long, "x", 1) // the second arrival: drifted
			if fast < 75*time.Millisecond || fast > 130*time.Millisecond || slow < 3*fast {
				t.Errorf("speed 2: %v (want ≈ 80 ms); after 4× drift: %v (want ≥ 3× that)", fast, slow)
			}
		}},
		{"shared prefill slows each by the others", func(t *testing.T) {
			c := base
			c.CacheBlocks, c.SharedPrefill = 0, true
			s := start(t, c)
			alone, _ := ttft(t, s.URL(), sys, "x", 1)
			ds := together(t, s.URL(), sys, 3)
			// Three prefills of 80 ms on one processor end together
			// near 240 ms; on slots they would end near 80.
			fastest := min(ds[0], ds[1], ds[2])
			if alone > 130*time.Millisecond || fastest < 180*time.Millisecond {
				t.Errorf("alone %v (want ≈ 80 ms); three at once: fastest %v, want ≥ 180 ms (≈ 240)", alone, fastest)
			}
		}},
		{"network delay", func(t *testing.T) {
			c := base
			c.CacheBlocks, c.PrefillPerKChar, c.Network = 0, 0, 60*time.Millisecond
			s := start(t, c)
			d, _ := ttft(t, s.URL(), "short", "x", 1)
			if d < 60*time.Millisecond {
				t.Errorf("TTFT %v with a 60 ms round trip, want ≥ 60 ms", d)
			}
			if sv := s.Served(); len(sv) != 1 || sv[0].TTFT > 40*time.Millisecond {
				t.Errorf("served %+v: the server's own TTFT should not count the network", sv)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

func TestMetricsAndModels(t *testing.T) {
	s := start(t, Config{Model: "m1", CacheBlocks: 8, PrefillPerKChar: time.Millisecond})
	for path, want := range map[string]string{
		"/metrics":   "vllm:num_requests_waiting{model_name=\"m1\"} 0",
		"/v1/models": `"id":"m1"`,
	} {
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: %q lacks %q", path, b, want)
		}
	}
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"other","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown model: status %d, want 404", resp.StatusCode)
	}
}

// TestServedRecords: each request that got its first token is recorded
// with its X-Request-Id, its wait for a slot and its server-side TTFT
// (arrival to first token), which a client over loopback can only find
// longer.
func TestServedRecords(t *testing.T) {
	const cost = 40 * time.Millisecond
	s := start(t, Config{Slots: 1, Overhead: cost, DecodePerToken: time.Millisecond})
	ids := []string{"r-0", "r-1"}
	client := make([]time.Duration, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 60 tokens keep the first answer going 60 ms past its first
			// token, so the second request still queues behind it by more
			// than the cost when the two leave up to 60 ms apart (a loaded
			// CI machine staggers goroutines by tens of milliseconds).
			body := `{"model":"standin","stream":true,"max_tokens":60,"messages":[{"role":"user","content":"hi"}]}`
			req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("X-Request-Id", id)
			t0 := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"content":"tok `) {
					client[i] = time.Since(t0)
					break
				}
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	wg.Wait()
	got := s.Served()
	if len(got) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(got), got)
	}
	queued := 0
	for _, r := range got {
		i := slices.Index(ids, r.ID)
		if i < 0 {
			t.Errorf("record %+v: unknown id", r)
			continue
		}
		// One slot: one request waits for the other's whole answer.
		if r.Queued >= cost {
			queued++
		}
		// Late is what the host added to the model: the rest of the TTFT.
		if want := max(r.TTFT-r.Queued-cost, 0); r.Late != want {
			t.Errorf("%s: late %v, want TTFT %v - queued %v - cost %v = %v", r.ID, r.Late, r.TTFT, r.Queued, cost, want)
		}
		if r.TTFT < r.Queued+cost || r.TTFT > r.Queued+cost+100*time.Millisecond {
			t.Errorf("%s: TTFT %v, queued %v: want the queue plus the %v cost (and < 100 ms more)", r.ID, r.TTFT, r.Queued, cost)
		}
		if client[i] < r.TTFT {
			t.Errorf("%s: client TTFT %v under the server's %v", r.ID, client[i], r.TTFT)
		}
		if r.PromptChars == 0 || r.HitChars != 0 {
			t.Errorf("%s: %d prompt chars, %d hit; want some, none hit (no cache)", r.ID, r.PromptChars, r.HitChars)
		}
	}
	if queued != 1 {
		t.Errorf("%d requests waited a whole request for the slot, want 1: %+v", queued, got)
	}
}

// TestServedLate: a first token written later than the latency model said
// is recorded as that lateness — the host's share of the TTFT.
func TestServedLate(t *testing.T) {
	s := start(t, Config{Name: "x", Slots: 1})
	now := time.Now()
	s.record("late", now.Add(-70*time.Millisecond), now.Add(-60*time.Millisecond), now, 100, 0, 15*time.Millisecond)
	s.record("early", now, now, now, 100, 0, time.Hour)
	got := s.Served()
	if len(got) != 2 {
		t.Fatalf("records %+v", got)
	}
	if l := got[0].Late; l != 45*time.Millisecond {
		t.Errorf("late %v, want about 60 ms in the slot - 15 ms modelled = 45 ms", l)
	}
	if got[0].Queued != 10*time.Millisecond {
		t.Errorf("queued %v, want 10 ms", got[0].Queued)
	}
	if got[1].Late != 0 {
		t.Errorf("a token before its modelled time: late %v, want 0", got[1].Late)
	}
}

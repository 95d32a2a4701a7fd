package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/wire"
)

// The gateway's own access-log formatter must produce byte for byte what
// log/slog's JSONHandler produces for the same record, so that switching
// between them (Options.AccessLog or Logger) changes nothing downstream.
func TestAccessLineMatchesSlog(t *testing.T) {
	now := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	for _, tc := range []struct {
		name string
		x    exchange
		e2e  time.Duration
	}{
		{"plain", exchange{api: wire.OpenAIChat, model: "m", stream: true, status: 200, backend: "b", policy: "slo-predictive", reason: "headroom", class: "chat",
			slo: 320 * time.Millisecond, predicted: 1234567 * time.Nanosecond, ttft: 987654 * time.Nanosecond, attempts: 1, outTokens: 8}, 12 * time.Millisecond},
		{"all optional fields", exchange{api: wire.Anthropic, model: "claude\"x\\y", status: 502, key: "team <a&b>", admission: "degrade", translated: "anthropic->openai", canceled: true,
			errMsg: "backend b ended\n\tthe stream \x01 \u2028 \xff ünïcode"}, 3 * time.Second},
		{"tiny and huge floats", exchange{api: wire.OpenAIChat, slo: 1, predicted: time.Duration(1 << 62), ttft: 3}, 0},
		{"zero", exchange{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(accessLine(nil, now, &tc.x, tc.e2e))
			var want bytes.Buffer
			h := slog.NewJSONHandler(&want, nil)
			r := slog.NewRecord(now, slog.LevelInfo, "request", 0)
			r.AddAttrs(accessAttrs(&tc.x, tc.e2e)...)
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got != want.String() {
				t.Fatalf("accessLine:\n%s\nslog:\n%s", got, want.String())
			}
		})
	}
}

type countingWriter struct {
	mu     sync.Mutex
	writes int
	b      bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	return c.b.Write(p)
}

func (c *countingWriter) get() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.b.String()
}

func TestLogBuffer(t *testing.T) {
	w := &countingWriter{}
	lb := NewLogBuffer(w, 20*time.Millisecond)
	for i := range 100 {
		lb.Write([]byte(strings.Repeat("x", i) + "\n"))
	}
	if n, _ := w.get(); n != 0 {
		t.Fatalf("%d writes before the flush interval: lines should be batched", n)
	}
	// The timer writes the batch out by itself.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, s := w.get()
		if n == 1 && strings.Count(s, "\n") == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the interval: %d writes, %d lines; want 1 write of 100 lines", n, strings.Count(s, "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A full buffer is written at once, whole lines only.
	line := []byte(strings.Repeat("y", 999) + "\n")
	for range 100 {
		lb.Write(line)
	}
	n, s := w.get()
	if n < 3 {
		t.Fatalf("100 KB of lines in %d writes: the 32 KiB bound was not applied", n)
	}
	lb.Flush()
	_, s = w.get()
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n")[100:] {
		if len(l) != 999 {
			t.Fatalf("a line was split or merged: %d bytes", len(l))
		}
	}
	// A line larger than the buffer goes through whole.
	big := []byte(strings.Repeat("z", 40<<10) + "\n")
	lb.Write(big)
	lb.Flush()
	if _, s := w.get(); !strings.HasSuffix(s, string(big)) {
		t.Fatal("a line over 32 KiB was not written whole")
	}
}

// BenchmarkAccessLog is one access-log line: the gateway's formatter into
// a LogBuffer (what `ttft gateway` uses) vs log/slog's JSON handler.
func BenchmarkAccessLog(b *testing.B) {
	x := exchange{api: wire.OpenAIChat, model: "llama-3.1-8b", stream: true, status: 200, backend: "h100-a", policy: "slo-predictive", reason: "headroom",
		class: "chat", slo: 320 * time.Millisecond, predicted: 87 * time.Millisecond, ttft: 91 * time.Millisecond, attempts: 1, outTokens: 256}
	b.Run("accessLine+LogBuffer", func(b *testing.B) {
		lb := NewLogBuffer(io.Discard, time.Second)
		var line []byte
		b.ReportAllocs()
		for b.Loop() {
			line = accessLine(line[:0], time.Now(), &x, 1500*time.Millisecond)
			lb.Write(line)
		}
	})
	b.Run("slog", func(b *testing.B) {
		l := slog.New(slog.NewJSONHandler(io.Discard, nil))
		b.ReportAllocs()
		for b.Loop() {
			l.LogAttrs(context.Background(), slog.LevelInfo, "request", accessAttrs(&x, 1500*time.Millisecond)...)
		}
	})
}

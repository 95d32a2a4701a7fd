package gateway

import (
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/ttft-dev/ttft/internal/jsonscan"
)

// LogBuffer batches log lines on their way to w: lines are written out
// when 32 KiB have accumulated or at most FlushEvery after the first
// unwritten one, and on Flush. A write system call per request line (to a
// pipe or a journal) costs as much as routing the request; nginx's
// access_log has buffer= and flush= for the same reason. Each Write must be
// whole lines (log/slog handlers and the access log write one line per
// call), so lines never interleave.
type LogBuffer struct {
	w     io.Writer
	every time.Duration

	mu    sync.Mutex
	buf   []byte
	armed bool
	timer *time.Timer
}

// logBufferSize is the batch that is written out at once.
const logBufferSize = 32 << 10

// NewLogBuffer buffers lines for w, written at most every (0: 200 ms) after
// the first unwritten line.
func NewLogBuffer(w io.Writer, every time.Duration) *LogBuffer {
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	b := &LogBuffer{w: w, every: every, buf: make([]byte, 0, logBufferSize)}
	b.timer = time.AfterFunc(time.Hour, func() { b.Flush() })
	b.timer.Stop()
	return b
}

// Write appends whole lines. It never fails: like log/slog, a log whose
// destination fails drops lines rather than fail requests.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > logBufferSize && len(b.buf) > 0 {
		b.flushLocked()
	}
	if len(p) >= logBufferSize {
		b.w.Write(p)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	if !b.armed {
		b.armed = true
		b.timer.Reset(b.every)
	}
	return len(p), nil
}

// Flush writes out what is buffered.
func (b *LogBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *LogBuffer) flushLocked() error {
	b.armed = false
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// accessLine appends one access-log record as a JSON line with the same
// shape log/slog's JSONHandler gives it (time, level, msg, then the fields
// in order), without slog's reflection-driven formatting: with a buffered
// destination, formatting was the largest part of the gateway's own
// per-request CPU.
func accessLine(b []byte, now time.Time, x *exchange, e2e time.Duration) []byte {
	b = append(b, `{"time":"`...)
	b = now.AppendFormat(b, time.RFC3339Nano) // as slog.JSONHandler
	b = append(b, `","level":"INFO","msg":"request","api":`...)
	b = jsonscan.AppendString(b, x.api.Provider())
	b = append(b, `,"model":`...)
	b = jsonscan.AppendString(b, x.model)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, x.stream)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(x.status), 10)
	b = append(b, `,"backend":`...)
	b = jsonscan.AppendString(b, x.backend)
	b = append(b, `,"policy":`...)
	b = jsonscan.AppendString(b, x.policy)
	b = append(b, `,"reason":`...)
	b = jsonscan.AppendString(b, x.reason)
	b = append(b, `,"slo_class":`...)
	b = jsonscan.AppendString(b, x.class)
	b = append(b, `,"slo_ms":`...)
	b = appendJSONFloat(b, ms(x.slo))
	b = append(b, `,"predicted_p95_ms":`...)
	b = appendJSONFloat(b, ms(x.predicted))
	b = append(b, `,"ttft_ms":`...)
	b = appendJSONFloat(b, ms(x.ttft))
	b = append(b, `,"e2e_ms":`...)
	b = appendJSONFloat(b, ms(e2e))
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(x.attempts), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(x.outTokens), 10)
	if x.key != "" {
		b = append(b, `,"key":`...)
		b = jsonscan.AppendString(b, x.key)
	}
	if x.admission != "" {
		b = append(b, `,"admission":`...)
		b = jsonscan.AppendString(b, x.admission)
	}
	if x.translated != "" {
		b = append(b, `,"translated":`...)
		b = jsonscan.AppendString(b, x.translated)
	}
	if c := x.splice.continuedLog(); c != "" {
		b = append(b, `,"continued":`...)
		b = jsonscan.AppendString(b, c)
	}
	if x.canceled {
		b = append(b, `,"client_canceled":true`...)
	}
	if x.errMsg != "" {
		b = append(b, `,"error":`...)
		b = jsonscan.AppendString(b, x.errMsg)
	}
	return append(b, "}\n"...)
}

// appendJSONFloat formats as encoding/json does (and so slog).
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return jsonscan.AppendString(b, strconv.FormatFloat(f, 'g', -1, 64))
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// accessAttrs are the access log's fields when it goes through Logger
// (accessLine writes the same fields itself).
func accessAttrs(x *exchange, e2e time.Duration) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("api", x.api.Provider()), slog.String("model", x.model), slog.Bool("stream", x.stream),
		slog.Int("status", x.status), slog.String("backend", x.backend), slog.String("policy", x.policy),
		slog.String("reason", x.reason), slog.String("slo_class", x.class),
		slog.Float64("slo_ms", ms(x.slo)), slog.Float64("predicted_p95_ms", ms(x.predicted)),
		slog.Float64("ttft_ms", ms(x.ttft)), slog.Float64("e2e_ms", ms(e2e)),
		slog.Int("attempts", x.attempts), slog.Int("output_tokens", x.outTokens),
	}
	if x.key != "" {
		attrs = append(attrs, slog.String("key", x.key))
	}
	if x.admission != "" {
		attrs = append(attrs, slog.String("admission", x.admission))
	}
	if x.translated != "" {
		attrs = append(attrs, slog.String("translated", x.translated))
	}
	if c := x.splice.continuedLog(); c != "" {
		attrs = append(attrs, slog.String("continued", c))
	}
	if x.canceled {
		attrs = append(attrs, slog.Bool("client_canceled", true))
	}
	if x.errMsg != "" {
		attrs = append(attrs, slog.String("error", x.errMsg))
	}
	return attrs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

package gateway

import (
	"io"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
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
	b = appendJSONString(b, x.api)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, x.model)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, x.stream)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(x.status), 10)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, x.backend)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, x.policy)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, x.reason)
	b = append(b, `,"slo_class":`...)
	b = appendJSONString(b, x.class)
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
		b = appendJSONString(b, x.key)
	}
	if x.admission != "" {
		b = append(b, `,"admission":`...)
		b = appendJSONString(b, x.admission)
	}
	if x.translated != "" {
		b = append(b, `,"translated":`...)
		b = appendJSONString(b, x.translated)
	}
	if x.canceled {
		b = append(b, `,"client_canceled":true`...)
	}
	if x.errMsg != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, x.errMsg)
	}
	return append(b, "}\n"...)
}

// appendJSONFloat formats as encoding/json does (and so slog).
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return appendJSONString(b, strconv.FormatFloat(f, 'g', -1, 64))
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

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and
// U+2029 escaped (as encoding/json does).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

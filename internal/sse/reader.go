package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// DefaultMaxEventBytes bounds one line and one event's data. Large enough for
// a 50k-token prompt echo or a big tool-call chunk; configurable.
const DefaultMaxEventBytes = 8 << 20

// ErrTooLarge is returned when a line or an event's data exceeds the limit.
var ErrTooLarge = errors.New("sse: event exceeds the size limit")

// Event is one dispatched event. Its byte slices are valid until the next
// call to Next.
type Event struct {
	Type []byte // the "event:" field; empty means "message"
	Data []byte // "data:" lines joined with \n
	ID   []byte
	// Retry is the "retry:" field in milliseconds, or -1.
	Retry int
	// At is when the socket read that completed this event returned.
	At time.Time
	// Coalesced is true when the same read also completed the previous
	// event: the gap between them says nothing about the server.
	Coalesced bool
	// Unterminated marks an event the stream ended in the middle of (no
	// closing blank line). The spec discards such events; we hand them over
	// flagged, so a caller can decide.
	Unterminated bool
	// Comments counts comment lines (": keep-alive") seen since the previous
	// event.
	Comments int
}

// Options configure a Reader.
type Options struct {
	// MaxEventBytes bounds a line and an event's data (default DefaultMaxEventBytes).
	MaxEventBytes int
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// OnRead, if set, is called with each read's time and size, e.g. to
	// record when the first byte arrived.
	OnRead func(at time.Time, n int)
}

// Reader reads events from a stream.
type Reader struct {
	src        io.Reader
	opt        Options
	buf        []byte // unconsumed bytes are buf[start:end]
	start, end int
	eof        bool
	err        error

	readSeq    uint64 // increments per read
	readAt     time.Time
	lastDisp   uint64 // readSeq of the previous dispatched event
	skipLF     bool   // previous line ended in CR at a buffer edge
	ev         Event
	data       []byte
	typ, id    []byte
	hasData    bool
	retry      int
	comments   int
	dispatched bool
}

// initialBuf is a new Reader's buffer: most events are a few hundred bytes
// and it grows on demand. It is no smaller than the HTTP transport's read
// buffer (4 KiB), so that one read of ours takes all that one socket read
// brought: events that arrived together stay flagged Coalesced.
const initialBuf = 4 << 10

// maxKeptBuf bounds the event buffers Reset keeps: one huge event should
// not pin megabytes for the rest of a run.
const maxKeptBuf = 64 << 10

// NewReader returns a Reader on src.
func NewReader(src io.Reader, opt Options) *Reader {
	r := &Reader{}
	r.Reset(src, opt)
	return r
}

// Reset makes r a new Reader on src, keeping its buffers (the read buffer
// when it has not grown, since its size bounds a line; the event's fields
// up to 64 KiB each). A load generator reads one stream per request: reusing readers
// saves their buffer, which was a request's largest allocation (4 KiB of
// its ≈ 17 KiB at 1,000 streams). Events returned before are invalid
// after it.
func (r *Reader) Reset(src io.Reader, opt Options) {
	if opt.MaxEventBytes <= 0 {
		opt.MaxEventBytes = DefaultMaxEventBytes
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	buf := r.buf
	if len(buf) != initialBuf {
		buf = make([]byte, initialBuf)
	}
	keep := func(b []byte) []byte {
		if cap(b) > maxKeptBuf {
			return nil
		}
		return b[:0]
	}
	*r = Reader{src: src, opt: opt, buf: buf, data: keep(r.data), typ: keep(r.typ), id: keep(r.id), retry: -1}
}

// Next returns the next event, io.EOF at a clean end of stream, or
// another error (io.ErrUnexpectedEOF is never returned: a final event
// without a blank line comes back flagged Unterminated).
func (r *Reader) Next() (*Event, error) {
	for {
		line, ok, err := r.line()
		if err != nil {
			return nil, err
		}
		if !ok { // end of stream
			if r.hasData {
				r.dispatch(true)
				return &r.ev, nil
			}
			if r.err != nil && !errors.Is(r.err, io.EOF) {
				return nil, r.err
			}
			return nil, io.EOF
		}
		if len(line) == 0 {
			if r.hasData {
				r.dispatch(false)
				return &r.ev, nil
			}
			// A blank line with no data resets the event (spec).
			r.typ, r.id = r.typ[:0], r.id[:0]
			continue
		}
		if err := r.field(line); err != nil {
			return nil, err
		}
	}
}

func (r *Reader) dispatch(unterminated bool) {
	data := r.data
	if n := len(data); n > 0 && data[n-1] == '\n' {
		data = data[:n-1]
	}
	r.ev = Event{
		Type: r.typ, Data: data, ID: r.id, Retry: r.retry, At: r.readAt,
		Coalesced: r.dispatched && r.lastDisp == r.readSeq, Unterminated: unterminated,
		Comments: r.comments,
	}
	r.lastDisp, r.dispatched = r.readSeq, true
	r.data, r.typ, r.id = r.data[:0], r.typ[:0], r.id[:0]
	r.hasData, r.comments, r.retry = false, 0, -1
}

func (r *Reader) field(line []byte) error {
	if line[0] == ':' {
		r.comments++
		return nil
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if len(r.data)+len(value)+1 > r.opt.MaxEventBytes {
			return fmt.Errorf("%w: data over %d bytes", ErrTooLarge, r.opt.MaxEventBytes)
		}
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
		r.hasData = true
	case "event":
		r.typ = append(r.typ[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			r.id = append(r.id[:0], value...)
		}
	case "retry":
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
			r.retry = n
		}
	}
	return nil
}

// line returns the next line without its terminator. ok is false at the end
// of the stream (any unterminated last line is returned first).
func (r *Reader) line() (line []byte, ok bool, err error) {
	scanFrom := r.start
	for {
		if r.skipLF && r.start < r.end {
			if r.buf[r.start] == '\n' {
				r.start++
			}
			r.skipLF = false
			scanFrom = r.start
		}
		if i := indexLineEnd(r.buf[scanFrom:r.end]); i >= 0 {
			i += scanFrom
			line = r.buf[r.start:i]
			if r.buf[i] == '\r' {
				if i+1 < r.end {
					if r.buf[i+1] == '\n' {
						i++
					}
				} else {
					r.skipLF = true
				}
			}
			r.start = i + 1
			return line, true, nil
		}
		scanFrom = r.end
		if r.eof {
			if r.start < r.end {
				line = r.buf[r.start:r.end]
				r.start = r.end
				return line, true, nil
			}
			return nil, false, nil
		}
		// Need more bytes: compact or grow, then read.
		if r.start > 0 {
			n := copy(r.buf, r.buf[r.start:r.end])
			scanFrom -= r.start
			r.start, r.end = 0, n
		}
		if r.end == len(r.buf) {
			if len(r.buf) >= r.opt.MaxEventBytes {
				return nil, false, fmt.Errorf("%w: a line is over %d bytes", ErrTooLarge, r.opt.MaxEventBytes)
			}
			nb := make([]byte, min(2*len(r.buf), r.opt.MaxEventBytes))
			copy(nb, r.buf[:r.end])
			r.buf = nb
		}
		n, rerr := r.src.Read(r.buf[r.end:])
		if n > 0 {
			r.readAt = r.opt.Now()
			r.readSeq++
			r.end += n
			if r.opt.OnRead != nil {
				r.opt.OnRead(r.readAt, n)
			}
		}
		if rerr != nil {
			r.eof = true
			if !errors.Is(rerr, io.EOF) {
				r.err = rerr
				if r.start == r.end && !r.hasData {
					return nil, false, rerr
				}
			}
		}
	}
}

func indexLineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	if lf < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if cr := bytes.IndexByte(b[:lf], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// Err returns the error that ended the stream, if it was not a clean EOF.
func (r *Reader) Err() error {
	if r.err != nil && !errors.Is(r.err, io.EOF) {
		return r.err
	}
	return nil
}

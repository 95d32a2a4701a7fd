package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// JSONLWriter appends records to a requests.jsonl file, one line each. Safe
// for concurrent use.
//
// Write writes its record through to the file before it returns, so
// every completed measurement is on disk (in the page cache) once its
// request ends and a crash loses nothing that finished. The record is
// encoded outside the write lock and the write takes every line queued so
// far (Append queues, Flush writes), so records of requests that end while
// another's write(2) is in progress share the next one: a group commit
// that holds nothing back.
//
// A failed write (a full disk) is cut back to the last whole line and ends
// the file: later records are not written, so the file holds the run's
// first Kept records, whole, and Err says what failed. The caller keeps the
// records elsewhere (in memory, the results database).
type JSONLWriter struct {
	// wmu orders the writes to f (Flush, Close); mu guards the rest, and is
	// never held across a write(2), so Append does not wait for the disk.
	wmu   sync.Mutex
	mu    sync.Mutex
	f     *os.File
	path  string
	queue []byte // whole lines appended and not yet written
	lines int    // how many lines queue holds
	spare []byte // the previous batch's buffer, reused for the next
	size  int64  // bytes of whole lines in the file
	kept  int
	err   error
}

// maxKeptBuffer bounds the batch buffer kept for reuse: one huge batch
// (or record) does not stay allocated for the rest of the run.
const maxKeptBuffer = 1 << 20

// NewJSONLWriter creates (or appends to) path.
func NewJSONLWriter(path string) (*JSONLWriter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return &JSONLWriter{f: f, path: path, size: st.Size()}, nil
}

// Path is the file written.
func (w *JSONLWriter) Path() string { return w.path }

// Write appends one record, with any lines queued before it, as a single
// write(2), so a crash leaves either the whole line or none of it. After a
// failed write it does nothing and returns nil: the failure was reported
// once and stays in Err.
func (w *JSONLWriter) Write(r *Record) error {
	if err := w.Append(r); err != nil {
		return err
	}
	return w.Flush()
}

// Append encodes one record and queues its line for the next Flush. Its
// only error is a record that cannot be encoded (which is not queued and
// does not end the file); after a failed write it does nothing.
func (w *JSONLWriter) Append(r *Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.f == nil {
		return nil
	}
	q, ok := AppendJSON(w.queue, r)
	if !ok {
		// A value only encoding/json knows what to do with (or refuses):
		// its answer, its error.
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(r); err != nil {
			return fmt.Errorf("encoding record %d: %w", r.Index, err)
		}
		q = append(q, buf.Bytes()...)
	}
	w.queue = q
	w.lines++
	return nil
}

// Flush writes the queued lines in one write(2). It returns the failure
// that ends the file the first time it happens (the whole lines that made
// it stay, the rest is cut back), nil after.
func (w *JSONLWriter) Flush() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.flushLocked()
}

// flushLocked is Flush with wmu held.
func (w *JSONLWriter) flushLocked() error {
	w.mu.Lock()
	if w.err != nil || w.f == nil || len(w.queue) == 0 {
		w.mu.Unlock()
		return nil
	}
	batch, lines := w.queue, w.lines
	w.queue, w.lines, w.spare = w.spare[:0], 0, nil
	w.mu.Unlock()

	n, err := w.f.Write(batch) // wmu: no other write or Close meanwhile

	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = fmt.Errorf("writing %s: %w", w.path, bare(err))
		// The whole lines that were written stay; a half line would
		// make the file unreadable to strict readers, and cutting it
		// back frees the space it took.
		whole := bytes.LastIndexByte(batch[:n], '\n') + 1
		if whole < n {
			if terr := w.f.Truncate(w.size + int64(whole)); terr != nil {
				w.err = fmt.Errorf("%w (and cutting back its half-written last line: %v)", w.err, terr)
			}
		}
		w.size += int64(whole)
		w.kept += bytes.Count(batch[:whole], []byte{'\n'}) // a line's JSON holds no raw newline
		w.queue, w.lines = nil, 0
		return w.err
	}
	w.size += int64(n)
	w.kept += lines
	if cap(batch) <= maxKeptBuffer {
		w.spare = batch[:0]
	}
	return nil
}

// Kept is how many records this writer wrote whole (queued ones are
// written first).
func (w *JSONLWriter) Kept() int {
	_ = w.Flush() // a failure stays in Err
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept
}

// Err is the write failure that ended the file, if any (queued records are
// written first, so it answers for every record appended so far).
func (w *JSONLWriter) Err() error {
	_ = w.Flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close writes what is queued (a failure stays in Err), flushes to stable
// storage and closes the file.
func (w *JSONLWriter) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	_ = w.flushLocked()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	serr := w.f.Sync()
	cerr := w.f.Close()
	w.f = nil
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("closing %s: %w", w.path, err)
	}
	return nil
}

// ReadJSONL reads a requests.jsonl file. A malformed line is an error naming
// file and line; a truncated last line (a crash mid-write) is skipped.
func ReadJSONL(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	return DecodeJSONL(f, path)
}

// DecodeJSONL reads records from r; name is used in error messages.
func DecodeJSONL(r io.Reader, name string) ([]Record, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Record
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		last := errors.Is(err, io.EOF)
		if err != nil && !last {
			return out, fmt.Errorf("reading %s:%d: %w", name, line, err)
		}
		b = bytes.TrimSpace(b)
		if len(b) > 0 {
			var rec Record
			if jerr := json.Unmarshal(b, &rec); jerr != nil {
				if last {
					// An unterminated final line is a write cut short.
					return out, nil
				}
				return out, fmt.Errorf("%s:%d: malformed record: %w", name, line, jerr)
			}
			out = append(out, rec)
		}
		if last {
			return out, nil
		}
	}
}

// WriteJSON writes v as indented JSON to path atomically (temp file + rename).
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return WriteFile(path, append(b, '\n'))
}

// WriteFile writes b to path atomically (temp file + rename), readable by
// all like every result file.
func WriteFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating directory for %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, bare(err))
	}
	// CreateTemp makes 0600 files; results are meant to be shared.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, bare(err))
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, bare(err))
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, bare(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, bare(err))
	}
	return nil
}

// ReadJSON reads path into v with a clear error.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: malformed JSON: %w", path, err)
	}
	return nil
}

// bare drops the path an *fs.PathError repeats (of a temporary file, for
// WriteJSON), so that messages name the file once.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

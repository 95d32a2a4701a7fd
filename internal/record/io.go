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

// JSONLWriter appends records to a requests.jsonl file, one line each,
// written through to the file as each request completes, so an interrupted
// run loses nothing that finished. Safe for concurrent use.
//
// A failed write (a full disk) is cut back to the last whole line and ends
// the file: later records are not written, so the file holds the run's
// first Kept records, whole, and Err says what failed. The caller keeps the
// records elsewhere (in memory, the results database).
type JSONLWriter struct {
	mu   sync.Mutex
	f    *os.File
	path string
	buf  []byte // the line being written, reused
	size int64  // bytes of whole lines in the file
	kept int
	err  error
}

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

// Write appends one record as a single write(2), so a crash leaves either the
// whole line or none of it. After a failed write it does nothing and
// returns nil: the failure was reported once and stays in Err.
func (w *JSONLWriter) Write(r *Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.f == nil {
		return nil
	}
	line, ok := AppendJSON(w.buf[:0], r)
	if !ok {
		// A value only encoding/json knows what to do with (or refuses):
		// its answer, its error.
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(r); err != nil {
			return fmt.Errorf("encoding record %d: %w", r.Index, err)
		}
		line = buf.Bytes()
	} else if cap(line) <= 64<<10 {
		w.buf = line // keep the buffer, unless one huge record grew it
	}
	n, err := w.f.Write(line)
	if err != nil {
		w.err = fmt.Errorf("writing %s: %w", w.path, bare(err))
		if n > 0 {
			// A half line would make the file unreadable to strict
			// readers; cutting it back frees the space it took.
			if terr := w.f.Truncate(w.size); terr != nil {
				w.err = fmt.Errorf("%w (and cutting back its half-written last line: %v)", w.err, terr)
			}
		}
		return w.err
	}
	w.size += int64(n)
	w.kept++
	return nil
}

// Kept is how many records this writer wrote whole.
func (w *JSONLWriter) Kept() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept
}

// Err is the write failure that ended the file, if any.
func (w *JSONLWriter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close flushes to stable storage and closes the file.
func (w *JSONLWriter) Close() error {
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

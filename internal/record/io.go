package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// JSONLWriter appends records to a requests.jsonl file, one line each,
// written through to the file as each request completes, so an interrupted
// run loses nothing that finished. Safe for concurrent use.
type JSONLWriter struct {
	mu   sync.Mutex
	f    *os.File
	path string
	buf  bytes.Buffer
	enc  *json.Encoder
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
	w := &JSONLWriter{f: f, path: path}
	w.enc = json.NewEncoder(&w.buf)
	return w, nil
}

// Write appends one record as a single write(2), so a crash leaves either the
// whole line or none of it.
func (w *JSONLWriter) Write(r *Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Reset()
	if err := w.enc.Encode(r); err != nil {
		return fmt.Errorf("encoding record %d: %w", r.Index, err)
	}
	if _, err := w.f.Write(w.buf.Bytes()); err != nil {
		return fmt.Errorf("writing %s: %w", w.path, err)
	}
	return nil
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
	return errors.Join(serr, cerr)
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
	b = append(b, '\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating directory for %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp makes 0600 files; results are meant to be shared.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
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

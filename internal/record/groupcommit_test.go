package record

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ttft-dev/ttft/internal/testutil"
)

// Appended records reach the file only when flushed, all in one batch,
// in the order appended; Err, Kept and Close write what is queued; Write
// writes the lines queued before its own first, keeping the order.
func TestJSONLWriterGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		sync func(w *JSONLWriter) error // what should write the queue
	}{
		{"Flush", (*JSONLWriter).Flush},
		{"Err", (*JSONLWriter).Err},
		{"Kept", func(w *JSONLWriter) error { _ = w.Kept(); return nil }},
		{"Close", (*JSONLWriter).Close},
		{"Write", func(w *JSONLWriter) error { return w.Write(&Record{Index: 99}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "requests.jsonl")
			w, err := NewJSONLWriter(path)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			var want bytes.Buffer
			for i := range 5 {
				r := Record{Index: i, Sent: at(float64(i)), ITLMs: []float64{1.5, float64(i)}}
				if err := w.Append(&r); err != nil {
					t.Fatal(err)
				}
				line, _ := encodingJSON(t, &r)
				want.Write(line)
			}
			if st, err := os.Stat(path); err != nil || st.Size() != 0 {
				t.Fatalf("appended records written before a flush: %v %v", st.Size(), err)
			}
			if err := tc.sync(w); err != nil {
				t.Fatal(err)
			}
			if tc.name == "Write" {
				line, _ := encodingJSON(t, &Record{Index: 99})
				want.Write(line)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("file:\n%s\nwant:\n%s", got, want.Bytes())
			}
			if tc.name != "Close" {
				if k := w.Kept(); k != strings.Count(want.String(), "\n") {
					t.Errorf("kept %d", k)
				}
			}
		})
	}
}

// Appends and flushes from many goroutines at once leave whole lines only,
// every record exactly once (go test -race checks the locking).
func TestJSONLWriterConcurrentAppendFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	w, err := NewJSONLWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := Record{Index: g*each + i, Error: strings.Repeat("x", i)}
				var err error
				if i%3 == 0 {
					err = w.Write(&r)
				} else {
					err = w.Append(&r)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if i%7 == 0 {
					if err := w.Flush(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadJSONL(path)
	if err != nil || len(recs) != workers*each {
		t.Fatalf("%d records read back (%v), want %d", len(recs), err, workers*each)
	}
	seen := map[int]bool{}
	for _, r := range recs {
		if seen[r.Index] || r.Error != strings.Repeat("x", r.Index%each) {
			t.Fatalf("record %d twice or garbled", r.Index)
		}
		seen[r.Index] = true
	}
}

// A batch that does not fit keeps its whole lines and cuts back the half
// one: the file holds exactly the first Kept records, whole, and later
// appends are dropped.
func TestJSONLWriterBatchOnFullDisk(t *testing.T) {
	dir := testutil.TinyFS(t, 64<<10)
	path := filepath.Join(dir, "requests.jsonl")
	w, err := NewJSONLWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 400 // ≈ 100 KB of lines: more than the file system holds
	for i := range n {
		if err := w.Append(&Record{Index: i, Error: strings.Repeat("e", 200)}); err != nil {
			t.Fatal(err)
		}
	}
	err = w.Flush()
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), path) {
		t.Fatalf("flush: %v", err)
	}
	if err := w.Flush(); err != nil {
		t.Errorf("the failure was reported again: %v", err)
	}
	if err := w.Append(&Record{Index: n}); err != nil {
		t.Error(err)
	}
	kept := w.Kept()
	data, _ := os.ReadFile(path)
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("the file ends in a half line (%d bytes)", len(data))
	}
	recs, rerr := ReadJSONL(path)
	if rerr != nil || len(recs) != kept || kept == 0 || kept >= n {
		t.Fatalf("%d whole records (%v), Kept %d of %d", len(recs), rerr, kept, n)
	}
	for i, r := range recs {
		if r.Index != i {
			t.Fatalf("record %d is index %d", i, r.Index)
		}
	}
	if w.Err() == nil || fmt.Sprint(w.Err()) != fmt.Sprint(err) {
		t.Errorf("Err %v, want %v", w.Err(), err)
	}
}

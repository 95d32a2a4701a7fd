package rundir

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
)

// The files of a run directory.
const (
	RequestsFile    = "requests.jsonl"    // one record per request, as it finished
	SummaryFile     = "summary.json"      // record.Summary
	ManifestFile    = "manifest.json"     // record.Manifest
	TurnsFile       = "turns.json"        // per-turn drift of multi-turn runs
	VLLMSummaryFile = "summary.vllm.json" // vLLM benchmark_serving's schema
	SweepFile       = "sweep.json"        // a sweep directory's index of points
)

// Writer is a run directory being written. Write is safe for concurrent
// use (it is a bench.Sink); Finish is called once, after the last Write.
type Writer struct {
	dir   string
	jsonl *record.JSONLWriter
}

// Create makes dir (and its parents), writes man as manifest.json with
// secrets redacted from its arguments, and opens requests.jsonl.
func Create(dir string, man record.Manifest) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	man.Args = RedactArgs(man.Args)
	if err := record.WriteJSON(filepath.Join(dir, ManifestFile), man); err != nil {
		return nil, err
	}
	j, err := record.NewJSONLWriter(filepath.Join(dir, RequestsFile))
	if err != nil {
		return nil, err
	}
	return &Writer{dir: dir, jsonl: j}, nil
}

// Dir is the directory written.
func (w *Writer) Dir() string { return w.dir }

// Write appends one finished request to requests.jsonl. After a failed
// write (a full disk) the file ends at its last whole line and Write does
// nothing: see Err and Kept.
func (w *Writer) Write(r *record.Record) error { return w.jsonl.Write(r) }

// Err is the write failure that ended requests.jsonl, if any.
func (w *Writer) Err() error { return w.jsonl.Err() }

// Kept is how many records requests.jsonl holds whole.
func (w *Writer) Kept() int { return w.jsonl.Kept() }

// RequestsPath is requests.jsonl's path.
func (w *Writer) RequestsPath() string { return w.jsonl.Path() }

// Finish closes requests.jsonl and writes the extra files (name → JSON
// value or Raw bytes: turns.json, summary.vllm.json), then summary.json
// and the final manifest (redacted), in that order, so that the summary on
// disk is written after everything it could warn about. A nil sum writes no
// summary. Every file that can be written is; the failures come back
// (none: an empty slice), each naming its file.
func (w *Writer) Finish(man record.Manifest, sum *record.Summary, extra map[string]any) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(w.jsonl.Err())
	add(w.jsonl.Close())
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		if raw, ok := extra[name].(Raw); ok {
			add(record.WriteFile(filepath.Join(w.dir, name), raw))
			continue
		}
		add(record.WriteJSON(filepath.Join(w.dir, name), extra[name]))
	}
	if sum != nil {
		add(record.WriteJSON(filepath.Join(w.dir, SummaryFile), sum))
	}
	man.Args = RedactArgs(man.Args)
	add(record.WriteJSON(filepath.Join(w.dir, ManifestFile), man))
	return errs
}

// Raw is an extra file's content, written as is: a schema whose JSON is not
// Go's (summary.vllm.json spells numbers as Python's json module does).
type Raw []byte

// Close closes requests.jsonl without writing anything else (a run that
// failed before it had a summary).
func (w *Writer) Close() error { return w.jsonl.Close() }

// ErrorText joins failures as one line.
func ErrorText(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// RedactArgs hides secrets from the recorded command line.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	redactNext := false
	for i, a := range args {
		switch {
		case redactNext:
			out[i], redactNext = "REDACTED", false
		case a == "--api-key":
			out[i], redactNext = a, true
		case strings.HasPrefix(a, "--api-key="):
			out[i] = "--api-key=REDACTED"
		case a == "--header" || a == "-H":
			out[i] = a
			if i+1 < len(args) && IsSecretHeader(args[i+1]) {
				redactNext = true
			}
		case strings.HasPrefix(a, "--header=") && IsSecretHeader(strings.TrimPrefix(a, "--header=")):
			out[i] = "--header=REDACTED"
		default:
			out[i] = a
		}
	}
	return out
}

// IsSecretHeader reports whether a "Name: value" header carries a secret
// (credentials, tokens) that no file may keep.
func IsSecretHeader(h string) bool {
	k, _, _ := strings.Cut(strings.ToLower(h), ":")
	k = strings.TrimSpace(k)
	return k == "authorization" || k == "x-api-key" || k == "api-key" || strings.Contains(k, "token") || strings.Contains(k, "secret")
}

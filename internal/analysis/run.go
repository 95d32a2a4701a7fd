package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
)

// Run is a run as the analyses read it: its summary, its manifest and the
// labels that place it (a sweep point's batch and context, a GPU to price).
type Run struct {
	// Dir is the run directory, or the RUN argument of a stored run.
	Dir string
	// Name labels the run in tables: its "name" label, else the directory
	// name or the stored run's name.
	Name     string
	Summary  record.Summary
	Manifest record.Manifest
	// Labels is never nil.
	Labels map[string]string
}

// StoredRun is what a Store returns for a run in the results database.
type StoredRun struct {
	Name    string
	Summary record.Summary
	// Labels are the stored run's labels; nil means the manifest's.
	Labels map[string]string
	// Manifest is the stored manifest.json, empty when there is none.
	Manifest json.RawMessage
}

// Store reads runs from the results database: Run resolves a stored run's
// ID, a unique prefix of one, or "latest". The CLI's implementation opens
// the database on first use, so inputs that are all directories or files
// never touch it.
type Store interface {
	Run(ctx context.Context, ref string) (StoredRun, error)
}

// ReadRunDir reads DIR/summary.json (required) and DIR/manifest.json
// (optional: without it the run has no labels). A path to a summary.json
// file is accepted too.
func ReadRunDir(path string) (*Run, error) {
	dir := path
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reading run %s: %w", path, err)
	} else if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	r := &Run{Dir: dir, Name: filepath.Base(filepath.Clean(dir))}
	if err := record.ReadJSON(filepath.Join(dir, rundir.SummaryFile), &r.Summary); err != nil {
		return nil, err
	}
	mp := filepath.Join(dir, rundir.ManifestFile)
	if _, err := os.Stat(mp); err == nil {
		if err := record.ReadJSON(mp, &r.Manifest); err != nil {
			return nil, err
		}
	}
	r.Labels = r.Manifest.Labels
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	if n := r.Labels["name"]; n != "" {
		r.Name = n
	}
	return r, nil
}

// LooksLikePath reports whether a RUN argument that does not exist was
// meant as a file (so the error should be about the file, and the results
// store is not opened — or created — for a typo).
func LooksLikePath(arg string) bool {
	return strings.ContainsAny(arg, `/\`) || strings.HasSuffix(strings.ToLower(arg), ".csv") || strings.HasSuffix(strings.ToLower(arg), ".json")
}

// ResolveRun reads a run directory (or summary.json) directly, and anything
// else that is not a path as a stored run — an ID, a unique prefix of one,
// or "latest" — through st. Errors from st are returned as they are.
func ResolveRun(ctx context.Context, st Store, arg string) (*Run, error) {
	if _, err := os.Stat(arg); err == nil || LooksLikePath(arg) {
		return ReadRunDir(arg)
	}
	if st == nil {
		return nil, fmt.Errorf("run %s: no such run directory, and no results store to look it up in", arg)
	}
	s, err := st.Run(ctx, arg)
	if err != nil {
		return nil, err
	}
	r := &Run{Dir: arg, Name: s.Name, Summary: s.Summary, Labels: s.Labels}
	if len(s.Manifest) > 0 {
		if err := json.Unmarshal(s.Manifest, &r.Manifest); err != nil {
			return nil, fmt.Errorf("run %s: stored manifest: %w", arg, err)
		}
	}
	if r.Labels == nil {
		r.Labels = r.Manifest.Labels
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	return r, nil
}

// Label returns the first of keys found in the manifest's labels, else in
// its recorded command-line flags (where "prompt_tokens" is spelt
// "prompt-tokens"): a single bench or sim run says its concurrency and
// prompt length only there. It returns where the value came from (the
// label, or "--flag"), the value, and whether there was one.
func (r *Run) Label(keys []string) (from, value string, ok bool) {
	for _, k := range keys {
		if v, ok := r.Labels[k]; ok && v != "" {
			return k, v, true
		}
	}
	for _, k := range keys {
		for _, fk := range []string{k, strings.ReplaceAll(k, "_", "-")} {
			if v, ok := r.Manifest.Flags[fk]; ok && v != "" {
				return "--" + fk, v, true
			}
		}
	}
	return "", "", false
}

// Model is the model the run measured: the manifest's, else the summary's.
func (r *Run) Model() string {
	if r.Manifest.Model != "" {
		return r.Manifest.Model
	}
	return r.Summary.Model
}

// OptionError is an error in one option of a request (a dtype, a column
// name, a statistic); Option names it as the request's documentation does,
// so that a front end can say which of its flags was wrong.
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

func optionErr(option string, err error) error {
	if err == nil {
		return nil
	}
	return &OptionError{Option: option, Err: err}
}

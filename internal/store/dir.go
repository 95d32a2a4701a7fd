package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/rundir"
	"github.com/ttft-dev/ttft/internal/stats"
)

// The files of a run directory (see package rundir).
const (
	RequestsFile = rundir.RequestsFile
	SummaryFile  = rundir.SummaryFile
	ManifestFile = rundir.ManifestFile
)

// IsRunDir reports whether path is a directory holding a run's files.
func IsRunDir(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	for _, f := range []string{RequestsFile, SummaryFile} {
		if _, err := os.Stat(filepath.Join(path, f)); err == nil {
			return true
		}
	}
	return false
}

// LoadDir reads a run directory: requests.jsonl (per-request records),
// summary.json and manifest.json. At least one of the first two must be
// there; a missing summary is computed from the records, a missing manifest
// is left empty. Files that are not ttft's (another schema, another tool's
// JSON) are refused with an error naming the file.
func LoadDir(dir string) (RunInput, error) {
	var in RunInput
	st, err := os.Stat(dir)
	if err != nil {
		return in, fmt.Errorf("reading run directory: %w", err)
	}
	if !st.IsDir() {
		return in, fmt.Errorf("%s is not a directory", dir)
	}
	reqPath := filepath.Join(dir, RequestsFile)
	sumPath := filepath.Join(dir, SummaryFile)
	manPath := filepath.Join(dir, ManifestFile)
	haveReq, haveSum := exists(reqPath), exists(sumPath)
	if !haveReq && !haveSum {
		return in, fmt.Errorf("%s is not a run directory: neither %s nor %s is there", dir, RequestsFile, SummaryFile)
	}
	if haveReq {
		recs, err := record.ReadJSONL(reqPath)
		if err != nil {
			return in, err
		}
		if err := checkRecords(reqPath, recs); err != nil {
			return in, err
		}
		in.Records = recs
	}
	if exists(manPath) {
		raw, err := os.ReadFile(manPath)
		if err != nil {
			return in, fmt.Errorf("reading %s: %w", manPath, err)
		}
		var m struct {
			Schema string `json:"schema"`
			Source string `json:"source"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return in, fmt.Errorf("%s: malformed JSON: %w", manPath, err)
		}
		if err := checkSchema(manPath, m.Schema, "ttft.manifest/v1."); err != nil {
			return in, err
		}
		in.Manifest = json.RawMessage(raw)
		in.Source = m.Source
	}
	if haveSum {
		if err := record.ReadJSON(sumPath, &in.Summary); err != nil {
			return in, err
		}
		if err := checkSchema(sumPath, in.Summary.Schema, "ttft.summary/v1."); err != nil {
			return in, err
		}
	} else {
		var m record.Manifest
		if raw, ok := in.Manifest.(json.RawMessage); ok {
			_ = json.Unmarshal(raw, &m) // already validated above
		}
		in.Summary = stats.Summarize(in.Records, stats.SummaryOptions{
			Source: m.Source, Target: m.Target, API: m.API, Model: m.Model, Scenario: m.Scenario, Seed: 1,
		})
	}
	if in.Source == "" {
		in.Source = in.Summary.Source
	}
	return in, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// checkSchema refuses a file without ttft's schema tag or with a newer
// major version.
func checkSchema(path, got, want string) error {
	if strings.HasPrefix(got, want) {
		return nil
	}
	family := strings.SplitN(want, "/", 2)[0] + "/"
	if strings.HasPrefix(got, family) {
		return fmt.Errorf("%s: schema %q is newer than this ttft understands (%s*); upgrade ttft", path, got, want)
	}
	if got == "" {
		return fmt.Errorf("%s: not a ttft file (no \"schema\" field; want %s*)", path, want)
	}
	return fmt.Errorf("%s: not a ttft file (schema %q; want %s*)", path, got, want)
}

// checkRecords refuses JSON lines that decoded but carry nothing of a
// request record: another tool's JSONL decodes into empty records.
func checkRecords(path string, recs []record.Record) error {
	if len(recs) == 0 {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return fmt.Errorf("%s: no complete record in a non-empty file (not a ttft requests.jsonl?)", path)
		}
		return nil
	}
	for i := range recs {
		r := &recs[i]
		if r.Sent.IsZero() && r.Intended.IsZero() && r.End.IsZero() {
			return fmt.Errorf("%s: record %d has no timestamps (sent, intended, end): not a ttft request record", path, i+1)
		}
	}
	return nil
}

// WriteDir writes a run directory: manifest.json (when non-empty),
// summary.json and requests.jsonl. It refuses to overwrite an existing run's
// files so an export never clobbers measurements.
func WriteDir(dir string, manifest json.RawMessage, sum *record.Summary, recs []record.Record) error {
	for _, f := range []string{RequestsFile, SummaryFile, ManifestFile} {
		p := filepath.Join(dir, f)
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("refusing to overwrite %s", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checking %s: %w", p, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if len(manifest) > 0 && string(manifest) != "{}" && string(manifest) != "null" {
		if err := record.WriteJSON(filepath.Join(dir, ManifestFile), manifest); err != nil {
			return err
		}
	}
	if err := record.WriteJSON(filepath.Join(dir, SummaryFile), sum); err != nil {
		return err
	}
	// Written to a temp name and renamed so a failed export leaves no
	// half-written requests.jsonl that a later import would take as whole.
	tmp := filepath.Join(dir, "."+RequestsFile+".tmp")
	_ = os.Remove(tmp) // the writer appends; start from nothing
	w, err := record.NewJSONLWriter(tmp)
	if err != nil {
		return err
	}
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			w.Close()
			os.Remove(tmp)
			return err
		}
	}
	if err := w.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, RequestsFile)); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Join(dir, RequestsFile), err)
	}
	return nil
}

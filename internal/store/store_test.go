package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var fixedNow = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func TestDefaultDSN(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"env wins", map[string]string{"TTFT_DB": "postgres://x/y", "XDG_DATA_HOME": "/xdg", "HOME": "/h"}, "postgres://x/y"},
		{"xdg", map[string]string{"XDG_DATA_HOME": "/xdg", "HOME": "/h"}, "/xdg/ttft/ttft.db"},
		{"relative xdg ignored", map[string]string{"XDG_DATA_HOME": "rel", "HOME": "/h"}, "/h/.local/share/ttft/ttft.db"},
		{"home", map[string]string{"HOME": "/h"}, "/h/.local/share/ttft/ttft.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultDSN(func(k string) string { return tt.env[k] }); got != filepath.FromSlash(tt.want) {
				t.Fatalf("got %q want %q", got, tt.want)
			}
		})
	}
}

func TestLoadDirErrors(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"empty dir", nil, "is not a run directory"},
		{"foreign summary", map[string]string{SummaryFile: `{"hello": 1}`}, "not a ttft file"},
		{"newer summary", map[string]string{SummaryFile: `{"schema": "ttft.summary/v2.0"}`}, "newer than this ttft"},
		{"malformed summary", map[string]string{SummaryFile: `{"schema": `}, "malformed JSON"},
		{"foreign jsonl", map[string]string{RequestsFile: "{\"a\":1}\n{\"b\":2}\n"}, "not a ttft request record"},
		{"bad line", map[string]string{RequestsFile: "{\"sent\":\"2026-01-01T00:00:00Z\"}\nnope\n{\"sent\":\"2026-01-01T00:00:00Z\"}\n"}, RequestsFile + ":2"},
		{"foreign manifest", map[string]string{RequestsFile: "", ManifestFile: `{"schema": "other/v1"}`}, "not a ttft file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDir(write(t, tt.files))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadDirComputesMissingSummary(t *testing.T) {
	dir := t.TempDir()
	in := fakeRun(40, 9, 100, fixedNow)
	if err := WriteDir(dir, nil, &in.Summary, in.Records); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, SummaryFile))
	got, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary.Requests.Total != 40 || got.Summary.TTFT.Count == 0 || got.Summary.TTFT.P50 < 100 {
		t.Fatalf("summary not computed from records: %+v", got.Summary.Requests)
	}
}

// FuzzLoadDir: arbitrary bytes in the run files never panic, and whatever
// is accepted has the timestamps a request record must have.
func FuzzLoadDir(f *testing.F) {
	f.Add([]byte("{\"sent\":\"2026-01-01T00:00:00Z\",\"ttft_ms\":3}\n"), []byte(`{"schema":"ttft.summary/v1.0"}`))
	f.Add([]byte("{}\n"), []byte(`{}`))
	f.Add([]byte("\n\n"), []byte(`{"schema":"ttft.summary/v1.9","ttft_ms":{"count":"x"}}`))
	f.Fuzz(func(t *testing.T, reqs, sum []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, RequestsFile), reqs, 0o644)
		os.WriteFile(filepath.Join(dir, SummaryFile), sum, 0o644)
		in, err := LoadDir(dir)
		if err != nil {
			return
		}
		for i, r := range in.Records {
			if r.Sent.IsZero() && r.Intended.IsZero() && r.End.IsZero() {
				t.Fatalf("record %d accepted without timestamps", i)
			}
		}
		if !strings.HasPrefix(in.Summary.Schema, "ttft.summary/v1.") {
			t.Fatalf("accepted summary schema %q", in.Summary.Schema)
		}
	})
}

func TestSchemaVersionMatchesMigrations(t *testing.T) {
	if SchemaVersion != len(migrations) {
		t.Fatalf("SchemaVersion %d but %d migrations: bump it with every migration", SchemaVersion, len(migrations))
	}
}

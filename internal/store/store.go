package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// EnvDB names the environment variable that overrides the default database.
const EnvDB = "TTFT_DB"

// ErrNotFound is returned (wrapped) when a run reference matches nothing.
var ErrNotFound = errors.New("no such run")

// RunInput is what a finished run hands to the store.
type RunInput struct {
	// Manifest is anything that marshals to a JSON object (record.Manifest,
	// json.RawMessage, a map) or nil. Its "labels" object, if any, is merged
	// into Labels.
	Manifest any
	Summary  record.Summary
	Records  []record.Record
	// Source overrides Summary.Source ("bench", "sim", "sweep").
	Source string
	// Labels are free key=value tags (sweep point, batch, context...).
	Labels map[string]string
}

// RunMeta is a stored run without its payloads.
type RunMeta struct {
	ID       string            `json:"id"`
	Created  time.Time         `json:"created"` // when it was stored
	Started  time.Time         `json:"started"` // when the run started (retention age)
	Source   string            `json:"source"`
	Target   string            `json:"target,omitempty"`
	Model    string            `json:"model,omitempty"`
	API      string            `json:"api,omitempty"`
	Scenario string            `json:"scenario,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Records is how many per-request rows the run had when saved.
	Records int `json:"records"`
	// RecordsPruned is set once retention removed the per-request rows.
	RecordsPruned bool `json:"records_pruned,omitempty"`
}

// Run is a stored run with its manifest and summary; the per-request records
// come separately from Records because they can be large.
type Run struct {
	RunMeta
	Manifest json.RawMessage `json:"manifest,omitempty"`
	Summary  record.Summary  `json:"summary"`
}

// ListOptions filters List. Zero values mean "no filter".
type ListOptions struct {
	Limit  int
	Source string
	// Labels must all match exactly.
	Labels map[string]string
}

// Policy is a retention policy: per-request rows older than RawAfter are
// deleted (the summary stays); whole runs older than RunsAfter are deleted.
// A zero duration keeps that kind forever. Age is measured from the run's
// start time.
type Policy struct {
	RawAfter  time.Duration
	RunsAfter time.Duration
	DryRun    bool
}

// DefaultPolicy mirrors the article's tiered retention: raw spans 7 days,
// trace metadata 90 days.
var DefaultPolicy = Policy{RawAfter: 7 * 24 * time.Hour, RunsAfter: 90 * 24 * time.Hour}

// PruneResult says what Prune removed (or would remove, in a dry run).
type PruneResult struct {
	RunsDeleted    []string `json:"runs_deleted"`
	RecordsDropped []string `json:"records_dropped"` // runs whose raw rows went
	Rows           int64    `json:"rows"`            // per-request rows removed
}

// Store is the results store.
type Store interface {
	// Save stores a run in one transaction and returns its short ID.
	Save(ctx context.Context, run RunInput) (string, error)
	// List returns runs, newest first.
	List(ctx context.Context, opt ListOptions) ([]RunMeta, error)
	// Get returns a run's metadata, manifest and summary.
	Get(ctx context.Context, id string) (*Run, error)
	// Records returns a run's per-request records in their original order
	// (empty once pruned).
	Records(ctx context.Context, id string) ([]record.Record, error)
	// Delete removes a run and its records.
	Delete(ctx context.Context, id string) error
	// Prune applies a retention policy relative to now.
	Prune(ctx context.Context, p Policy, now time.Time) (PruneResult, error)
	// Import stores the run directory dir (see LoadDir).
	Import(ctx context.Context, dir string) (string, error)
	// Export writes a run as a run directory (see WriteDir).
	Export(ctx context.Context, id, dir string) error
	// Resolve turns an ID, a unique ID prefix or "latest" into an ID.
	Resolve(ctx context.Context, ref string) (string, error)
	// Describe names the backend and location, for messages.
	Describe() string
	Close() error
}

// DefaultDSN is the database to use when --db is not given: $TTFT_DB, else
// $XDG_DATA_HOME/ttft/ttft.db, else ~/.local/share/ttft/ttft.db.
func DefaultDSN(getenv func(string) string) string {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if v := getenv(EnvDB); v != "" {
		return v
	}
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "ttft", "ttft.db")
	}
	home := getenv("HOME")
	if home == "" {
		home = "."
	}
	return filepath.Join(home, ".local", "share", "ttft", "ttft.db")
}

// IsPostgres reports whether dsn selects the PostgreSQL backend.
func IsPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open opens (creating and migrating if needed) the store named by dsn: a
// postgres:// URL or a SQLite file path ("sqlite:" prefix optional).
func Open(ctx context.Context, dsn string) (Store, error) {
	if dsn == "" {
		return nil, fmt.Errorf("opening store: empty database name")
	}
	if IsPostgres(dsn) {
		return openPostgres(ctx, dsn)
	}
	return openSQLite(ctx, strings.TrimPrefix(dsn, "sqlite:"))
}

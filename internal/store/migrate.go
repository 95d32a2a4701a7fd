package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// migrations[i] upgrades the schema from version i to i+1. Append only:
// a released migration is never edited, so every database walks the same
// path. Types are chosen to mean the same in SQLite and PostgreSQL.
var migrations = [][]string{
	{ // 0 -> 1
		`CREATE TABLE ttft_runs (
			id TEXT PRIMARY KEY,
			created_ns BIGINT NOT NULL,
			started_ns BIGINT NOT NULL,
			source TEXT NOT NULL,
			target TEXT NOT NULL,
			model TEXT NOT NULL,
			api TEXT NOT NULL,
			scenario TEXT NOT NULL,
			labels TEXT NOT NULL,
			manifest TEXT NOT NULL,
			summary TEXT NOT NULL,
			n_records INTEGER NOT NULL,
			records_pruned INTEGER NOT NULL DEFAULT 0
		)`,
		`CREATE INDEX ttft_runs_started ON ttft_runs (started_ns)`,
		`CREATE INDEX ttft_runs_created ON ttft_runs (created_ns)`,
		`CREATE TABLE ttft_requests (
			run_id TEXT NOT NULL REFERENCES ttft_runs (id),
			idx INTEGER NOT NULL,
			ttft_ms DOUBLE PRECISION NOT NULL,
			error_class TEXT NOT NULL,
			data TEXT NOT NULL,
			PRIMARY KEY (run_id, idx)
		)`,
	},
	{ // 1 -> 2: sharded runs (shard.go). A run spread over several load
		// generators is one row of ttft_runs; ttft_shard_runs is its start
		// barrier, ttft_shards each shard's health, summary and sketches,
		// and each request row says which shard sent it.
		`CREATE TABLE ttft_shard_runs (
			run_id TEXT PRIMARY KEY,
			shard_count INTEGER NOT NULL,
			start_ns BIGINT NOT NULL,
			created_ns BIGINT NOT NULL
		)`,
		`CREATE TABLE ttft_shards (
			run_id TEXT NOT NULL,
			shard INTEGER NOT NULL,
			registered_ns BIGINT NOT NULL,
			finished_ns BIGINT NOT NULL,
			n_records INTEGER NOT NULL,
			health TEXT NOT NULL,
			summary TEXT NOT NULL,
			sketches TEXT NOT NULL,
			PRIMARY KEY (run_id, shard)
		)`,
		`ALTER TABLE ttft_requests ADD COLUMN shard INTEGER NOT NULL DEFAULT 0`,
	},
}

// SchemaVersion is the schema this build writes: len(migrations), which a
// test checks.
const SchemaVersion = 2

// ErrNewerSchema is returned (wrapped) for a database written by a newer ttft.
var ErrNewerSchema = errors.New("database schema is newer than this ttft")

// ErrForeign is returned (wrapped) for a database that is not a ttft store.
var ErrForeign = errors.New("not a ttft database")

// init checks what the database is and migrates it to SchemaVersion in one
// transaction: a failure leaves it exactly as it was.
func (s *sqlStore) init(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if s.d.lockSQL != "" {
			if _, err := tx.ExecContext(ctx, s.d.lockSQL); err != nil {
				return fmt.Errorf("locking for migration: %w", err)
			}
		}
		tables, err := s.tables(ctx, tx)
		if err != nil {
			return err
		}
		version := 0
		if tables["ttft_schema"] {
			if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM ttft_schema`).Scan(&version); err != nil {
				return fmt.Errorf("reading schema version: %w", err)
			}
		} else if s.d.name == "sqlite" {
			// A SQLite file belongs to one application: refuse one that
			// already holds someone else's tables rather than mixing ours in.
			var other []string
			for t := range tables {
				if !strings.HasPrefix(t, "sqlite_") {
					other = append(other, t)
				}
			}
			if len(other) > 0 {
				sort.Strings(other)
				if len(other) > 5 {
					other = append(other[:5], "...")
				}
				return fmt.Errorf("%w: it has other tables (%s) and no ttft_schema", ErrForeign, strings.Join(other, ", "))
			}
		}
		if version > SchemaVersion {
			return fmt.Errorf("%w: schema version %d, this ttft knows up to %d; upgrade ttft or use another --db", ErrNewerSchema, version, SchemaVersion)
		}
		if version == SchemaVersion {
			return nil
		}
		if !tables["ttft_schema"] {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE ttft_schema (version INTEGER NOT NULL, applied_ns BIGINT NOT NULL)`); err != nil {
				return fmt.Errorf("creating schema table: %w", err)
			}
		}
		for v := version; v < SchemaVersion; v++ {
			for _, stmt := range migrations[v] {
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("migrating schema %d -> %d: %w", v, v+1, err)
				}
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO ttft_schema (version, applied_ns) VALUES (?, ?)`), v+1, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("recording schema version %d: %w", v+1, err)
			}
		}
		return nil
	})
}

// tables lists the tables visible to the store.
func (s *sqlStore) tables(ctx context.Context, tx *sql.Tx) (map[string]bool, error) {
	query := `SELECT name FROM sqlite_master WHERE type = 'table'`
	if s.d.name == "postgres" {
		query = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`
	}
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		if s.d.name == "sqlite" {
			// "file is not a database" surfaces here for a corrupt or foreign file.
			return nil, fmt.Errorf("%w (or the file is damaged): %w", ErrForeign, err)
		}
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("listing tables: %w", err)
		}
		out[name] = true
	}
	return out, rows.Err()
}

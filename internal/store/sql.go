package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/ttft-dev/ttft/internal/record"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// dialect holds what differs between SQLite and PostgreSQL; the SQL itself
// is written once with ? placeholders.
type dialect struct {
	name      string
	dollar    bool   // rewrite ? to $n
	lockSQL   string // serialises migrations across processes ("" for none)
	chunkRows int    // rows per multi-row INSERT
}

var (
	sqliteDialect = dialect{name: "sqlite", chunkRows: 400}
	// PostgreSQL allows 65535 parameters per statement; 5 per row.
	postgresDialect = dialect{name: "postgres", dollar: true, lockSQL: "SELECT pg_advisory_xact_lock(7475470)", chunkRows: 2000}
)

type sqlStore struct {
	db   *sql.DB
	d    dialect
	desc string
}

// sqliteBusyTimeout is how long a writer waits for a lock another process
// holds, unless the database name says otherwise (busy_timeout=MS).
const sqliteBusyTimeout = 60 * time.Second

// splitSQLiteName reads "PATH[?busy_timeout=MS]": the one option a user
// may set on a SQLite results database, how long to wait for a lock held
// by another process before giving up with an error.
func splitSQLiteName(name string) (path string, busy time.Duration, err error) {
	path, query, hasQuery := strings.Cut(name, "?")
	busy = sqliteBusyTimeout
	if path == "" || strings.Contains(name, "#") {
		return "", 0, fmt.Errorf("opening store: invalid SQLite path %q", name)
	}
	if !hasQuery {
		return path, busy, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", 0, fmt.Errorf("opening store %q: reading its options: %w", name, err)
	}
	for k, vs := range q {
		ms, err := strconv.Atoi(vs[len(vs)-1])
		if k != "busy_timeout" || err != nil || ms < 0 {
			return "", 0, fmt.Errorf("opening store %q: the one SQLite option is busy_timeout=MILLISECONDS, got %s=%s", name, k, vs[len(vs)-1])
		}
		busy = time.Duration(ms) * time.Millisecond
	}
	return path, busy, nil
}

func openSQLite(ctx context.Context, name string) (Store, error) {
	path, busy, err := splitSQLiteName(name)
	if err != nil {
		return nil, err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("opening store %s: %w", path, err)
		}
	}
	// busy_timeout lets concurrent ttft processes wait for each other (a
	// 100k-record save can hold the write lock for seconds on a busy box);
	// _txlock=immediate takes the write lock at BEGIN so two writers never
	// deadlock on a lock upgrade; WAL lets readers run beside a writer.
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	s := &sqlStore{db: db, d: sqliteDialect, desc: "sqlite " + path}
	if err := s.init(ctx); err != nil {
		db.Close()
		if isNotADB(err) && !errors.Is(err, ErrForeign) {
			err = fmt.Errorf("%w (or the file is damaged): %w", ErrForeign, err)
		}
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return s, nil
}

func openPostgres(ctx context.Context, dsn string) (Store, error) {
	shown := redact(dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", shown, err)
	}
	db.SetMaxOpenConns(4)
	s := &sqlStore{db: db, d: postgresDialect, desc: "postgres " + shown}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: connecting: %w", shown, err)
	}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", shown, err)
	}
	return s, nil
}

// isNotADB recognises SQLite's SQLITE_NOTADB (26): the file is not a
// database at all, or its header is damaged.
func isNotADB(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) && coded.Code()&0xff == 26 {
		return true
	}
	return strings.Contains(err.Error(), "file is not a database")
}

// redact hides a password in a postgres URL for messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparseable URL)"
	}
	return u.Redacted()
}

func (s *sqlStore) Describe() string { return s.desc }
func (s *sqlStore) Close() error     { return s.db.Close() }

// q rewrites ? placeholders for the dialect.
func (s *sqlStore) q(query string) string {
	if !s.d.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// inTx runs fn in a transaction, committing only if fn succeeds.
func (s *sqlStore) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// idAlphabet is Crockford's base32 in lower case: no i, l, o, u, so IDs
// survive being read aloud or retyped.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// idChars are the characters of a run ID: the alphabet of generated IDs,
// the hex digits and dashes of the IDs ttft bench gives its runs
// (20261202-014245-83d1c8), and any lower-case letter, for the IDs users
// give sharded runs (--run-id, which also names a Kubernetes Job). None is
// a LIKE metacharacter.
const idChars = "0123456789abcdefghijklmnopqrstuvwxyz-"

// newID returns 8 random characters (40 bits).
func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating run id: %w", err)
	}
	for i := range b {
		b[i] = idAlphabet[b[i]&31]
	}
	return string(b[:]), nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (s *sqlStore) Save(ctx context.Context, in RunInput) (string, error) {
	var id string
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		id, err = s.saveTx(ctx, tx, in)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("saving run: %w", err)
	}
	return id, nil
}

func (s *sqlStore) saveTx(ctx context.Context, tx *sql.Tx, in RunInput) (string, error) {
	manifest, labels, runID, err := manifestJSON(in.Manifest)
	if err != nil {
		return "", err
	}
	for k, v := range in.Labels {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	labelsJSON, err := json.Marshal(labels)
	if err != nil {
		return "", fmt.Errorf("encoding labels: %w", err)
	}
	sum := in.Summary
	summaryJSON, err := json.Marshal(&sum)
	if err != nil {
		return "", fmt.Errorf("encoding summary: %w", err)
	}
	source := in.Source
	if source == "" {
		source = sum.Source
	}
	now := time.Now()
	started := sum.Started
	if started.IsZero() {
		started = now
	}
	// The run keeps the ID its directory and manifest already carry (one
	// ID for a run, wherever it is); a new one only when it has none, it is
	// not of ID letters, or it is taken (the same directory imported twice).
	id := strings.ToLower(runID)
	if strings.Trim(id, idChars) != "" || len(id) > 64 {
		id = ""
	}
	for tries := 0; ; tries++ {
		if id == "" {
			if id, err = newID(); err != nil {
				return "", err
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM ttft_runs WHERE id = ?`), id).Scan(&n); err != nil {
			return "", fmt.Errorf("checking run id: %w", err)
		}
		if n == 0 {
			break
		}
		if tries > 10 {
			return "", fmt.Errorf("could not find a free run id")
		}
		id = ""
	}
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO ttft_runs
		(id, created_ns, started_ns, source, target, model, api, scenario, labels, manifest, summary, n_records, records_pruned)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`),
		id, now.UnixNano(), started.UnixNano(), source, sum.Target, sum.Model, sum.API, sum.Scenario,
		string(labelsJSON), string(manifest), string(summaryJSON), len(in.Records))
	if err != nil {
		return "", fmt.Errorf("inserting run: %w", err)
	}
	if err := s.insertRecords(ctx, tx, id, in.Records); err != nil {
		return "", err
	}
	return id, nil
}

// insertRecords writes records with multi-row INSERTs: one statement per
// chunk instead of one round trip per row (100k rows in seconds, not minutes).
func (s *sqlStore) insertRecords(ctx context.Context, tx *sql.Tx, id string, recs []record.Record) error {
	const cols = 5
	var stmt *sql.Stmt
	stmtRows := 0
	defer func() {
		if stmt != nil {
			stmt.Close()
		}
	}()
	args := make([]any, 0, s.d.chunkRows*cols)
	for start := 0; start < len(recs); start += s.d.chunkRows {
		end := min(start+s.d.chunkRows, len(recs))
		rows := end - start
		if stmt == nil || stmtRows != rows {
			if stmt != nil {
				stmt.Close()
			}
			var b strings.Builder
			b.WriteString(`INSERT INTO ttft_requests (run_id, idx, ttft_ms, error_class, data) VALUES `)
			for i := 0; i < rows; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString("(?,?,?,?,?)")
			}
			var err error
			stmt, err = tx.PrepareContext(ctx, s.q(b.String()))
			if err != nil {
				return fmt.Errorf("preparing record insert: %w", err)
			}
			stmtRows = rows
		}
		args = args[:0]
		for i := start; i < end; i++ {
			data, err := json.Marshal(&recs[i])
			if err != nil {
				return fmt.Errorf("encoding record %d: %w", i, err)
			}
			args = append(args, id, i, recs[i].TTFTMs, recs[i].ErrorClass, string(data))
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("inserting records %d..%d: %w", start, end-1, err)
		}
	}
	return nil
}

// manifestJSON marshals a manifest and pulls out its "labels" object.
func manifestJSON(m any) (json.RawMessage, map[string]string, string, error) {
	if m == nil {
		return json.RawMessage("{}"), nil, "", nil
	}
	var raw json.RawMessage
	switch v := m.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(m)
		if err != nil {
			return nil, nil, "", fmt.Errorf("encoding manifest: %w", err)
		}
		raw = b
	}
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil, "", nil
	}
	var probe struct {
		RunID  string         `json:"run_id"`
		Labels map[string]any `json:"labels"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, nil, "", fmt.Errorf("manifest is not a JSON object: %w", err)
	}
	var labels map[string]string
	for k, v := range probe.Labels {
		if labels == nil {
			labels = map[string]string{}
		}
		switch x := v.(type) {
		case string:
			labels[k] = x
		default:
			b, _ := json.Marshal(x)
			labels[k] = string(b)
		}
	}
	return raw, labels, probe.RunID, nil
}

const runCols = `id, created_ns, started_ns, source, target, model, api, scenario, labels, n_records, records_pruned`

type scanner interface{ Scan(dest ...any) error }

func scanMeta(sc scanner, extra ...any) (RunMeta, error) {
	var m RunMeta
	var created, started int64
	var labels string
	var pruned int
	dest := append([]any{&m.ID, &created, &started, &m.Source, &m.Target, &m.Model, &m.API, &m.Scenario, &labels, &m.Records, &pruned}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return m, err
	}
	m.Created, m.Started = fromNanos(created), fromNanos(started)
	m.RecordsPruned = pruned != 0
	if labels != "" && labels != "null" {
		if err := json.Unmarshal([]byte(labels), &m.Labels); err != nil {
			return m, fmt.Errorf("run %s: decoding labels: %w", m.ID, err)
		}
	}
	return m, nil
}

func (s *sqlStore) List(ctx context.Context, opt ListOptions) ([]RunMeta, error) {
	query := `SELECT ` + runCols + ` FROM ttft_runs`
	var args []any
	if opt.Source != "" {
		query += ` WHERE source = ?`
		args = append(args, opt.Source)
	}
	query += ` ORDER BY created_ns DESC, id`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	defer rows.Close()
	var out []RunMeta
	for rows.Next() {
		m, err := scanMeta(rows)
		if err != nil {
			return nil, fmt.Errorf("listing runs: %w", err)
		}
		if !labelsMatch(m.Labels, opt.Labels) {
			continue
		}
		out = append(out, m)
		if opt.Limit > 0 && len(out) >= opt.Limit {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	return out, nil
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (s *sqlStore) Get(ctx context.Context, id string) (*Run, error) {
	var manifest, summary string
	row := s.db.QueryRowContext(ctx, s.q(`SELECT `+runCols+`, manifest, summary FROM ttft_runs WHERE id = ?`), id)
	m, err := scanMeta(row, &manifest, &summary)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading run %s: %w", id, err)
	}
	r := &Run{RunMeta: m, Manifest: json.RawMessage(manifest)}
	if err := json.Unmarshal([]byte(summary), &r.Summary); err != nil {
		return nil, fmt.Errorf("run %s: decoding stored summary: %w", id, err)
	}
	return r, nil
}

func (s *sqlStore) Records(ctx context.Context, id string) ([]record.Record, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT idx, data FROM ttft_requests WHERE run_id = ? ORDER BY idx`), id)
	if err != nil {
		return nil, fmt.Errorf("reading records of run %s: %w", id, err)
	}
	defer rows.Close()
	var out []record.Record
	var data []byte
	for rows.Next() {
		var idx int
		if err := rows.Scan(&idx, &data); err != nil {
			return nil, fmt.Errorf("reading records of run %s: %w", id, err)
		}
		out = append(out, record.Record{})
		if err := json.Unmarshal(data, &out[len(out)-1]); err != nil {
			return nil, fmt.Errorf("run %s record %d: decoding: %w", id, idx, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading records of run %s: %w", id, err)
	}
	return out, nil
}

func (s *sqlStore) Delete(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM ttft_requests WHERE run_id = ?`), id); err != nil {
			return fmt.Errorf("deleting records of run %s: %w", id, err)
		}
		if err := s.deleteShards(ctx, tx, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM ttft_runs WHERE id = ?`), id)
		if err != nil {
			return fmt.Errorf("deleting run %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("deleting run %q: %w", id, ErrNotFound)
		}
		return nil
	})
}

func (s *sqlStore) Prune(ctx context.Context, p Policy, now time.Time) (PruneResult, error) {
	var res PruneResult
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		ids := func(query string, args ...any) ([]string, error) {
			rows, err := tx.QueryContext(ctx, s.q(query), args...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return nil, err
				}
				out = append(out, id)
			}
			return out, rows.Err()
		}
		var err error
		if p.RunsAfter > 0 {
			cut := now.Add(-p.RunsAfter).UnixNano()
			if res.RunsDeleted, err = ids(`SELECT id FROM ttft_runs WHERE started_ns < ? ORDER BY id`, cut); err != nil {
				return fmt.Errorf("finding expired runs: %w", err)
			}
		}
		if p.RawAfter > 0 {
			cut := now.Add(-p.RawAfter).UnixNano()
			if res.RecordsDropped, err = ids(`SELECT id FROM ttft_runs WHERE started_ns < ? AND records_pruned = 0 AND n_records > 0 ORDER BY id`, cut); err != nil {
				return fmt.Errorf("finding expired records: %w", err)
			}
		}
		gone := map[string]bool{}
		for _, id := range res.RunsDeleted {
			gone[id] = true
		}
		kept := res.RecordsDropped[:0]
		for _, id := range res.RecordsDropped {
			if !gone[id] {
				kept = append(kept, id)
			}
		}
		res.RecordsDropped = kept
		for _, id := range append(append([]string(nil), res.RunsDeleted...), res.RecordsDropped...) {
			var n int64
			if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM ttft_requests WHERE run_id = ?`), id).Scan(&n); err != nil {
				return fmt.Errorf("counting records of run %s: %w", id, err)
			}
			res.Rows += n
			if p.DryRun {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM ttft_requests WHERE run_id = ?`), id); err != nil {
				return fmt.Errorf("pruning records of run %s: %w", id, err)
			}
			if gone[id] {
				if err := s.deleteShards(ctx, tx, id); err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, s.q(`DELETE FROM ttft_runs WHERE id = ?`), id)
			} else {
				_, err = tx.ExecContext(ctx, s.q(`UPDATE ttft_runs SET records_pruned = 1 WHERE id = ?`), id)
			}
			if err != nil {
				return fmt.Errorf("pruning run %s: %w", id, err)
			}
		}
		return nil
	})
	if err != nil {
		return PruneResult{}, fmt.Errorf("pruning: %w", err)
	}
	return res, nil
}

func (s *sqlStore) Import(ctx context.Context, dir string) (string, error) {
	in, err := LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("importing %s: %w", dir, err)
	}
	id, err := s.Save(ctx, in)
	if err != nil {
		return "", fmt.Errorf("importing %s: %w", dir, err)
	}
	return id, nil
}

func (s *sqlStore) Export(ctx context.Context, id, dir string) error {
	r, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	recs, err := s.Records(ctx, id)
	if err != nil {
		return err
	}
	if err := WriteDir(dir, r.Manifest, &r.Summary, recs); err != nil {
		return fmt.Errorf("exporting run %s: %w", id, err)
	}
	return nil
}

// Resolve accepts an exact ID, a unique prefix of one, or "latest".
func (s *sqlStore) Resolve(ctx context.Context, ref string) (string, error) {
	ref = strings.ToLower(strings.TrimSpace(ref))
	if ref == "latest" {
		var id string
		err := s.db.QueryRowContext(ctx, `SELECT id FROM ttft_runs ORDER BY created_ns DESC, id LIMIT 1`).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("latest: the store (%s) has no runs: %w", s.desc, ErrNotFound)
		}
		if err != nil {
			return "", fmt.Errorf("finding the latest run: %w", err)
		}
		return id, nil
	}
	if ref == "" || strings.Trim(ref, idChars) != "" {
		return "", fmt.Errorf("run %q: not a run ID (letters of %q), \"latest\" or a run directory: %w", ref, idChars, ErrNotFound)
	}
	// The alphabet has no LIKE metacharacters, so the prefix needs no escaping.
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id FROM ttft_runs WHERE id LIKE ? ORDER BY id LIMIT 6`), ref+"%")
	if err != nil {
		return "", fmt.Errorf("resolving run %q: %w", ref, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return "", fmt.Errorf("resolving run %q: %w", ref, err)
		}
		if id == ref {
			return id, nil
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("resolving run %q: %w", ref, err)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("run %q: %w in %s", ref, ErrNotFound, s.desc)
	case 1:
		return ids[0], nil
	default:
		sort.Strings(ids)
		more := ""
		if len(ids) > 5 {
			ids, more = ids[:5], ", ..."
		}
		return "", fmt.Errorf("run prefix %q is ambiguous: matches %s%s", ref, strings.Join(ids, ", "), more)
	}
}

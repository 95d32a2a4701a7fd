package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// A sharded run is one run made by several load generators (ttft bench
// --shard K/N, an Indexed Job's pods). They meet in the store, which is the
// one thing they all reach:
//
//  1. Join: each shard registers; the one that completes the count fixes
//     the start, on the database's clock, a margin ahead, and every shard
//     waits for it and turns it into its own clock with the offset it
//     measured against the database (NTP's estimate over the round trip).
//  2. SaveShard: each writes its raw records (global request indices, so
//     the shards' rows never collide) and per-metric DDSketches under the
//     one run ID, with its health: clock offset, start lateness, client
//     read delay, errors. A restarted shard replaces its own rows.
//  3. The shard that saves last hears AllIn and writes the merged summary
//     (FinishShardedRun), computed from the union of the raw records like
//     any run's; until then `ttft runs` shows the run with the shards that
//     are missing.

// ShardJoin is one shard's registration.
type ShardJoin struct {
	RunID        string
	Index, Count int
	// Margin is how far after the last registration the run starts: long
	// enough for every shard to see the start before it is due (they poll
	// every PollEvery).
	Margin time.Duration
	// Timeout bounds the wait for the other shards.
	Timeout time.Duration
	// PollEvery is the polling interval (default 50 ms).
	PollEvery time.Duration
	// Manifest and Labels describe the run; the first shard to join
	// creates the run's row with them.
	Manifest any
	Labels   map[string]string
	Source   string
}

// ShardStart is when the run starts, for one shard.
type ShardStart struct {
	// Start is the common start on this machine's clock (database start
	// minus ClockOffset).
	Start time.Time
	// DBStart is the same instant on the database's clock.
	DBStart time.Time
	// ClockOffset is the database clock minus this machine's, measured
	// over the round trip with the smallest delay (RTT).
	ClockOffset time.Duration
	RTT         time.Duration
}

// ShardHealth is what one shard says about itself, shown by `ttft runs`.
type ShardHealth struct {
	Host        string        `json:"host,omitempty"`
	ClockOffset time.Duration `json:"clock_offset_ns"`
	RTT         time.Duration `json:"rtt_ns"`
	// StartLate is how long after the common start this shard woke.
	StartLate time.Duration `json:"start_late_ns"`
	// ReadDelayP99Ms is the P99 client read delay of first tokens (a
	// shard short of CPU reads late).
	ReadDelayP99Ms float64        `json:"read_delay_p99_ms"`
	Requests       int            `json:"requests"`
	Failed         int            `json:"failed"`
	Errors         map[string]int `json:"errors,omitempty"`
	Warnings       []string       `json:"warnings,omitempty"`
}

// ShardInput is one shard's part of the run.
type ShardInput struct {
	RunID   string
	Index   int
	Summary record.Summary // of this shard's records alone
	Records []record.Record
	Health  ShardHealth
}

// ShardInfo is a stored shard.
type ShardInfo struct {
	Index      int             `json:"index"`
	Registered time.Time       `json:"registered"` // database clock
	Finished   time.Time       `json:"finished"`   // zero while running
	Records    int             `json:"records"`
	Health     ShardHealth     `json:"health"`
	Summary    *record.Summary `json:"summary,omitempty"`
	// Sketches are the shard's per-metric DDSketches (see Sketches).
	Sketches map[string][]byte `json:"-"`
}

// ShardRun is a sharded run's barrier and shards.
type ShardRun struct {
	RunID   string      `json:"run_id"`
	Count   int         `json:"count"`
	Start   time.Time   `json:"start"` // database clock; zero until all joined
	Shards  []ShardInfo `json:"shards"`
	Missing []int       `json:"missing,omitempty"` // shards not finished
}

// ShardStore is implemented by the SQL stores.
type ShardStore interface {
	Join(ctx context.Context, j ShardJoin) (ShardStart, error)
	// SaveShard stores a shard's records and health in one transaction;
	// allIn is true for the call that completes the run.
	SaveShard(ctx context.Context, in ShardInput) (allIn bool, err error)
	// FinishShardedRun writes the merged summary of a complete run.
	FinishShardedRun(ctx context.Context, runID string, sum record.Summary) error
	// ShardRun returns the run's shards (ErrNotFound when it has none).
	ShardRun(ctx context.Context, runID string) (*ShardRun, error)
}

// dbNow reads the database's clock and this machine's around it; the
// reading is taken as made halfway through the round trip.
func (s *sqlStore) dbNow(ctx context.Context) (db time.Time, local time.Time, rtt time.Duration, err error) {
	t0 := time.Now()
	if s.d.name != "postgres" {
		// SQLite is a file on this machine: its clock is ours.
		return t0, t0, 0, nil
	}
	var us int64
	if err := s.db.QueryRowContext(ctx, `SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)`).Scan(&us); err != nil {
		return time.Time{}, time.Time{}, 0, fmt.Errorf("reading the database clock: %w", err)
	}
	t1 := time.Now()
	rtt = t1.Sub(t0)
	return time.UnixMicro(us), t0.Add(rtt / 2), rtt, nil
}

// clockOffset is the database clock minus ours, from the best of a few
// round trips (the one least delayed both ways is the least skewed).
func (s *sqlStore) clockOffset(ctx context.Context) (time.Duration, time.Duration, error) {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range 5 {
		db, local, rtt, err := s.dbNow(ctx)
		if err != nil {
			return 0, 0, err
		}
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = db.Sub(local), rtt
		}
	}
	return best, bestRTT, nil
}

func (s *sqlStore) forUpdate() string {
	if s.d.name == "postgres" {
		return " FOR UPDATE"
	}
	return "" // a SQLite write transaction holds the whole file
}

func validShardID(id string) error {
	if id == "" || strings.Trim(id, idChars) != "" || len(id) > 64 {
		return fmt.Errorf("sharded run ID %q: want 1-64 of %q", id, idChars)
	}
	return nil
}

// Join registers the shard and waits until every shard has, then returns
// the common start.
func (s *sqlStore) Join(ctx context.Context, j ShardJoin) (ShardStart, error) {
	var out ShardStart
	id := strings.ToLower(j.RunID)
	if err := validShardID(id); err != nil {
		return out, err
	}
	if j.Count < 1 || j.Index < 0 || j.Index >= j.Count {
		return out, fmt.Errorf("shard %d of %d: want 0 <= index < count", j.Index, j.Count)
	}
	if j.PollEvery <= 0 {
		j.PollEvery = 50 * time.Millisecond
	}
	if j.Margin <= 0 {
		j.Margin = 2 * time.Second
	}
	off, rtt, err := s.clockOffset(ctx)
	if err != nil {
		return out, fmt.Errorf("joining run %s: %w", id, err)
	}
	out.ClockOffset, out.RTT = off, rtt
	manifest, labels, _, err := manifestJSON(j.Manifest)
	if err != nil {
		return out, err
	}
	for k, v := range j.Labels {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	labelsJSON, err := json.Marshal(labels)
	if err != nil {
		return out, fmt.Errorf("encoding labels: %w", err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		dbNow := time.Now().Add(off).UnixNano()
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO ttft_shard_runs (run_id, shard_count, start_ns, created_ns) VALUES (?, ?, 0, ?) ON CONFLICT (run_id) DO NOTHING`), id, j.Count, dbNow); err != nil {
			return fmt.Errorf("registering run: %w", err)
		}
		// The lock on the run's barrier row serialises the shards'
		// registrations, so exactly one of them sees the count complete.
		var count int
		var startNs int64
		if err := tx.QueryRowContext(ctx, s.q(`SELECT shard_count, start_ns FROM ttft_shard_runs WHERE run_id = ?`+s.forUpdate()), id).Scan(&count, &startNs); err != nil {
			return fmt.Errorf("reading the run's barrier: %w", err)
		}
		if count != j.Count {
			return fmt.Errorf("run %s has %d shards, this one says %d", id, count, j.Count)
		}
		sum := record.Summary{Source: j.Source}
		summaryJSON, _ := json.Marshal(&sum)
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO ttft_runs
			(id, created_ns, started_ns, source, target, model, api, scenario, labels, manifest, summary, n_records, records_pruned)
			VALUES (?, ?, ?, ?, '', '', '', '', ?, ?, ?, 0, 0) ON CONFLICT (id) DO NOTHING`),
			id, time.Now().UnixNano(), time.Now().UnixNano(), j.Source, string(labelsJSON), string(manifest), string(summaryJSON)); err != nil {
			return fmt.Errorf("creating the run: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO ttft_shards (run_id, shard, registered_ns, finished_ns, n_records, health, summary, sketches)
			VALUES (?, ?, ?, 0, 0, '{}', '', '{}') ON CONFLICT (run_id, shard) DO UPDATE SET registered_ns = excluded.registered_ns`), id, j.Index, dbNow); err != nil {
			return fmt.Errorf("registering shard %d: %w", j.Index, err)
		}
		var joined int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM ttft_shards WHERE run_id = ?`), id).Scan(&joined); err != nil {
			return fmt.Errorf("counting shards: %w", err)
		}
		if joined == count && startNs == 0 {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE ttft_shard_runs SET start_ns = ? WHERE run_id = ?`), dbNow+j.Margin.Nanoseconds(), id); err != nil {
				return fmt.Errorf("fixing the start: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("joining run %s as shard %d of %d: %w", id, j.Index, j.Count, err)
	}
	var deadline <-chan time.Time
	if j.Timeout > 0 {
		tm := time.NewTimer(j.Timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	tick := time.NewTicker(j.PollEvery)
	defer tick.Stop()
	for {
		var startNs int64
		if err := s.db.QueryRowContext(ctx, s.q(`SELECT start_ns FROM ttft_shard_runs WHERE run_id = ?`), id).Scan(&startNs); err != nil {
			return out, fmt.Errorf("waiting for the shards of run %s: %w", id, err)
		}
		if startNs != 0 {
			out.DBStart = time.Unix(0, startNs)
			out.Start = out.DBStart.Add(-off)
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-deadline:
			var joined int
			_ = s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM ttft_shards WHERE run_id = ?`), id).Scan(&joined)
			return out, fmt.Errorf("run %s: only %d of %d shards joined within %v", id, joined, j.Count, j.Timeout)
		case <-tick.C:
		}
	}
}

// SaveShard stores one shard's records, sketches and health.
func (s *sqlStore) SaveShard(ctx context.Context, in ShardInput) (bool, error) {
	id := strings.ToLower(in.RunID)
	if err := validShardID(id); err != nil {
		return false, err
	}
	sketches, err := Sketches(in.Records)
	if err != nil {
		return false, err
	}
	sketchJSON, err := json.Marshal(sketches)
	if err != nil {
		return false, fmt.Errorf("encoding sketches: %w", err)
	}
	healthJSON, err := json.Marshal(in.Health)
	if err != nil {
		return false, fmt.Errorf("encoding health: %w", err)
	}
	sum := in.Summary
	summaryJSON, err := json.Marshal(&sum)
	if err != nil {
		return false, fmt.Errorf("encoding summary: %w", err)
	}
	allIn := false
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var count int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT shard_count FROM ttft_shard_runs WHERE run_id = ?`+s.forUpdate()), id).Scan(&count); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("run %s has no shard barrier (the shard never joined): %w", id, ErrNotFound)
			}
			return fmt.Errorf("reading the run's barrier: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM ttft_requests WHERE run_id = ? AND shard = ?`), id, in.Index); err != nil {
			return fmt.Errorf("replacing shard %d's records: %w", in.Index, err)
		}
		if err := s.insertShardRecords(ctx, tx, id, in.Index, in.Records); err != nil {
			return err
		}
		now := time.Now().UnixNano()
		res, err := tx.ExecContext(ctx, s.q(`UPDATE ttft_shards SET finished_ns = ?, n_records = ?, health = ?, summary = ?, sketches = ? WHERE run_id = ? AND shard = ?`),
			now, len(in.Records), string(healthJSON), string(summaryJSON), string(sketchJSON), id, in.Index)
		if err != nil {
			return fmt.Errorf("saving shard %d: %w", in.Index, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("shard %d of run %s never joined", in.Index, id)
		}
		var done, total int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*), COALESCE(SUM(n_records), 0) FROM ttft_shards WHERE run_id = ? AND finished_ns > 0`), id).Scan(&done, &total); err != nil {
			return fmt.Errorf("counting finished shards: %w", err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE ttft_runs SET n_records = ? WHERE id = ?`), total, id); err != nil {
			return fmt.Errorf("counting the run's records: %w", err)
		}
		allIn = done == count
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("saving shard %d of run %s: %w", in.Index, id, err)
	}
	return allIn, nil
}

// insertShardRecords writes a shard's rows keyed by their global request
// index, which no other shard has.
func (s *sqlStore) insertShardRecords(ctx context.Context, tx *sql.Tx, id string, shard int, recs []record.Record) error {
	chunk := s.d.chunkRows * 5 / 6
	var args []any
	for start := 0; start < len(recs); start += chunk {
		end := min(start+chunk, len(recs))
		var b strings.Builder
		b.WriteString(`INSERT INTO ttft_requests (run_id, idx, ttft_ms, error_class, data, shard) VALUES `)
		args = args[:0]
		for i := start; i < end; i++ {
			if i > start {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,?,?,?)")
			data, err := json.Marshal(&recs[i])
			if err != nil {
				return fmt.Errorf("encoding record %d: %w", recs[i].Index, err)
			}
			args = append(args, id, recs[i].Index, recs[i].TTFTMs, recs[i].ErrorClass, string(data), shard)
		}
		if _, err := tx.ExecContext(ctx, s.q(b.String()), args...); err != nil {
			return fmt.Errorf("inserting shard %d's records %d..%d: %w", shard, start, end-1, err)
		}
	}
	return nil
}

// FinishShardedRun stores the merged summary as the run's.
func (s *sqlStore) FinishShardedRun(ctx context.Context, runID string, sum record.Summary) error {
	id := strings.ToLower(runID)
	summaryJSON, err := json.Marshal(&sum)
	if err != nil {
		return fmt.Errorf("encoding summary: %w", err)
	}
	started := sum.Started
	if started.IsZero() {
		started = time.Now()
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE ttft_runs SET summary = ?, started_ns = ?, target = ?, model = ?, api = ?, scenario = ? WHERE id = ?`),
		string(summaryJSON), started.UnixNano(), sum.Target, sum.Model, sum.API, sum.Scenario, id)
	if err != nil {
		return fmt.Errorf("storing the merged summary of run %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("run %q: %w", id, ErrNotFound)
	}
	return nil
}

// ShardRun returns a sharded run's barrier and shards.
func (s *sqlStore) ShardRun(ctx context.Context, runID string) (*ShardRun, error) {
	id := strings.ToLower(runID)
	out := &ShardRun{RunID: id}
	var startNs int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT shard_count, start_ns FROM ttft_shard_runs WHERE run_id = ?`), id).Scan(&out.Count, &startNs)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %q is not sharded: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading shards of run %s: %w", id, err)
	}
	out.Start = fromNanos(startNs)
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT shard, registered_ns, finished_ns, n_records, health, summary, sketches FROM ttft_shards WHERE run_id = ? ORDER BY shard`), id)
	if err != nil {
		return nil, fmt.Errorf("reading shards of run %s: %w", id, err)
	}
	defer rows.Close()
	finished := map[int]bool{}
	for rows.Next() {
		var si ShardInfo
		var reg, fin int64
		var health, summary, sketches string
		if err := rows.Scan(&si.Index, &reg, &fin, &si.Records, &health, &summary, &sketches); err != nil {
			return nil, fmt.Errorf("reading shards of run %s: %w", id, err)
		}
		si.Registered, si.Finished = fromNanos(reg), fromNanos(fin)
		if err := json.Unmarshal([]byte(health), &si.Health); err != nil {
			return nil, fmt.Errorf("run %s shard %d: decoding health: %w", id, si.Index, err)
		}
		if summary != "" {
			si.Summary = &record.Summary{}
			if err := json.Unmarshal([]byte(summary), si.Summary); err != nil {
				return nil, fmt.Errorf("run %s shard %d: decoding summary: %w", id, si.Index, err)
			}
		}
		if err := json.Unmarshal([]byte(sketches), &si.Sketches); err != nil {
			return nil, fmt.Errorf("run %s shard %d: decoding sketches: %w", id, si.Index, err)
		}
		if fin != 0 {
			finished[si.Index] = true
		}
		out.Shards = append(out.Shards, si)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading shards of run %s: %w", id, err)
	}
	for i := range out.Count {
		if !finished[i] {
			out.Missing = append(out.Missing, i)
		}
	}
	return out, nil
}

// deleteShards removes a run's barrier and shard rows (none for a run made
// by one process).
func (s *sqlStore) deleteShards(ctx context.Context, tx *sql.Tx, id string) error {
	for _, q := range []string{`DELETE FROM ttft_shards WHERE run_id = ?`, `DELETE FROM ttft_shard_runs WHERE run_id = ?`} {
		if _, err := tx.ExecContext(ctx, s.q(q), id); err != nil {
			return fmt.Errorf("deleting the shards of run %s: %w", id, err)
		}
	}
	return nil
}

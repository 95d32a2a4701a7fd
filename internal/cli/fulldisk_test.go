package cli

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/store"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// A full disk under --out loses no completed measurement: the summary is
// printed from memory, the run is stored in the database (on another
// disk), requests.jsonl keeps whole lines only, and the error names the
// file and what was kept.
func TestBenchFullDiskKeepsTheRun(t *testing.T) {
	out := filepath.Join(testutil.TinyFS(t, 64<<10), "run")
	db := filepath.Join(t.TempDir(), "ttft.db")
	const n = 300
	code, stdout, stderr := runCLI(t, "bench", "-n", strconv.Itoa(n), "-c", "16", "--max-tokens", "16",
		"--out", out, "--db", db, "--no-progress")
	if code != ExitFail {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, ExitFail, stdout, stderr)
	}
	if !strings.Contains(stdout, "requests: 300 completed") {
		t.Errorf("no summary of all %d requests printed:\n%s", n, stdout)
	}
	jsonl := filepath.Join(out, "requests.jsonl")
	m := regexp.MustCompile(`kept: all 300 records in the results database as run (\S+); ` + regexp.QuoteMeta(jsonl) + ` holds the first (\d+) records, whole`).FindStringSubmatch(stderr)
	if m == nil || !strings.Contains(stderr, "no space left on device") {
		t.Fatalf("the error does not name the file, the cause and what was kept:\n%s", stderr)
	}
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Errorf("requests.jsonl ends in a half-written line (%d bytes)", len(data))
	}
	recs, err := record.ReadJSONL(jsonl)
	if kept, _ := strconv.Atoi(m[2]); err != nil || len(recs) != kept || kept == 0 || kept >= n {
		t.Errorf("requests.jsonl: %d whole records (%v), the message says %s of %d", len(recs), err, m[2], n)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stored, err := st.Records(context.Background(), m[1])
	if err != nil || len(stored) != n {
		t.Errorf("database run %s: %d records (%v), want %d", m[1], len(stored), err, n)
	}
}

// A results database that cannot take the run (corrupt, on a read-only file
// system) is named in an error and a non-zero exit; the run directory holds
// every record, for ttft runs import later. Never a hang.
func TestBenchBrokenDatabaseKeepsTheRun(t *testing.T) {
	corrupt := filepath.Join(t.TempDir(), "ttft.db")
	if err := os.WriteFile(corrupt, []byte(strings.Repeat("not a database ", 512)), 0o644); err != nil {
		t.Fatal(err)
	}
	ro := testutil.TinyFS(t, 1<<20)
	roDB := filepath.Join(ro, "ttft.db")
	if code, _, stderr := runCLI(t, "bench", "-n", "2", "--max-tokens", "4", "--no-progress", "--db", roDB, "--out", t.TempDir()); code != 0 {
		t.Fatalf("making the database: exit %d\n%s", code, stderr)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", ro).CombinedOutput(); err != nil {
		testutil.Missing(t, "a read-only remount", fmt.Sprintf("%v: %s", err, out))
	}
	t.Cleanup(func() { exec.Command("mount", "-o", "remount,rw", ro).Run() })
	for name, db := range map[string]string{"corrupt": corrupt, "read-only": roDB} {
		out := filepath.Join(t.TempDir(), "run")
		start := time.Now()
		code, stdout, stderr := runCLI(t, "bench", "-n", "6", "--max-tokens", "4", "--no-progress", "--db", db, "--out", out)
		if code != ExitFail || !strings.Contains(stderr, db) || !strings.Contains(stderr, "ttft runs import "+out) {
			t.Errorf("%s: exit %d, want %d naming %s and the run directory\nstdout:\n%s\nstderr:\n%s", name, code, ExitFail, db, stdout, stderr)
		}
		if recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl")); err != nil || len(recs) != 6 {
			t.Errorf("%s: requests.jsonl has %d records (%v), want 6", name, len(recs), err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
}

// A results database that another process holds locked makes bench wait
// for it (SQLite's busy timeout, 60 s, for the concurrent ttft processes
// it is there for), not fail or drop the run: once the lock goes, the run
// is stored. A lock held past the timeout ends as the broken database
// above does, naming the database and the run directory.
func TestBenchLockedDatabaseWaits(t *testing.T) {
	dbPath, unlock := lockedDatabase(t)
	const hold = 3 * time.Second
	locked := time.Now()
	go func() {
		time.Sleep(hold)
		unlock()
	}()
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "-n", "6", "--max-tokens", "4", "--no-progress", "--db", dbPath, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d with the lock released after %v\nstdout:\n%s\nstderr:\n%s", code, hold, stdout, stderr)
	}
	if d := time.Since(locked); d < hold {
		t.Errorf("bench finished %v after the lock was taken, before it was released (%v): it did not wait for it", d, hold)
	}
	s, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := s.List(ctx, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Errorf("%d runs stored, want 2 (the one that waited for the lock included)", len(runs))
	}
}

// A lock held past the database's busy timeout (here 300 ms, set in its
// name) ends as a broken database does: exit 1 naming the database, what
// went wrong and the run directory to import later; every record kept.
func TestBenchLockedDatabaseGivesUp(t *testing.T) {
	dbPath, unlock := lockedDatabase(t)
	defer unlock()
	out := filepath.Join(t.TempDir(), "run")
	start := time.Now()
	code, stdout, stderr := runCLI(t, "bench", "-n", "6", "--max-tokens", "4", "--no-progress", "--db", dbPath+"?busy_timeout=300", "--out", out)
	if code != ExitFail || !strings.Contains(stderr, dbPath) || !strings.Contains(stderr, "locked") || !strings.Contains(stderr, "ttft runs import "+out) {
		t.Errorf("exit %d, want %d naming %s, the lock and the run directory\nstdout:\n%s\nstderr:\n%s", code, ExitFail, dbPath, stdout, stderr)
	}
	if recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl")); err != nil || len(recs) != 6 {
		t.Errorf("requests.jsonl has %d records (%v), want 6", len(recs), err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v with a 300 ms busy timeout", d)
	}
}

// lockedDatabase makes a results database with one run in it and holds it
// locked (BEGIN EXCLUSIVE, as another process's write would) until unlock
// is called.
func lockedDatabase(t *testing.T) (path string, unlock func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "ttft.db")
	if code, _, stderr := runCLI(t, "bench", "-n", "2", "--max-tokens", "4", "--no-progress", "--db", path, "--out", t.TempDir()); code != 0 {
		t.Fatalf("making the database: exit %d\n%s", code, stderr)
	}
	ctx := context.Background()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		conn.Close()
		db.Close()
		t.Fatalf("locking the database: %v", err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(unlock)
	return path, unlock
}

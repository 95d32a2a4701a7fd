package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openSQLiteT(t *testing.T) Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "sub", "ttft.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLite(t *testing.T) { storeSuite(t, openSQLiteT) }

func TestSQLiteRefusesCorruptFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "junk.db")
	junk := bytes.Repeat([]byte("this is not sqlite\n"), 300)
	if err := os.WriteFile(p, junk, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), p)
	if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), p) {
		t.Fatalf("opening a corrupt file: %v", err)
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(after, junk) {
		t.Fatal("opening a corrupt file modified it")
	}
}

func TestSQLiteRefusesForeignDatabase(t *testing.T) {
	p := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE customers (id INTEGER, name TEXT); INSERT INTO customers VALUES (1, 'x')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(p)
	_, err = Open(context.Background(), p)
	if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "customers") {
		t.Fatalf("opening another application's database: %v", err)
	}
	db, _ = sql.Open("sqlite", p)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'ttft_%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("ttft tables were added to a foreign database (%d, %v)", n, err)
	}
	_ = before
}

func TestSQLiteRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "ttft.db")
	s, err := Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Save(ctx, fakeRun(3, 1, 10, fixedNow))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, _ := sql.Open("sqlite", p)
	if _, err := db.Exec(`INSERT INTO ttft_schema (version, applied_ns) VALUES (?, 0)`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, p)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("newer schema: %v", err)
	}
	// The data is still there for the newer ttft.
	db, _ = sql.Open("sqlite", p)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ttft_runs WHERE id = ?`, id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("run lost: %d %v", n, err)
	}
}

func TestSQLiteReopenKeepsRuns(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "ttft.db")
	s, err := Open(ctx, "sqlite:"+p)
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.Save(ctx, fakeRun(3, 1, 10, fixedNow))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestSQLiteConcurrentWriters: two processes' worth of stores on one file
// save at the same time; every run lands (busy timeout + immediate
// transactions instead of "database is locked").
func TestSQLiteConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "ttft.db")
	a, err := Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	errs := make(chan error, 10)
	for i := range 10 {
		s := a
		if i%2 == 1 {
			s = b
		}
		go func() {
			_, err := s.Save(ctx, fakeRun(200, uint64(i), 50, fixedNow))
			errs <- err
		}()
	}
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	list, err := a.List(ctx, ListOptions{})
	if err != nil || len(list) != 10 {
		t.Fatalf("%d runs, %v", len(list), err)
	}
}

func TestSQLiteNameOptions(t *testing.T) {
	for _, c := range []struct {
		name, path string
		busy       time.Duration
		err        bool
	}{
		{"ttft.db", "ttft.db", sqliteBusyTimeout, false},
		{"dir/ttft.db?busy_timeout=250", "dir/ttft.db", 250 * time.Millisecond, false},
		{"ttft.db?busy_timeout=0", "ttft.db", 0, false},
		{"ttft.db?busy_timeout=-1", "", 0, true},
		{"ttft.db?busy_timeout=soon", "", 0, true},
		{"ttft.db?journal_mode=off", "", 0, true},
		{"ttft.db#x", "", 0, true},
		{"?busy_timeout=1", "", 0, true},
		{"", "", 0, true},
	} {
		path, busy, err := splitSQLiteName(c.name)
		if (err != nil) != c.err || !c.err && (path != c.path || busy != c.busy) {
			t.Errorf("splitSQLiteName(%q) = %q, %v, %v; want %q, %v, error %v", c.name, path, busy, err, c.path, c.busy, c.err)
		}
	}
}

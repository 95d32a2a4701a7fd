package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/testutil"
)

// pgBinDir finds the PostgreSQL server binaries: $TTFT_PG_BINDIR, initdb on
// PATH, or Debian's /usr/lib/postgresql/N/bin (not on PATH by default).
func pgBinDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TTFT_PG_BINDIR"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(found)
	if len(found) > 0 {
		return filepath.Dir(found[len(found)-1])
	}
	testutil.Missing(t, "PostgreSQL server (initdb, pg_ctl)", "apt-get install postgresql, see .ci/install-postgres.sh, or set TTFT_PG_BINDIR")
	return ""
}

// startPostgres starts a private cluster in a temp dir on 127.0.0.1 and a
// free port, stopped at the end of the test. PostgreSQL refuses to run as
// root, so as root it runs as the "postgres" user via runuser.
func startPostgres(t *testing.T) string {
	t.Helper()
	bin := pgBinDir(t)
	var asUser []string
	dir, err := os.MkdirTemp("", "ttft-pg-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testutil.Missing(t, "a non-root 'postgres' user to run PostgreSQL as", "apt-get install postgresql creates it")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			testutil.Missing(t, "runuser", "util-linux")
		}
		asUser = []string{runuser, "-u", "postgres", "--"}
	}
	run := func(args ...string) ([]byte, error) {
		full := append(append([]string(nil), asUser...), args...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, full[0], full[1:]...)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	data := filepath.Join(dir, "data")
	if out, err := run(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	// The free port is picked by binding and closing it, so another process
	// may take it before PostgreSQL binds: try a fresh one then.
	var port int
	for attempt := 1; ; attempt++ {
		port = freePort(t)
		logPath := filepath.Join(dir, fmt.Sprintf("log.%d", attempt))
		opts := fmt.Sprintf("-k %s -p %d -h 127.0.0.1 -c fsync=off -c full_page_writes=off", dir, port)
		out, err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", logPath, "-w", "-t", "30", "start")
		if err == nil {
			break
		}
		log, _ := os.ReadFile(logPath)
		if attempt < 3 && strings.Contains(string(log), "already in use") {
			t.Logf("port %d was taken before PostgreSQL bound it; retrying", port)
			continue
		}
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	base := startPostgres(t)
	ctx := context.Background()
	admin, err := Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	db := admin.(*sqlStore).db
	n := 0
	// Each subtest gets its own schema (cheaper than a database) so they
	// start empty; the store works in the connection's current schema.
	storeSuite(t, func(t *testing.T) Store {
		n++
		name := fmt.Sprintf("t%d", n)
		if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+name); err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, base+"&search_path="+name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})

	t.Run("NewerSchema", func(t *testing.T) {
		if _, err := db.ExecContext(ctx, `INSERT INTO ttft_schema (version, applied_ns) VALUES ($1, 0)`, SchemaVersion+1); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, base)
		if !errors.Is(err, ErrNewerSchema) {
			t.Fatalf("newer schema: %v", err)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		_, err := Open(ctx, fmt.Sprintf("postgres://postgres:secret@127.0.0.1:%d/x?sslmode=disable&connect_timeout=2", freePort(t)))
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Fatalf("unreachable server: %v (must fail without echoing the password)", err)
		}
	})
}

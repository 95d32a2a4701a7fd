package testutil

import (
	"context"
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
)

// PostgresBinDir finds the PostgreSQL server binaries: $TTFT_PG_BINDIR,
// initdb on PATH, or Debian's /usr/lib/postgresql/N/bin (not on PATH by
// default); absent, it skips or fails per Missing.
func PostgresBinDir(t testing.TB) string {
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
	Missing(t, "PostgreSQL server (initdb, pg_ctl)", "apt-get install postgresql, see .ci/install-postgres.sh, or set TTFT_PG_BINDIR")
	return ""
}

// Postgres starts a private PostgreSQL cluster in a temp dir on 127.0.0.1
// and a free port, stopped at the end of the test, and returns its URL.
// PostgreSQL refuses to run as root, so as root it runs as the "postgres"
// user via runuser.
func Postgres(t testing.TB) string {
	t.Helper()
	bin := PostgresBinDir(t)
	var asUser []string
	dir, err := os.MkdirTemp("", "ttft-pg-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			Missing(t, "a non-root 'postgres' user to run PostgreSQL as", "apt-get install postgresql creates it")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			Missing(t, "runuser", "util-linux")
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
		port = FreePort(t)
		logPath := filepath.Join(dir, fmt.Sprintf("log.%d", attempt))
		opts := fmt.Sprintf("-k %s -p %d -h 127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200", dir, port)
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

// FreePort is a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

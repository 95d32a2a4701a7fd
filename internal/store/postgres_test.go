package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/testutil"
)

func TestPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	base := testutil.Postgres(t)
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
		_, err := Open(ctx, fmt.Sprintf("postgres://postgres:secret@127.0.0.1:%d/x?sslmode=disable&connect_timeout=2", testutil.FreePort(t)))
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Fatalf("unreachable server: %v (must fail without echoing the password)", err)
		}
	})
}

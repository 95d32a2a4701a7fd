package store

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// storeSuite is the behaviour every backend must have; SQLite and
// PostgreSQL both run it.
func storeSuite(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	now := time.Now().UTC()

	t.Run("RoundTrip", func(t *testing.T) {
		s := open(t)
		in := fakeRun(300, 1, 80, now.Add(-time.Hour))
		id, err := s.Save(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 8 || strings.Trim(id, idAlphabet) != "" {
			t.Fatalf("id %q is not 8 characters of the id alphabet", id)
		}
		got, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "summary", in.Summary, got.Summary)
		if got.Source != "bench" || got.Model != "m" || got.Records != 300 || got.Labels["concurrency"] != "4" {
			t.Fatalf("meta = %+v", got.RunMeta)
		}
		if !got.Started.Equal(in.Summary.Started) {
			t.Fatalf("started %v, want %v", got.Started, in.Summary.Started)
		}
		recs, err := s.Records(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "records", in.Records, recs)
	})

	t.Run("ListResolveDelete", func(t *testing.T) {
		s := open(t)
		var ids []string
		for i := range 3 {
			in := fakeRun(5, uint64(i), 50, now)
			in.Labels = map[string]string{"k": string(rune('a' + i))}
			id, err := s.Save(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			time.Sleep(2 * time.Millisecond) // distinct created times
		}
		list, err := s.List(ctx, ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 3 || list[0].ID != ids[2] || list[2].ID != ids[0] {
			t.Fatalf("list not newest first: %v vs saved %v", list, ids)
		}
		if l, _ := s.List(ctx, ListOptions{Labels: map[string]string{"k": "b"}}); len(l) != 1 || l[0].ID != ids[1] {
			t.Fatalf("label filter: %v", l)
		}
		if l, _ := s.List(ctx, ListOptions{Limit: 2}); len(l) != 2 {
			t.Fatalf("limit: %d", len(l))
		}
		if got, err := s.Resolve(ctx, "latest"); err != nil || got != ids[2] {
			t.Fatalf("latest = %q, %v", got, err)
		}
		if got, err := s.Resolve(ctx, strings.ToUpper(ids[1][:6])); err != nil || got != ids[1] {
			t.Fatalf("prefix = %q, %v", got, err)
		}
		if _, err := s.Resolve(ctx, "zzzzzzzzz"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
		if _, err := s.Resolve(ctx, "a%_"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("invalid ref: %v", err)
		}
		if _, err := s.Resolve(ctx, ""); err == nil {
			t.Fatal("empty prefix accepted")
		}
		if err := s.Delete(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
			t.Fatalf("deleted run still there: %v", err)
		}
		if recs, _ := s.Records(ctx, ids[0]); len(recs) != 0 {
			t.Fatalf("deleted run kept %d records", len(recs))
		}
		if err := s.Delete(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})

	t.Run("AmbiguousPrefix", func(t *testing.T) {
		s := open(t)
		// 33 runs over a 32-letter alphabet: two share a first letter.
		seen := map[byte]bool{}
		dup := byte(0)
		for i := 0; i < 33 && dup == 0; i++ {
			id, err := s.Save(ctx, fakeRun(1, uint64(i), 10, now))
			if err != nil {
				t.Fatal(err)
			}
			if seen[id[0]] {
				dup = id[0]
			}
			seen[id[0]] = true
		}
		_, err := s.Resolve(ctx, string(dup))
		if err == nil || !strings.Contains(err.Error(), "ambiguous") {
			t.Fatalf("ambiguous prefix %q: %v", string(dup), err)
		}
	})

	t.Run("FailedSaveStoresNothing", func(t *testing.T) {
		s := open(t)
		in := fakeRun(1000, 2, 50, now)
		in.Records[900].TPOTMs = math.NaN() // JSON cannot encode it: fails mid-insert
		if _, err := s.Save(ctx, in); err == nil {
			t.Fatal("saving a NaN record succeeded")
		}
		list, err := s.List(ctx, ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 0 {
			t.Fatalf("failed save left %d runs", len(list))
		}
	})

	t.Run("Prune", func(t *testing.T) {
		s := open(t)
		day := 24 * time.Hour
		old, _ := s.Save(ctx, fakeRun(10, 1, 50, now.Add(-100*day)))
		mid, _ := s.Save(ctx, fakeRun(10, 2, 50, now.Add(-10*day)))
		fresh, _ := s.Save(ctx, fakeRun(10, 3, 50, now.Add(-day)))
		dry, err := s.Prune(ctx, Policy{RawAfter: 7 * day, RunsAfter: 90 * day, DryRun: true}, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(dry.RunsDeleted) != 1 || len(dry.RecordsDropped) != 1 || dry.Rows != 20 {
			t.Fatalf("dry run = %+v", dry)
		}
		if l, _ := s.List(ctx, ListOptions{}); len(l) != 3 {
			t.Fatal("dry run deleted something")
		}
		res, err := s.Prune(ctx, DefaultPolicy, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.RunsDeleted) != 1 || res.RunsDeleted[0] != old || len(res.RecordsDropped) != 1 || res.RecordsDropped[0] != mid || res.Rows != 20 {
			t.Fatalf("prune = %+v (old %s mid %s)", res, old, mid)
		}
		if _, err := s.Get(ctx, old); !errors.Is(err, ErrNotFound) {
			t.Fatal("expired run kept")
		}
		m, err := s.Get(ctx, mid)
		if err != nil || !m.RecordsPruned || m.Summary.Requests.Total == 0 {
			t.Fatalf("mid run: %+v %v", m, err)
		}
		if recs, _ := s.Records(ctx, mid); len(recs) != 0 {
			t.Fatal("raw rows kept past RawAfter")
		}
		if recs, _ := s.Records(ctx, fresh); len(recs) != 10 {
			t.Fatal("fresh run lost rows")
		}
		again, _ := s.Prune(ctx, DefaultPolicy, now)
		if len(again.RunsDeleted)+len(again.RecordsDropped) != 0 {
			t.Fatalf("prune not idempotent: %+v", again)
		}
	})

	t.Run("ExportImport", func(t *testing.T) {
		s := open(t)
		in := fakeRun(50, 4, 60, now)
		id, err := s.Save(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "run")
		if err := s.Export(ctx, id, dir); err != nil {
			t.Fatal(err)
		}
		if err := s.Export(ctx, id, dir); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
			t.Fatalf("second export: %v", err)
		}
		id2, err := s.Import(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := s.Get(ctx, id)
		b, _ := s.Get(ctx, id2)
		sameJSON(t, "summary", a.Summary, b.Summary)
		if b.Labels["concurrency"] != "4" {
			t.Fatalf("labels lost in export/import: %v", b.Labels)
		}
		ra, _ := s.Records(ctx, id)
		rb, _ := s.Records(ctx, id2)
		sameJSON(t, "records", ra, rb)
	})

	t.Run("FailedImportStoresNothing", func(t *testing.T) {
		s := open(t)
		if _, err := s.Save(ctx, fakeRun(5, 5, 50, now)); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		good := fakeRun(3, 6, 50, now)
		if err := WriteDir(dir, nil, &good.Summary, good.Records); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, RequestsFile)
		b, _ := os.ReadFile(p)
		lines := strings.SplitAfter(string(b), "\n")
		bad := lines[0] + "{\"index\": 1, \"sent\": \"not a time\"}\n" + strings.Join(lines[1:], "")
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.Import(ctx, dir)
		if err == nil || !strings.Contains(err.Error(), RequestsFile+":2") {
			t.Fatalf("import of a bad line: %v (want file:line)", err)
		}
		if l, _ := s.List(ctx, ListOptions{}); len(l) != 1 {
			t.Fatalf("failed import changed the store: %d runs", len(l))
		}
	})
}

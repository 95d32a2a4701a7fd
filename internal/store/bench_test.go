package store

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkSave100k stores a 100,000-request run in a fresh SQLite file:
// the cost ttft bench pays at the end of a large run.
func BenchmarkSave100k(b *testing.B) {
	in := fakeRun(100_000, 1, 80, fixedNow)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s, err := Open(ctx, filepath.Join(b.TempDir(), "ttft.db"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Save(ctx, in); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(len(in.Records)), "records/op")
}

// BenchmarkRecords100k reads the 100,000 records back (compare, report).
func BenchmarkRecords100k(b *testing.B) {
	in := fakeRun(100_000, 1, 80, fixedNow)
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "ttft.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id, err := s.Save(ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		recs, err := s.Records(ctx, id)
		if err != nil || len(recs) != len(in.Records) {
			b.Fatal(len(recs), err)
		}
	}
}

// BenchmarkWriteJSONL100k is the baseline for BenchmarkSave100k: writing the
// same records to requests.jsonl, as every run does anyway.
func BenchmarkWriteJSONL100k(b *testing.B) {
	in := fakeRun(100_000, 1, 80, fixedNow)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteDir(b.TempDir(), nil, &in.Summary, in.Records); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadJSONL100k is the baseline for BenchmarkRecords100k.
func BenchmarkReadJSONL100k(b *testing.B) {
	in := fakeRun(100_000, 1, 80, fixedNow)
	dir := b.TempDir()
	if err := WriteDir(dir, nil, &in.Summary, in.Records); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadDir(dir); err != nil {
			b.Fatal(err)
		}
	}
}

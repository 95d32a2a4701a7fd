package report

import (
	"io"
	"testing"
)

// BenchmarkReport100k builds and writes the HTML report of one
// 100,000-request run (chart data, comparison table, SVG, template).
func BenchmarkReport100k(b *testing.B) {
	runs := []Run{fakeRun("big", 100_000, 1, 80, 10, nil)}
	b.ReportAllocs()
	for b.Loop() {
		if err := Build(runs, Options{}).WriteHTML(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompare2x100k compares two 100,000-request runs (bootstrap CIs
// and Mann–Whitney for TTFT mean, P95, P99 and ITL mean).
func BenchmarkCompare2x100k(b *testing.B) {
	runs := []Run{fakeRun("a", 100_000, 1, 80, 10, nil), fakeRun("b", 100_000, 2, 78, 10, nil)}
	b.ReportAllocs()
	for b.Loop() {
		Compare(runs, CompareOptions{})
	}
}

// BenchmarkPNG renders one chart to PNG.
func BenchmarkPNG(b *testing.B) {
	charts := Charts(sweepRuns(1000), ChartOptions{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PNG(&charts[0]); err != nil {
			b.Fatal(err)
		}
	}
}

package sloclass

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ttft, e2e time.Duration
	}{{"code", 120 * time.Millisecond, 300 * time.Millisecond}, {"Chat", 320 * time.Millisecond, 800 * time.Millisecond}, {"SUMMARY", 650 * time.Millisecond, 1200 * time.Millisecond}} {
		c, ok := Lookup(tc.name)
		if !ok || c.TTFT != tc.ttft || c.E2E != tc.e2e || c.Name != strings.ToLower(tc.name) {
			t.Errorf("Lookup(%q) = %+v, %v", tc.name, c, ok)
		}
	}
	if _, ok := Lookup("batch"); ok {
		t.Error("unknown class found")
	}
	if _, err := Parse("batch"); err == nil || !strings.Contains(err.Error(), "code, chat, summary") {
		t.Errorf("Parse(batch): %v", err)
	}
	if got, want := Describe(), "code|chat|summary (120/320/650 ms P95 TTFT)"; got != want {
		t.Errorf("Describe() = %q want %q", got, want)
	}
	prev := time.Duration(0)
	for _, c := range All() {
		if c.TTFT <= prev || c.E2E <= c.TTFT || c.Product == "" {
			t.Errorf("class %+v: want increasing TTFT targets, E2E above TTFT, a product", c)
		}
		prev = c.TTFT
	}
}

func TestTTFTBucketsHoldEveryTarget(t *testing.T) {
	b := TTFTBuckets()
	if !slices.IsSorted(b) {
		t.Fatalf("buckets not sorted: %v", b)
	}
	for _, c := range All() {
		if !slices.Contains(b, c.TTFT.Seconds()) {
			t.Errorf("class %s's TTFT target %v is not a bucket bound", c.Name, c.TTFT)
		}
	}
	b[0] = 42
	if TTFTBuckets()[0] == 42 {
		t.Error("callers share the slice")
	}
}

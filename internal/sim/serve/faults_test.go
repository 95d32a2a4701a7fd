package serve

import (
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	tests := []struct {
		in      string
		want    FaultConfig
		wantErr bool
	}{
		{"", FaultConfig{}, false},
		{"error=503", FaultConfig{ErrorRate: 1, ErrorStatus: 503}, false},
		{"error=429; error-rate=0.25", FaultConfig{ErrorRate: 0.25, ErrorStatus: 429}, false},
		{"stall-first=2s, cut-after=20", FaultConfig{StallFirst: 2 * time.Second, CutAfter: 20}, false},
		{"stall-mid=500ms@10,slow-start=1ms", FaultConfig{StallMid: 500 * time.Millisecond, StallMidAfter: 10, SlowStart: time.Millisecond}, false},
		{"error=200", FaultConfig{}, true},
		{"stall-first=soon", FaultConfig{}, true},
		{"bogus=1", FaultConfig{}, true},
		{"cut-after", FaultConfig{}, true},
		{"stall-mid=1s@0", FaultConfig{}, true},
		{"error-rate=2", FaultConfig{}, true},
		{"cut-after=5,mid-rate=0.25", FaultConfig{CutAfter: 5, MidRate: 0.25}, false},
		{"mid-rate=1.5", FaultConfig{}, true},
	}
	for _, tc := range tests {
		got, err := ParseFaults(FaultConfig{}, tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseFaults(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && got != tc.want {
			t.Errorf("ParseFaults(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"error=503", "stall-mid=1s@3;cut-after=2", "error-rate=0.5", ",,;", "slow-start=-1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fc, err := ParseFaults(FaultConfig{}, s)
		if err != nil {
			return
		}
		if fc.ErrorRate < 0 || fc.ErrorRate > 1 || fc.StallFirst < 0 || fc.StallMid < 0 || fc.SlowStart < 0 || fc.CutAfter < 0 {
			t.Fatalf("accepted out-of-range faults %+v from %q", fc, s)
		}
	})
}

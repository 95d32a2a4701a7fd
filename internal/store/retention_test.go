package store

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"7d", 7 * day, false}, {"90D", 90 * day, false}, {"2w", 14 * day, false}, {"36h", 36 * time.Hour, false},
		{"0", 0, false}, {"never", 0, false}, {"", 0, false},
		{"-1d", 0, true}, {"d", 0, true}, {"7x", 0, true}, {"-5h", 0, true}, {"1.5d", 0, true}, {"99999999d", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseAge(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseAge(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"7d", "2w", "36h", "0", "never", "-1d", "1e9h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseAge(s)
		if err == nil && d < 0 {
			t.Fatalf("ParseAge(%q) = %v: negative", s, d)
		}
	})
}

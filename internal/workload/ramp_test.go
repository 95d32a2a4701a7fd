package workload

import (
	"context"
	"io"
	"math"
	"testing"
	"time"
)

func TestParseRamp(t *testing.T) {
	cases := []struct {
		spec string
		want Ramp
		ok   bool
	}{
		{"10:100:60s", Ramp{10, 100, time.Minute}, true},
		{"0:5:1m30s", Ramp{0, 5, 90 * time.Second}, true},
		{"50:0:10s", Ramp{50, 0, 10 * time.Second}, true},
		{"2.5:2.5:1s", Ramp{2.5, 2.5, time.Second}, true},
		{"0:0:10s", Ramp{}, false},
		{"10:100", Ramp{}, false},
		{"10:100:60", Ramp{}, false}, // a duration needs its unit
		{"-1:10:5s", Ramp{}, false},
		{"1:inf:5s", Ramp{}, false},
		{"1:NaN:5s", Ramp{}, false},
		{"1:2:0s", Ramp{}, false},
		{"a:2:5s", Ramp{}, false},
	}
	for _, c := range cases {
		got, err := ParseRamp(c.spec)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseRamp(%q) = %+v, %v; want %+v, ok %v", c.spec, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseRamp(f *testing.F) {
	for _, s := range []string{"10:100:60s", "0:1:1ms", "5:0:1h", "::", "1:2:3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		r, err := ParseRamp(spec)
		if err != nil {
			return
		}
		// A ramp that parses has a schedule: its inverse lands where the
		// cumulative rate says, and times never go back.
		prev := time.Duration(0)
		for _, s := range []float64{0.5, 1, 2, 10} {
			at, ok := r.inverse(s)
			if !ok {
				break
			}
			if at < prev {
				t.Fatalf("%q: inverse(%v) = %v before %v", spec, s, at, prev)
			}
			prev = at
		}
	})
}

// The schedule is the ramp's: Λ(t_k) is the k-th unit-rate arrival time
// (exact inversion), and the number of arrivals in each window matches the
// integral of the rate over it.
func TestRampedScheduleFollowsTheRate(t *testing.T) {
	cases := []struct {
		name string
		ramp Ramp
	}{
		{"up", Ramp{10, 100, 60 * time.Second}},
		{"down", Ramp{100, 10, 60 * time.Second}},
		{"flat", Ramp{40, 40, 60 * time.Second}},
		{"from zero", Ramp{0, 80, 60 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Exactness of the inversion.
			for _, s := range []float64{0.1, 1, 37.5, 1000, c.ramp.Cumulative(c.ramp.Over) + 50} {
				at, ok := c.ramp.inverse(s)
				if !ok {
					t.Fatalf("inverse(%v) ended the schedule", s)
				}
				if got := c.ramp.Cumulative(at); math.Abs(got-s) > 1e-6*max(1, s) {
					t.Errorf("Λ(Λ⁻¹(%v)) = %v", s, got)
				}
			}
			src, err := NewRamped(fixedSource(t), c.ramp, 7)
			if err != nil {
				t.Fatal(err)
			}
			if !OwnsSchedule(src) {
				t.Fatal("a ramped source must own its schedule")
			}
			// Count arrivals per 10 s window over the ramp and 20 s after.
			counts := make([]int, 8)
			var last time.Duration
			for {
				req, err := src.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if !req.HasAt || req.At < last {
					t.Fatalf("request %d: At %v (HasAt %v) after %v", req.Index, req.At, req.HasAt, last)
				}
				last = req.At
				w := int(req.At / (10 * time.Second))
				if w >= len(counts) {
					break
				}
				counts[w]++
			}
			for w, n := range counts {
				from, to := time.Duration(w)*10*time.Second, time.Duration(w+1)*10*time.Second
				want := c.ramp.Cumulative(to) - c.ramp.Cumulative(from)
				// Poisson: within 4.5 standard deviations (seeded, so
				// this is deterministic; the bound says what it checks).
				if math.Abs(float64(n)-want) > 4.5*math.Sqrt(want)+1 {
					t.Errorf("window %v–%v: %d arrivals, want ≈ %.0f", from, to, n, want)
				}
			}
		})
	}
}

func TestRampDownEndsTheSchedule(t *testing.T) {
	src, err := NewRamped(fixedSource(t), Ramp{20, 0, 10 * time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		req, err := src.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if req.At > 10*time.Second {
			t.Fatalf("request at %v after a ramp down to 0 over 10 s", req.At)
		}
		n++
	}
	// Λ(10 s) = 100 expected arrivals.
	if n < 60 || n > 140 {
		t.Errorf("%d arrivals, want ≈ 100", n)
	}
}

func TestRampedRefusesAScheduledSource(t *testing.T) {
	inner, err := NewRamped(fixedSource(t), Ramp{1, 2, time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewRamped(inner, Ramp{1, 2, time.Second}, 1); err == nil {
		t.Error("a source with its own schedule was ramped")
	}
}

func fixedSource(t *testing.T) Source {
	t.Helper()
	src, err := NewFixed(FixedOptions{PromptTokens: 8, MaxTokens: 4, Chat: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"128", "uniform:1,9", "normal:500,100", "lognormal:300,0.5,20,2000", "x:", ",", "fixed:1e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		d, err := ParseDist(spec)
		if err != nil {
			return
		}
		// What parses validates, and its draws respect its bounds.
		if err := d.Validate("d"); err != nil {
			t.Fatalf("%q parsed to an invalid %+v: %v", spec, d, err)
		}
	})
}

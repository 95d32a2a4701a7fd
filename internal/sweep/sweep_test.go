package sweep

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestParseParamAndGrid(t *testing.T) {
	a, err := ParseParam("concurrency=1,8,16")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ParseParam("--prompt-tokens=512, 1024")
	pts := Grid([]Param{a, b})
	if len(pts) != 6 {
		t.Fatalf("%d points", len(pts))
	}
	if pts[1].Label() != "concurrency=1 prompt-tokens=1024" || pts[5].Index != 5 {
		t.Fatalf("%q", pts[1].Label())
	}
	if args := pts[2].Args(); args[0] != "--concurrency=8" || args[1] != "--prompt-tokens=512" {
		t.Fatalf("%v", args)
	}
	for _, bad := range []string{"x", "=1", "x=", "x=1,,2"} {
		if _, err := ParseParam(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A fake server: throughput caps at 20 req/s.
func fakeRate(_ context.Context, p Point) (Outcome, error) {
	v, _ := p.Get("rate")
	rate, _ := strconv.ParseFloat(v, 64)
	got := math.Min(rate, 20)
	return Outcome{Summary: record.Summary{Requests: record.Requests{Completed: 100}, Throughput: record.Throughput{RequestsPerS: got}}}, nil
}

func TestRunStopsOnSaturation(t *testing.T) {
	p, _ := ParseParam("rate=5,10,30,40,80")
	var seen int
	res, err := Run(context.Background(), Grid([]Param{p}), fakeRate, Options{StopOnSaturation: true, OnResult: func(Result) { seen++ }})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 5 || res[1].Saturated != "" || res[2].Saturated == "" || !res[3].Skipped || !res[4].Skipped {
		t.Fatalf("%+v", res)
	}
	// Without stopping, every point runs.
	res, _ = Run(context.Background(), Grid([]Param{p}), fakeRate, Options{})
	for _, r := range res {
		if r.Skipped {
			t.Fatal("skipped without StopOnSaturation")
		}
	}
	// Errors stay with their point.
	res, _ = Run(context.Background(), Grid([]Param{p}), func(context.Context, Point) (Outcome, error) {
		return Outcome{}, errors.New("boom")
	}, Options{})
	if len(res) != 5 || res[0].Err == nil {
		t.Fatal("error not kept")
	}
}

func TestSaturationByTTFTTrend(t *testing.T) {
	t0 := time.Unix(0, 0)
	var recs []record.Record
	for i := 0; i < 100; i++ {
		recs = append(recs, record.Record{Sent: t0.Add(time.Duration(i) * time.Second), TTFTMs: 50 + 5*float64(i)})
	}
	if why := Saturation(Point{}, Outcome{Records: recs}); why == "" {
		t.Fatal("growing TTFT not flagged")
	}
	for i := range recs {
		recs[i].TTFTMs = 50 + float64(i%7)
	}
	if why := Saturation(Point{}, Outcome{Records: recs}); why != "" {
		t.Fatalf("steady TTFT flagged: %s", why)
	}
	lag := Outcome{Summary: record.Summary{ScheduleLag: record.Metric{Count: 5, P99: 2500}}}
	if Saturation(Point{}, lag) == "" {
		t.Fatal("schedule lag not flagged")
	}
}

// A fake server whose latency grows faster than the work in flight (queueing
// on top of linear compute): the table shows the deviation growing with
// batch × context, as in the article's §2.4 table.
func TestLinearDeviationSuperlinear(t *testing.T) {
	model := func(b, ctx float64) float64 {
		w := b * ctx
		return 5 + 0.002*w + 2e-8*w*w
	}
	c, _ := ParseParam("concurrency=1,8,16,32")
	x, _ := ParseParam("prompt-tokens=512,1024,2048")
	run := func(_ context.Context, p Point) (Outcome, error) {
		bs, _ := p.Get("concurrency")
		cs, _ := p.Get("prompt-tokens")
		b, _ := strconv.ParseFloat(bs, 64)
		ctx, _ := strconv.ParseFloat(cs, 64)
		l := model(b, ctx)
		return Outcome{Summary: record.Summary{TTFT: record.Metric{Count: 100, P50: l, P95: 1.3 * l}}}, nil
	}
	res, err := Run(context.Background(), Grid([]Param{c, x}), run, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cells, err := LinearDeviation(res, "concurrency", "prompt-tokens")
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 12 {
		t.Fatalf("%d cells", len(cells))
	}
	get := func(b, ctx float64) Cell {
		for _, c := range cells {
			if c.X == b && c.Y == ctx {
				return c
			}
		}
		t.Fatalf("no cell %vx%v", b, ctx)
		return Cell{}
	}
	corner := get(32, 2048)
	if corner.DevP50Pct < 20 {
		t.Errorf("32x2048 deviation %.1f%%, want clearly super-linear", corner.DevP50Pct)
	}
	if mid := get(8, 1024); !(mid.DevP50Pct < corner.DevP50Pct) {
		t.Errorf("deviation does not grow with load: 8x1024 %.1f%% vs 32x2048 %.1f%%", mid.DevP50Pct, corner.DevP50Pct)
	}
	if math.Abs(corner.DevP95Pct-corner.DevP50Pct) > 1e-6 {
		t.Errorf("P95 = 1.3·P50 must give the same relative deviation")
	}
	// A truly linear server deviates nowhere.
	lin := func(_ context.Context, p Point) (Outcome, error) {
		bs, _ := p.Get("concurrency")
		cs, _ := p.Get("prompt-tokens")
		b, _ := strconv.ParseFloat(bs, 64)
		ctx, _ := strconv.ParseFloat(cs, 64)
		return Outcome{Summary: record.Summary{TTFT: record.Metric{Count: 1, P50: 5 + 0.002*b*ctx, P95: 6 + 0.003*b*ctx}}}, nil
	}
	res, _ = Run(context.Background(), Grid([]Param{c, x}), lin, Options{})
	cells, _ = LinearDeviation(res, "concurrency", "prompt-tokens")
	for _, c := range cells {
		if math.Abs(c.DevP50Pct) > 1e-6 || math.Abs(c.DevP95Pct) > 1e-6 {
			t.Fatalf("linear server: cell %vx%v deviates %.3g%%", c.X, c.Y, c.DevP50Pct)
		}
	}
	one, _ := ParseParam("concurrency=1,2")
	res, _ = Run(context.Background(), Grid([]Param{one, {Name: "prompt-tokens", Values: []string{"10"}}}), lin, Options{})
	if _, err := LinearDeviation(res, "concurrency", "nope"); err == nil {
		t.Error("missing param accepted")
	}
}

func TestSearchBisection(t *testing.T) {
	ctx := context.Background()
	threshold := 37.3
	res, err := Search(ctx, SearchOptions{Lo: 1, Hi: 128, Tolerance: 0.02}, func(_ context.Context, v float64) (bool, error) {
		return v <= threshold, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Best > threshold || res.Best < threshold*0.98 {
		t.Fatalf("best %v, want within 2%% below %v", res.Best, threshold)
	}
	res, _ = Search(ctx, SearchOptions{Lo: 1, Hi: 128, Integer: true}, func(_ context.Context, v float64) (bool, error) {
		return v <= threshold, nil
	})
	if res.Best != 37 {
		t.Fatalf("integer best %v, want 37", res.Best)
	}
	res, _ = Search(ctx, SearchOptions{Lo: 50, Hi: 128}, func(_ context.Context, v float64) (bool, error) { return v <= threshold, nil })
	if res.Best != 0 || res.Note == "" {
		t.Fatalf("lo failing: %+v", res)
	}
	res, _ = Search(ctx, SearchOptions{Lo: 1, Hi: 30}, func(_ context.Context, v float64) (bool, error) { return v <= threshold, nil })
	if res.Best != 30 || res.Note == "" {
		t.Fatalf("hi passing: %+v", res)
	}
	if _, err := Search(ctx, SearchOptions{Lo: 5, Hi: 5}, nil); err == nil {
		t.Error("empty bracket accepted")
	}
	res, _ = Search(ctx, SearchOptions{Lo: 1, Hi: 1000, Tolerance: 0.0001, MaxRuns: 6}, func(_ context.Context, v float64) (bool, error) { return v <= threshold, nil })
	if len(res.Probes) > 6 || res.Note == "" {
		t.Fatalf("run cap: %d probes, note %q", len(res.Probes), res.Note)
	}
}

// Near the boundary a noisy verdict is decided by a majority of repeats:
// with a pass probability that falls smoothly through 50% at the threshold,
// the answer lands near it far more often than a single-run search would.
func TestSearchRepeatsAtBoundary(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	noisy := func(_ context.Context, v float64) (bool, error) {
		p := 1 / (1 + math.Exp((v-40)/1.5))
		return rng.Float64() < p, nil
	}
	var runsUsed, close3 int
	for trial := 0; trial < 40; trial++ {
		res, err := Search(ctx, SearchOptions{Lo: 10, Hi: 80, Tolerance: 0.02, Repeats: 5, MaxRuns: 60}, noisy)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.Probes {
			runsUsed += p.Runs
			if p.Runs > 5 {
				t.Fatalf("probe ran %d times", p.Runs)
			}
		}
		if math.Abs(res.Best-40) <= 4 {
			close3++
		}
	}
	if close3 < 30 {
		t.Errorf("only %d of 40 noisy searches within ±4 of the threshold", close3)
	}
	if runsUsed <= 40*10 {
		t.Errorf("repeats not used near the boundary (%d runs)", runsUsed)
	}
}

func TestEarlySaturation(t *testing.T) {
	t0 := time.Unix(0, 0)
	mk := func(n int, ttft, lag func(i int) float64) []record.Record {
		var recs []record.Record
		for i := 0; i < n; i++ {
			recs = append(recs, record.Record{Sent: t0.Add(time.Duration(i) * 100 * time.Millisecond), TTFTMs: ttft(i), ScheduleLagMs: lag(i)})
		}
		return recs
	}
	flat := func(int) float64 { return 50 }
	zero := func(int) float64 { return 0 }
	if EarlySaturation(mk(59, func(i int) float64 { return float64(10 * i * i) }, zero)) != "" {
		t.Error("flagged with too few requests")
	}
	if EarlySaturation(mk(100, flat, zero)) != "" {
		t.Error("steady run flagged")
	}
	if EarlySaturation(mk(100, func(i int) float64 { return 50 + 10*float64(i) }, zero)) == "" {
		t.Error("TTFT growing 20x not flagged")
	}
	// A start-up transient that levels off is not an unbounded queue.
	if why := EarlySaturation(mk(100, func(i int) float64 { return 50 + 400*math.Min(float64(i), 40)/40 }, zero)); why != "" {
		t.Errorf("levelled-off transient flagged: %s", why)
	}
	// Growing but modestly (x1.5): a slow server, not an unbounded queue.
	if EarlySaturation(mk(100, func(i int) float64 { return 100 + float64(i) }, zero)) != "" {
		t.Error("modest growth flagged")
	}
	if EarlySaturation(mk(100, flat, func(i int) float64 { return 30 * float64(i) })) == "" {
		t.Error("schedule lag growing to 3 s not flagged")
	}
	// A stopped point is reported as saturated.
	p, _ := ParseParam("concurrency=1,2")
	res, _ := Run(context.Background(), Grid([]Param{p}), func(_ context.Context, p Point) (Outcome, error) {
		return Outcome{StoppedEarly: "queue grows"}, nil
	}, Options{StopOnSaturation: true})
	if res[0].Saturated != "queue grows (stopped early)" || !res[1].Skipped {
		t.Fatalf("%+v", res)
	}
}

package report

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// fakeRun makes a deterministic run: n requests, TTFT ≈ base ms plus an
// exponential tail, growing with the turn (multi-turn drift), ITL ≈ itl ms.
func fakeRun(name string, n int, seed uint64, base, itl float64, labels map[string]string) Run {
	rng := rand.New(rand.NewPCG(seed, 11))
	recs := make([]record.Record, n)
	for i := range recs {
		sent := t0.Add(time.Duration(i) * 40 * time.Millisecond)
		turn := 1 + i%5
		ttft := base*(1+0.05*float64(turn-1)) + rng.ExpFloat64()*base/6
		gaps := make([]float64, 8)
		for j := range gaps {
			gaps[j] = itl * (0.8 + 0.4*rng.Float64())
		}
		r := record.Record{Index: i, Source: "sim", Model: "llama", Target: "sim://a100", Turn: turn, Session: fmt.Sprint(i / 5),
			Intended: sent, Sent: sent, FirstToken: sent.Add(time.Duration(ttft * 1e6)), End: sent.Add(time.Duration((ttft + 8*itl) * 1e6)),
			ITLMs: gaps, OutputEvents: 9, PromptTokens: 128, Status: 200}
		if i%50 == 7 {
			r.ErrorClass, r.FirstToken, r.ITLMs = record.ErrTimeout, time.Time{}, nil
		}
		r.Finalize()
		recs[i] = r
	}
	sum := stats.Summarize(recs, stats.SummaryOptions{Source: "sim", Model: "llama", Target: "sim://a100", Seed: 1, NoCI: true})
	sum.SLO = []record.SLOVerdict{{Name: "ttft_p95", Metric: "ttft", Statistic: "p95", LimitMs: 120, ValueMs: sum.TTFT.P95, MarginMs: 120 - sum.TTFT.P95, Pass: sum.TTFT.P95 <= 120}}
	return Run{Name: name, Summary: sum, Records: recs, Labels: labels}
}

// sweepRuns is a 2 × 2 batch × context sweep plus concurrency labels.
func sweepRuns(n int) []Run {
	var runs []Run
	seed := uint64(1)
	for _, b := range []int{8, 16} {
		for _, ctx := range []int{1024, 2048} {
			base := 30 + 0.002*float64(b*ctx)
			runs = append(runs, fakeRun(fmt.Sprintf("b%d-c%d", b, ctx), n, seed, base, 9+float64(b)/8,
				map[string]string{"batch": fmt.Sprint(b), "context": fmt.Sprint(ctx), "concurrency": fmt.Sprint(b)}))
			seed++
		}
	}
	return runs
}

var paretoPoints = []stats.ParetoPoint{
	{Name: "A10G x1 bs=8", Cost: 12.7, Latency: 95},
	{Name: "L4 x1 bs=16", Cost: 9.3, Latency: 130},
	{Name: "A100 x1 bs=32", Cost: 15, Latency: 140},
}

// Error messages of failingRun, one per class.
const (
	timeoutMsg = `Post "http://gpu-7:8000/v1/chat/completions": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`
	statusMsg  = `HTTP 503: {"error":"model is overloaded"}`
)

// failingRun is fakeRun with failed of its first 100 requests (and the same
// share after) failing: mostly timeouts, the rest HTTP 503s. Failed
// requests end when they fail and have no first token.
func failingRun(name string, n, failed int, seed uint64) Run {
	r := fakeRun(name, n, seed, 60, 10, nil)
	for i := range r.Records {
		rec := &r.Records[i]
		rec.ErrorClass, rec.Error = record.ErrNone, ""
		if i%100 >= failed {
			if rec.FirstToken.IsZero() { // fakeRun's own timeouts: make them complete
				rec.FirstToken = rec.Sent.Add(60 * time.Millisecond)
				rec.End = rec.FirstToken.Add(80 * time.Millisecond)
				rec.ITLMs = []float64{10, 10, 10, 10, 10, 10, 10, 10}
			}
			rec.Finalize()
			continue
		}
		rec.FirstToken, rec.ITLMs, rec.OutputEvents = time.Time{}, nil, 0
		if i%100 < failed*9/10 {
			rec.ErrorClass, rec.Error = record.ErrTimeout, timeoutMsg
			rec.End = rec.Sent.Add(2 * time.Second)
		} else {
			rec.ErrorClass, rec.Error, rec.Status = record.ErrHTTPStatus, statusMsg, 503
			rec.End = rec.Sent.Add(3 * time.Millisecond)
		}
		rec.Finalize()
	}
	r.Summary = stats.Summarize(r.Records, stats.SummaryOptions{Source: "sim", Model: "llama", Target: "sim://a100", Seed: 1, NoCI: true})
	r.Summary.SLO = []record.SLOVerdict{{Name: "ttft_p95", Metric: "ttft", Statistic: "p95", LimitMs: 120}}
	if t := r.Summary.JudgedTTFT(); t.Count > 0 {
		v := &r.Summary.SLO[0]
		v.ValueMs, v.MarginMs, v.Pass = t.P95, 120-t.P95, t.P95 <= 120
	}
	return r
}

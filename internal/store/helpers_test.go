package store

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// fakeRun builds a plausible run of n requests starting at start, with TTFT
// around baseMs; fixed seed so runs are reproducible.
func fakeRun(n int, seed uint64, baseMs float64, start time.Time) RunInput {
	rng := rand.New(rand.NewPCG(seed, 7))
	recs := make([]record.Record, n)
	for i := range recs {
		sent := start.Add(time.Duration(i) * 50 * time.Millisecond)
		ttft := baseMs + rng.ExpFloat64()*baseMs/5
		r := record.Record{
			Index: i, Source: "bench", Target: "http://127.0.0.1:8000", API: "openai", Model: "m",
			Scenario: "chat", Turn: 1 + i%3, Session: "s",
			Intended: sent, Sent: sent,
			FirstByte:    sent.Add(time.Duration(ttft * 0.9 * 1e6)),
			FirstToken:   sent.Add(time.Duration(ttft * 1e6)),
			End:          sent.Add(time.Duration((ttft + 200) * 1e6)),
			ITLMs:        []float64{10 + rng.Float64(), 11, 9.5},
			PromptTokens: 128, OutputTokensUsage: 20, OutputEvents: 20, Status: 200, FinishReason: "stop",
		}
		if i%17 == 5 {
			r.ErrorClass, r.Error, r.Status = record.ErrHTTPStatus, "503 overloaded", 503
			r.FirstToken, r.FirstByte = time.Time{}, time.Time{}
			r.ITLMs = nil
		}
		r.Finalize()
		recs[i] = r
	}
	sum := stats.Summarize(recs, stats.SummaryOptions{Source: "bench", Target: "http://127.0.0.1:8000", API: "openai", Model: "m", Scenario: "chat", Seed: 1, NoCI: true})
	return RunInput{
		Manifest: record.Manifest{Schema: record.ManifestSchema, Tool: "ttft", Command: "bench", Source: "bench",
			Target: "http://127.0.0.1:8000", Model: "m", Started: start, Labels: map[string]string{"concurrency": "4"}},
		Summary: sum,
		Records: recs,
	}
}

// sameJSON fails unless a and b marshal identically (times lose their
// monotonic reading and location in storage; JSON is the contract).
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(ja) != string(jb) {
		n := min(len(ja), len(jb), 400)
		t.Fatalf("%s differs after round trip:\n got %s\nwant %s", what, jb[:n], ja[:n])
	}
}

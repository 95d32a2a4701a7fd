package sim

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// chainSource is a multi-turn conversation: turn k+1 is only available after
// turn k's reply came back through Done, and its prompt grows by the reply.
type chainSource struct {
	mu    sync.Mutex
	cond  *sync.Cond
	turn  int
	ready bool
	turns int
	prev  []int
	got   []string
}

func newChain(turns int) *chainSource {
	c := &chainSource{turns: turns, ready: true}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *chainSource) Next(ctx context.Context) (*workload.Request, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.ready && c.turn < c.turns {
		c.cond.Wait()
	}
	if c.turn >= c.turns {
		return nil, io.EOF
	}
	c.ready = false
	toks := append(append([]int{}, c.prev...), make([]int, 40)...)
	for i := len(c.prev); i < len(toks); i++ {
		toks[i] = 1000 + c.turn*100 + i
	}
	c.prev = toks
	c.turn++
	return &workload.Request{Index: c.turn - 1, Tokens: toks, PromptTokens: len(toks), MaxTokens: 8, Session: "s1", Turn: c.turn}, nil
}

func (c *chainSource) Done(r *workload.Request, res workload.Result) {
	c.mu.Lock()
	c.got = append(c.got, res.Text)
	c.ready = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

func TestRunFeedbackMultiTurn(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", EnablePrefixCaching: true, MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	src := newChain(5)
	var recs []record.Record
	_, err = Run(context.Background(), d, src, RunOptions{Concurrency: 4, NextWait: 20 * time.Millisecond}, func(r *record.Record) error {
		recs = append(recs, *r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || len(src.got) != 5 {
		t.Fatalf("%d records, %d replies; want 5 turns", len(recs), len(src.got))
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Sent.Before(recs[i-1].End) {
			t.Errorf("turn %d sent before turn %d ended", i+1, i)
		}
		// Each turn re-sends the previous prompt: its full blocks hit.
		if want := (recs[i-1].PromptTokens / 16) * 16; recs[i].CachedPromptTokens != want {
			t.Errorf("turn %d cached %d tokens, want %d", i+1, recs[i].CachedPromptTokens, want)
		}
	}
	if src.got[0] == "" {
		t.Error("Done received an empty reply text")
	}
}

func TestRunDeterministicAndConserving(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 4, Jitter: 0.05, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	run := func() []record.Record {
		var recs []record.Record
		_, err := Run(context.Background(), d, &LengthSource{PromptTokens: 700, MaxTokens: 50}, RunOptions{Rate: 3, Requests: 300, Warmup: 10, Seed: 5}, func(r *record.Record) error {
			recs = append(recs, *r)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	a, b := run(), run()
	if len(a) != 310 {
		t.Fatalf("%d records, want 310", len(a))
	}
	warm := 0
	for i := range a {
		if a[i].TTFTMs != b[i].TTFTMs || a[i].E2EMs != b[i].E2EMs {
			t.Fatalf("record %d differs between identical runs", i)
		}
		if a[i].OutputTokensUsage != 50 || a[i].OutputEvents != 50 || len(a[i].ITLMs) != 49 {
			t.Fatalf("record %d: %d tokens, %d events, %d gaps; want 50/50/49", i, a[i].OutputTokensUsage, a[i].OutputEvents, len(a[i].ITLMs))
		}
		if a[i].Warmup {
			warm++
		}
	}
	if warm != 10 {
		t.Errorf("%d warm-up records, want 10", warm)
	}
}

// TestAdmitQueueOrdered: admissions come out in time order whatever order
// they were pushed in (the API delay grows with the requests in flight, so
// a later send can be due earlier), and equal times keep push order.
func TestAdmitQueueOrdered(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		var q admitQueue
		var want []time.Duration
		popped := 0
		for i := range 200 {
			d := time.Duration(rng.IntN(20)) * time.Millisecond
			q.push(d, &offlineReq{index: i})
			want = append(want, d)
			if rng.IntN(4) == 0 { // interleave pops, as the runner does
				q.pop()
				popped++
			}
		}
		var got []time.Duration
		prevIdx := map[time.Duration]int{}
		for q.len() > 0 {
			tm, _ := q.peek()
			o := q.pop()
			if len(got) > 0 && tm < got[len(got)-1] {
				t.Fatalf("trial %d: admission at %v after %v", trial, tm, got[len(got)-1])
			}
			if p, ok := prevIdx[tm]; ok && o.index < p {
				t.Fatalf("trial %d: equal times out of push order (%d after %d)", trial, o.index, p)
			}
			prevIdx[tm] = o.index
			got = append(got, tm)
		}
		if len(got)+popped != len(want) {
			t.Fatalf("trial %d: %d admitted + %d popped, pushed %d", trial, len(got), popped, len(want))
		}
	}
}

// TestCatalogRejectsNegativeAPIFactors: a user profile with a negative
// front-end factor is refused with the file and the field named.
func TestCatalogRejectsNegativeAPIFactors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("engines:\n  - {name: slowhost, api_overhead_ms: 20, api_inflight_ms: -1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := DefaultCatalog().LoadFile(p)
	if err == nil || !strings.Contains(err.Error(), "api_inflight_ms") || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("LoadFile: %v, want an error naming bad.yaml and api_inflight_ms", err)
	}
}

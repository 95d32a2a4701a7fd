package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// smallDeployment is a real deployment with its KV cache shrunk so that
// preemption and eviction happen in small tests.
func smallDeployment(t testing.TB, blocks, maxSeqs, budget int, prefix bool) *Deployment {
	t.Helper()
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", EnablePrefixCaching: prefix, MaxNumSeqs: maxSeqs, MaxNumBatchedTokens: budget, MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	d.NumBlocks = blocks
	d.MaxModelLen = min(d.MaxModelLen, blocks*d.BlockSize)
	return d
}

// checkKV verifies the block manager's invariants against the sequences
// that hold blocks.
func checkKV(t *testing.T, e *Engine) {
	t.Helper()
	k := e.kv
	want := make([]int32, k.numBlocks())
	for _, s := range e.running {
		seen := map[int32]bool{}
		held := 0
		for i, b := range s.blocks {
			if b < 0 {
				if e.d.Window == 0 || i >= s.numReleased {
					t.Fatalf("seq %d: block slot %d released (window %d, %d released)", s.ID, i, e.d.Window, s.numReleased)
				}
				continue
			}
			held++
			if seen[b] {
				t.Fatalf("seq %d holds block %d twice", s.ID, b)
			}
			seen[b] = true
			want[b]++
		}
		// A sliding window never holds more than W tokens' worth of blocks,
		// plus the partly filled blocks at either end and a speculative
		// step's look-ahead.
		if w := e.d.Window; w > 0 && held*d16(e) > w+3*d16(e) {
			t.Fatalf("seq %d holds %d blocks (%d tokens) with a %d-token window", s.ID, held, held*d16(e), w)
		}
		if need := (s.numComputed + d16(e) - 1) / d16(e); len(s.blocks) < need {
			t.Fatalf("seq %d computed %d tokens but holds only %d blocks", s.ID, s.numComputed, len(s.blocks))
		}
	}
	for _, s := range e.waiting[e.wHead:] {
		if len(s.blocks) != 0 {
			t.Fatalf("waiting seq %d holds %d blocks", s.ID, len(s.blocks))
		}
	}
	checkBlocks(t, k, want)
}

// checkBlocks checks the KV cache against the block references the
// running sequences hold (want): refcounts, the free list, the hash index
// and the prefix counters.
func checkBlocks(t *testing.T, k *kvCache, want []int32) {
	t.Helper()
	free := 0
	for b := range want {
		if k.ref[b] != want[b] {
			t.Fatalf("block %d refcount %d, held by %d sequences", b, k.ref[b], want[b])
		}
		if (k.ref[b] == 0) != k.inFree(int32(b)) {
			t.Fatalf("block %d: ref %d but inFree=%v", b, k.ref[b], k.inFree(int32(b)))
		}
		if k.inFree(int32(b)) {
			free++
		}
	}
	n := 0
	for b := k.queue.Front(); b >= 0; b = k.queue.Next(b) {
		n++
		if n > k.numBlocks() {
			t.Fatal("free list has a cycle")
		}
	}
	if n != free || k.numFree() != free {
		t.Fatalf("free list length %d, numFree %d, free blocks %d", n, k.numFree(), free)
	}
	for h, b := range k.cache {
		if !k.hashed[b] || k.hash[b] != h {
			t.Fatalf("cache entry %x points at block %d holding %x (hashed=%v)", h, b, k.hash[b], k.hashed[b])
		}
	}
	if k.hits > k.queries {
		t.Fatalf("prefix hits %d exceed queries %d", k.hits, k.queries)
	}
}

func d16(e *Engine) int { return e.d.BlockSize }

// TestEngineProperties drives random workloads (shared prefixes, tight KV,
// staggered arrivals) and checks after every step: KV blocks are never
// double-allocated and refcounts match holders, prefix hits never exceed
// queries, every request finishes (no starvation) with exactly its
// requested output (tokens conserved).
func TestEngineProperties(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			blocks := 40 + rng.IntN(200)
			d := smallDeployment(t, blocks, 2+rng.IntN(30), 64+rng.IntN(512), seed%3 != 0)
			if seed%4 == 0 {
				d.Config.Speculative = SpecConfig{NumSpeculativeTokens: 3, Acceptance: 0.6}
			}
			if seed%3 == 1 {
				d.Window = 16 + rng.IntN(200) // sliding-window retention
			}
			if seed%5 == 0 {
				d.Config.Scheduler, d.Config.DisableChunkedPrefill = "v0", true
				d.MaxNumBatchedTokens = max(d.MaxNumBatchedTokens, d.MaxModelLen)
			}
			e := NewEngine(d)
			prefixes := [][]int{randTokens(rng, 64), randTokens(rng, 200)}
			n := 30 + rng.IntN(60)
			var all []*Seq
			var arrivals []time.Duration
			at := time.Duration(0)
			for i := 0; i < n; i++ {
				plen := 1 + rng.IntN(min(600, d.MaxModelLen/2))
				toks := randTokens(rng, plen)
				if rng.IntN(2) == 0 {
					p := prefixes[rng.IntN(2)]
					copy(toks, p[:min(len(p), len(toks))])
				}
				s, err := e.NewSeq(plen, 1+rng.IntN(80), toks)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, s)
				at += time.Duration(rng.IntN(20)) * time.Millisecond
				arrivals = append(arrivals, at)
			}
			now, next := time.Duration(0), 0
			for steps := 0; ; steps++ {
				if steps > 200000 {
					t.Fatalf("no progress after %d steps: %d waiting, %d running", steps, e.NumWaiting(), e.NumRunning())
				}
				for next < len(all) && arrivals[next] <= now {
					e.Add(all[next], arrivals[next])
					next++
				}
				if !e.HasWork() {
					if next == len(all) {
						break
					}
					now = arrivals[next]
					continue
				}
				res := e.Step(now)
				if res.End <= now {
					t.Fatalf("step did not advance time")
				}
				now = res.End
				checkKV(t, e)
			}
			var gen int64
			for _, s := range all {
				if !s.Finished || s.Output != s.MaxTokens {
					t.Fatalf("seq %d: finished=%v output %d of %d", s.ID, s.Finished, s.Output, s.MaxTokens)
				}
				if s.FirstTokenAt < s.FirstScheduled || s.FirstScheduled < s.Arrival {
					t.Fatalf("seq %d: times out of order: arrival %v scheduled %v first %v", s.ID, s.Arrival, s.FirstScheduled, s.FirstTokenAt)
				}
				gen += int64(s.Output)
			}
			if st := e.Stats(); st.GenTokens != gen {
				t.Fatalf("engine counted %d generated tokens, sequences hold %d", st.GenTokens, gen)
			}
			t.Logf("%d requests, %d steps, %d preemptions, prefix hits %d of %d tokens", n, e.Stats().Steps, e.Stats().Preemptions, e.kv.hits, e.kv.queries)
			if e.kv.numFree() != e.kv.numBlocks() {
				t.Fatalf("%d of %d blocks free after all requests finished", e.kv.numFree(), e.kv.numBlocks())
			}
		})
	}
}

func randTokens(rng *rand.Rand, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = rng.IntN(100000)
	}
	return out
}

func TestPrefixCacheHitsAndEviction(t *testing.T) {
	d := smallDeployment(t, 64, 4, 2048, true)
	e := NewEngine(d)
	rng := rand.New(rand.NewPCG(1, 2))
	shared := randTokens(rng, 160) // 10 full blocks
	run := func(toks []int) *Seq {
		s, err := e.NewSeq(len(toks), 2, toks)
		if err != nil {
			t.Fatal(err)
		}
		e.Add(s, 0)
		for now := time.Duration(0); e.HasWork(); {
			now = e.Step(now).End
		}
		return s
	}
	a := run(shared)
	if a.CachedTokens != 0 {
		t.Fatalf("first request hit %d cached tokens", a.CachedTokens)
	}
	b := run(append(append([]int{}, shared...), 1, 2, 3))
	if b.CachedTokens != 160 {
		t.Fatalf("second request with the same 160-token prefix hit %d tokens, want 160", b.CachedTokens)
	}
	// The whole-prompt case still computes one token: hit capped at 144.
	c := run(shared)
	if c.CachedTokens != 144 {
		t.Fatalf("identical prompt hit %d tokens, want 144 (last block recomputed)", c.CachedTokens)
	}
	// Fill the cache with other prompts: the shared prefix is evicted (LRU).
	for i := 0; i < 6; i++ {
		run(randTokens(rng, 160))
	}
	if d := run(shared); d.CachedTokens != 0 {
		t.Fatalf("after eviction the prefix still hit %d tokens", d.CachedTokens)
	}
}

func TestEngineRefusals(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "llama-9-1t", GPU: "h100"}, "known models: "},
		{Config{Model: "llama-3-8b", GPU: "tpu-v9"}, "known GPUs: "},
		{Config{Model: "llama-3-70b", GPU: "a100-80gb"}, "weights need 141.1 GB per GPU, available 75.3 GB"},
		{Config{Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 3}, "does not divide"},
		{Config{Model: "llama-3-8b", GPU: "l4", MaxModelLen: 100000}, "exceeds llama-3-8b's maximum"},
		{Config{Model: "llama-3-8b", GPU: "h100", Quantization: "int3"}, "unknown quantization"},
	}
	for _, tc := range tests {
		_, err := Resolve(nil, tc.cfg)
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%+v) = %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
	d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: "h100", MaxModelLen: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(d).NewSeq(1000, 10, nil); err == nil {
		t.Error("a prompt of max-model-len tokens was accepted")
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestSchedulerPolicies: v1 mixes a new prompt's prefill with running
// decodes in one step; v0 runs the prefill alone and the decode waits.
func TestSchedulerPolicies(t *testing.T) {
	for _, tc := range []struct {
		sched      string
		wantEmits  int // emits in the step that prefills the newcomer
		wantDecode bool
	}{{"v1", 2, true}, {"v0", 1, false}} {
		d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Scheduler: tc.sched, MaxModelLen: 4096})
		if err != nil {
			t.Fatal(err)
		}
		e := NewEngine(d)
		a, _ := e.NewSeq(100, 50, nil)
		e.Add(a, 0)
		now := e.Step(0).End // a's prefill
		now = e.Step(now).End
		b, _ := e.NewSeq(300, 5, nil)
		e.Add(b, now)
		res := e.Step(now)
		decoded := false
		for _, em := range res.Emits {
			if em.Seq == a {
				decoded = true
			}
		}
		if len(res.Emits) != tc.wantEmits || decoded != tc.wantDecode {
			t.Errorf("%s: step with a new prompt emitted %d (running seq decoded: %v), want %d (%v)", tc.sched, len(res.Emits), decoded, tc.wantEmits, tc.wantDecode)
		}
	}
	if _, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Scheduler: "v9"}); err == nil {
		t.Error("unknown scheduler accepted")
	}
}

// TestWaitingServedRatio checks TGI's router policy (the tgi profile): a
// prompt arriving at an idle engine is prefilled in the next step, one
// arriving while 4 sequences decode waits until 1.2 × 4 = 4 prompts wait
// or 20 decode steps have run; without the policy it goes at once.
func TestWaitingServedRatio(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ratio       float64
		maxWait     int
		newcomers   int
		wantDecodes int // decode steps before the newcomers' prefill
	}{
		{"off", 0, 0, 1, 0},
		{"one waits for max_waiting_tokens", 1.2, 20, 1, 20},
		{"enough waiting", 1.2, 20, 4, 0},
		{"ratio only, enough waiting", 1.2, 0, 4, 0},
		{"ratio only, one waits past 50 steps", 1.2, 0, 1, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Engine: "tgi", MaxModelLen: 4096})
			if err != nil {
				t.Fatal(err)
			}
			if d.Config.Scheduler != "v0" || d.Profile.WaitingServedRatio != 1.2 || d.Profile.MaxWaitingTokens != 20 {
				t.Fatalf("tgi profile: scheduler %q, ratio %g, max waiting %d; want v0, 1.2, 20", d.Config.Scheduler, d.Profile.WaitingServedRatio, d.Profile.MaxWaitingTokens)
			}
			d.Profile.WaitingServedRatio, d.Profile.MaxWaitingTokens = tc.ratio, tc.maxWait
			// Four prompts at an idle engine: prefilled in the first step.
			decodes := decodesBeforeNewcomers(t, NewEngine(d), 100, 200, 100, tc.newcomers)
			if decodes != tc.wantDecodes {
				t.Errorf("newcomers prefilled after %d decode steps, want %d", decodes, tc.wantDecodes)
			}
		})
	}
}

// decodesBeforeNewcomers starts four running sequences (prompt, output
// tokens) at an idle engine, then adds newcomers of newPrompt tokens and
// counts the decode steps before the first of them is prefilled (at most
// 50).
func decodesBeforeNewcomers(t *testing.T, e *Engine, prompt, output, newPrompt, newcomers int) int {
	t.Helper()
	for range 4 {
		s, _ := e.NewSeq(prompt, output, nil)
		e.Add(s, 0)
	}
	res := e.Step(0)
	if len(res.Emits) != 4 {
		t.Fatalf("idle engine: first step emitted %d first tokens, want 4", len(res.Emits))
	}
	now := res.End
	var fresh []*Seq
	for range newcomers {
		s, _ := e.NewSeq(newPrompt, 5, nil)
		e.Add(s, now)
		fresh = append(fresh, s)
	}
	decodes := 0
	for ; decodes < 50; decodes++ {
		res = e.Step(now)
		now = res.End
		if fresh[0].numComputed > 0 {
			break
		}
	}
	return decodes
}

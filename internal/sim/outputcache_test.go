package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/workload"
)

// TestOutputWordsRoundTrip: the output chain hashes a reply as the
// concatenation of its words' token IDs; that must be what the tokenizer
// makes of the whole reply text, as a next turn re-sends it, for the
// embedded tokenizers (one token per word, no merges across words).
func TestOutputWordsRoundTrip(t *testing.T) {
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		tok, err := workload.EmbeddedTokenizer(name)
		if err != nil {
			t.Fatal(err)
		}
		w := newOutputTokens(tok)
		for i, ids := range w.ids {
			if len(ids) != 1 {
				t.Errorf("%s: output word %q is %d tokens, want 1", name, outputWords[i], len(ids))
			}
		}
		for id := uint64(1); id <= 40; id++ {
			for _, n := range []int{1, 17, 300} {
				var want []int
				for i := 0; i < n; i++ {
					want = append(want, w.ids[wordIndex(id, i)]...)
				}
				if got := tok.Encode(OutputText(id, n)); !slices.Equal(got, want) {
					t.Fatalf("%s: seq %d, %d words: text tokenises to %d tokens, chain has %d", name, id, n, len(got), len(want))
				}
			}
		}
	}
}

// convSpec shapes convRun's workload: convs conversations of up to turns
// turns, replies of 1..maxOut tokens.
type convSpec struct {
	convs, turns, maxOut int
	single               bool // turns are unrelated prompts (no history)
	noOutputCache        bool // prompt blocks only (Engine.noOutputCache)
}

// convRun drives an engine directly with multi-turn conversations shaped as
// workload.Sessions shapes them: each turn's tokens are the previous turn's
// prompt, its reply re-tokenised (Encode(OutputText)), and a new user
// message. It returns each turn's CachedTokens (per conversation, per turn),
// the end time of every step and the engine; check runs after every step.
func convRun(t *testing.T, d *Deployment, seed uint64, spec convSpec, check func(*Engine)) (cached [][]int, ends []time.Duration, e *Engine) {
	t.Helper()
	tok := workload.DefaultTokenizer()
	e = NewEngine(d)
	e.noOutputCache = spec.noOutputCache
	// Each conversation draws from its own stream, so that runs whose
	// timings differ (caching on and off) still send the same lengths.
	type conv struct {
		rng  *rand.Rand
		toks []int
		cur  *Seq
		turn int
	}
	convs := make([]*conv, spec.convs)
	cached = make([][]int, spec.convs)
	for i := range convs {
		convs[i] = &conv{rng: rand.New(rand.NewPCG(seed, uint64(i)))}
	}
	now := time.Duration(0)
	for steps := 0; ; steps++ {
		if steps > 200000 {
			t.Fatal("no progress")
		}
		active := 0
		for i, c := range convs {
			if c.cur != nil && c.cur.Finished {
				cached[i] = append(cached[i], c.cur.CachedTokens)
				c.toks = append(c.toks, tok.Encode(OutputText(c.cur.ID, c.cur.Output))...)
				c.cur = nil
			}
			if c.cur == nil && c.turn < spec.turns {
				if spec.single {
					c.toks = c.toks[:0]
				}
				c.toks = append(c.toks, randTokens(c.rng, 1+c.rng.IntN(90))...)
				maxOut := 1 + c.rng.IntN(spec.maxOut)
				if len(c.toks)+maxOut >= d.MaxModelLen {
					c.turn = spec.turns // the conversation is full
					continue
				}
				s, err := e.NewSeq(len(c.toks), maxOut, c.toks)
				if err != nil {
					t.Fatal(err)
				}
				e.Add(s, now)
				c.cur = s
				c.turn++
			}
			if c.cur != nil {
				active++
			}
		}
		if active == 0 {
			break
		}
		res := e.Step(now)
		if res.End <= now {
			t.Fatal("step did not advance time")
		}
		now = res.End
		ends = append(ends, now)
		check(e)
	}
	if e.kv.numFree() != e.kv.numBlocks() {
		t.Fatalf("%d of %d blocks free at the end", e.kv.numFree(), e.kv.numBlocks())
	}
	return cached, ends, e
}

// checkChainKV is checkKV (or checkEvictKV) plus: every block a running
// sequence holds in a hashed slot carries the hash of that slot's place in
// the sequence's chain, output slots included, so no registration points at
// a block whose content (after preemption and reuse) is something else.
func checkChainKV(t *testing.T, e *Engine) {
	t.Helper()
	if e.evicted != nil {
		checkEvictKV(t, e)
	} else {
		checkKV(t, e)
	}
	k := e.kv
	for _, s := range e.running {
		if s.numHashedBlocks > len(s.hashes) {
			t.Fatalf("seq %d: %d hashed blocks, chain has %d", s.ID, s.numHashedBlocks, len(s.hashes))
		}
		for j := 0; j < s.numHashedBlocks && j < len(s.blocks); j++ {
			if b := s.blocks[j]; b >= 0 && k.hashed[b] && k.hash[b] != s.hashes[j] {
				t.Fatalf("seq %d slot %d: block %d registered as %x, chain says %x", s.ID, j, b, k.hash[b], s.hashes[j])
			}
		}
		if s.numHashedBlocks*k.blockSize > s.numComputed {
			t.Fatalf("seq %d: %d blocks registered beyond its %d computed tokens", s.ID, s.numHashedBlocks, s.numComputed)
		}
	}
}

// withoutOutputCache is spec run on an engine that caches prompt blocks
// only.
func withoutOutputCache(spec convSpec) convSpec {
	spec.noOutputCache = true
	return spec
}

// TestOutputCachingProperties (fixed seeds): on conversations with a KV
// pool that holds them all (so that caching more cannot evict anything),
// every turn's cached prompt tokens with output caching are ≥ without, in
// whole blocks, and more in some turn; for single-turn workloads, under KV
// pressure with preemption, the two runs are identical step by step (same
// step end times, same cached tokens). TestOutputCachingExact pins the
// amount.
func TestOutputCachingProperties(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			d := smallDeployment(t, 4000, 8, 512, true)
			bs := d.BlockSize
			spec := convSpec{convs: 6, turns: 5, maxOut: 120}
			var on, off [][]int
			check := func(e *Engine) { checkChainKV(t, e) }
			on, _, _ = convRun(t, d, seed, spec, check)
			off, _, _ = convRun(t, d, seed, withoutOutputCache(spec), check)
			more := 0
			for c := range on {
				if len(on[c]) != len(off[c]) {
					t.Fatalf("conv %d: %d turns on, %d off", c, len(on[c]), len(off[c]))
				}
				for i := range on[c] {
					if on[c][i] < off[c][i] {
						t.Errorf("conv %d turn %d: %d cached tokens with output caching, %d without", c, i+1, on[c][i], off[c][i])
					}
					if on[c][i] > off[c][i] {
						more++
					}
					if on[c][i]%bs != 0 {
						t.Errorf("conv %d turn %d: %d cached tokens, not whole blocks", c, i+1, on[c][i])
					}
				}
				if on[c][0] != 0 || off[c][0] != 0 {
					t.Errorf("conv %d: first turn cached %d/%d tokens with nothing before it", c, on[c][0], off[c][0])
				}
			}
			if more == 0 {
				t.Error("output caching never added a cached token: the workload does not exercise it")
			}

			// Single turn, small pool: preemption and LRU eviction.
			ds := smallDeployment(t, 48, 6, 256, true)
			single := convSpec{convs: 8, turns: 6, maxOut: 200, single: true}
			var sOn, sOff [][]int
			var eOn, eOff []time.Duration
			var pre int64
			var e *Engine
			sOn, eOn, e = convRun(t, ds, seed, single, check)
			pre = e.Stats().Preemptions
			sOff, eOff, _ = convRun(t, ds, seed, withoutOutputCache(single), check)
			if !slices.Equal(eOn, eOff) {
				t.Errorf("single-turn step times differ with output caching (%d vs %d steps)", len(eOn), len(eOff))
			}
			for c := range sOn {
				if !slices.Equal(sOn[c], sOff[c]) {
					t.Errorf("single-turn conv %d: cached %v with output caching, %v without", c, sOn[c], sOff[c])
				}
			}
			if seed == 1 && pre == 0 {
				t.Error("single-turn workload did not preempt: it does not exercise preemption")
			}
		})
	}
}

// TestOutputCachingExact: one conversation on an idle engine; turn k+1
// hits exactly the full blocks of turn k's prompt and computed reply.
func TestOutputCachingExact(t *testing.T) {
	d := smallDeployment(t, 4000, 4, 512, true)
	tok := workload.DefaultTokenizer()
	e := NewEngine(d)
	bs := d.BlockSize
	rng := rand.New(rand.NewPCG(3, 3))
	toks := randTokens(rng, 70)
	now := time.Duration(0)
	prevComputed := 0
	for turn := 1; turn <= 4; turn++ {
		s, err := e.NewSeq(len(toks), 45, toks)
		if err != nil {
			t.Fatal(err)
		}
		e.Add(s, now)
		for !s.Finished {
			now = e.Step(now).End
			checkChainKV(t, e)
		}
		want := min(prevComputed/bs, (len(toks)-1)/bs) * bs
		if s.CachedTokens != want {
			t.Errorf("turn %d: %d cached tokens, want %d (previous turn computed %d)", turn, s.CachedTokens, want, prevComputed)
		}
		if turn > 1 && want <= (len(toks)-45-20)/bs*bs {
			t.Fatalf("turn %d: expectation %d does not reach into the reply", turn, want)
		}
		prevComputed = s.numComputed
		toks = append(toks, tok.Encode(OutputText(s.ID, s.Output))...)
		toks = append(toks, randTokens(rng, 20)...)
	}
}

// TestOutputCachingInvariants: KV invariants with output blocks cached
// under KV pressure (preemption by recompute, LRU eviction), with a
// sliding window, and under evict:F (where output blocks are eviction
// candidates like prompt blocks).
func TestOutputCachingInvariants(t *testing.T) {
	var preemptions int64
	for _, tc := range []struct {
		name   string
		window int
		evict  float64
	}{{"lru", 0, 0}, {"sliding", 96, 0}, {"evict", 0, 0.5}} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("%s/%d", tc.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 41))
				d := smallDeployment(t, 60+rng.IntN(60), 2+rng.IntN(6), 64+rng.IntN(400), true)
				d.Window, d.Evict = tc.window, tc.evict
				spec := convSpec{convs: 3 + rng.IntN(5), turns: 4, maxOut: 100}
				_, _, e := convRun(t, d, seed, spec, func(e *Engine) { checkChainKV(t, e) })
				preemptions += e.Stats().Preemptions
				if tc.evict > 0 && len(e.evicted) == 0 {
					t.Error("evict:F dropped nothing")
				}
			})
		}
	}
	if preemptions == 0 {
		t.Error("no preemption over all runs: the test needs some")
	}
}

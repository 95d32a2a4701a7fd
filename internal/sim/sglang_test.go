package sim

import (
	"math"
	"testing"
	"time"
)

// sglangDeployment is the sglang profile (as shipped) on a cache of the
// given blocks, with a step budget.
func sglangDeployment(t *testing.T, blocks, budget int) *Deployment {
	t.Helper()
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Engine: "sglang", MaxNumBatchedTokens: budget, MaxNumSeqs: min(2048, budget), MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	d.NumBlocks = blocks
	d.MaxModelLen = min(d.MaxModelLen, blocks*d.BlockSize)
	return d
}

// TestSGLangProfile: the sglang profile carries SGLang's scheduler
// defaults (global_config, server_args): new_token_ratio 0.7 decaying to
// 0.7 × 0.14 over 600 decode steps, 20 retract steps, at least 2048
// running requests, prefill steps apart from decodes with long prompts
// chunked at chunked_prefill_size (2048 under 35 GiB, 8192 under 160 GiB,
// else 16384).
func TestSGLangProfile(t *testing.T) {
	p, err := DefaultCatalog().Engine("sglang")
	if err != nil {
		t.Fatal(err)
	}
	if p.InitNewTokenRatio != 0.7 || math.Abs(p.MinNewTokenRatio-0.7*0.14) > 1e-12 || p.NewTokenRatioDecaySteps != 600 || p.RetractDecodeSteps != 20 {
		t.Errorf("new_token_ratio %g → %g over %g steps, retract %d; want 0.7 → 0.098 over 600, 20",
			p.InitNewTokenRatio, p.MinNewTokenRatio, p.NewTokenRatioDecaySteps, p.RetractDecodeSteps)
	}
	for _, tc := range []struct {
		gpu        string
		wantBudget int
	}{
		{"rtx-4090", 2048},
		{"a100-80gb", 8192},
		{"h100-sxm", 8192},
		{"mi300x", 16384},
	} {
		d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: tc.gpu, Engine: "sglang", MaxModelLen: 32768})
		if err != nil {
			t.Fatal(err)
		}
		if d.MaxNumBatchedTokens != tc.wantBudget || d.MaxNumSeqs != 2048 || d.Config.Scheduler != "v0" {
			t.Errorf("%s: budget %d, %d seqs, scheduler %s; want %d, 2048, v0", tc.gpu, d.MaxNumBatchedTokens, d.MaxNumSeqs, d.Config.Scheduler, tc.wantBudget)
		}
	}
}

// TestSGLangAdmission: a burst is admitted while each prompt plus its
// max_tokens fits in the free KV tokens less what is reserved for those
// admitted before it — not, as vLLM admits, while the prompts' blocks fit.
func TestSGLangAdmission(t *testing.T) {
	const blocks, prompt, out = 200, 100, 300 // 3200 tokens; 400 per request
	for _, tc := range []struct {
		name      string
		sglang    bool
		wantFirst int // requests in the first prefill step
	}{
		{"vllm v0 admits on the prompt's blocks", false, 200 / 7},
		{"sglang reserves prompt + max_tokens", true, 3200/(prompt+out) - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sglangDeployment(t, blocks, 8192)
			if !tc.sglang {
				d.Profile.InitNewTokenRatio = 0
				d.Profile.PrefillChunks = false
			}
			e := NewEngine(d)
			for range 40 {
				s, err := e.NewSeq(prompt, out, nil)
				if err != nil {
					t.Fatal(err)
				}
				e.Add(s, 0)
			}
			r := e.Step(0)
			if r.Seqs != tc.wantFirst {
				t.Errorf("first step took %d requests, want %d", r.Seqs, tc.wantFirst)
			}
			now := r.End
			for steps := 0; e.HasWork(); steps++ {
				if steps > 100000 {
					t.Fatal("burst never drained")
				}
				checkKV(t, e)
				now = e.Step(now).End
			}
		})
	}
}

// TestSGLangNewTokenRatio: the reserved share of running requests' output
// decays by (init − min)/600 per decode step down to min, is re-estimated
// when a decode step finds no room (retraction) and returns to init when
// the engine idles.
func TestSGLangNewTokenRatio(t *testing.T) {
	d := sglangDeployment(t, 1000, 8192)
	p := d.Profile
	decay := (p.InitNewTokenRatio - p.MinNewTokenRatio) / p.NewTokenRatioDecaySteps
	e := NewEngine(d)
	s, _ := e.NewSeq(100, 1000, nil)
	e.Add(s, 0)
	now := e.Step(0).End // prefill
	for k := 1; k <= 700; k++ {
		now = e.Step(now).End
		want := math.Max(p.InitNewTokenRatio-float64(k)*decay, p.MinNewTokenRatio)
		if math.Abs(e.newTokenRatio-want) > 1e-9 {
			t.Fatalf("after %d decode steps ratio %g, want %g", k, e.newTokenRatio, want)
		}
	}
	for e.HasWork() {
		now = e.Step(now).End
	}
	s2, _ := e.NewSeq(100, 10, nil)
	e.Add(s2, now)
	if e.newTokenRatio != p.InitNewTokenRatio {
		t.Errorf("after idling ratio %g, want init %g", e.newTokenRatio, p.InitNewTokenRatio)
	}
}

// TestSGLangRetract: when the running requests outgrow the cache, a decode
// step retracts those with the fewest output tokens (to the back of the
// queue) until the rest have room for 20 more tokens each, and the ratio
// becomes (their outputs + 20 each) / their max_tokens.
func TestSGLangRetract(t *testing.T) {
	d := sglangDeployment(t, 38, 8192) // 608 tokens
	e := NewEngine(d)
	// Admitted by hand, as if an earlier, looser estimate had let them in.
	var seqs []*Seq
	for i := range 4 {
		s, _ := e.NewSeq(16*9, 400, nil) // 9 blocks of prompt each
		e.Add(s, 0)
		e.popWaiting()
		e.start(s, 0, 0, 0, s.PromptLen)
		e.batch = e.batch[:0]
		e.compute(s, s.PromptLen)
		s.Output = i // different progress: seq 0 has the fewest outputs
		seqs = append(seqs, s)
	}
	// 36 of 38 blocks held, 2 free: the four requests need one block each
	// for their next token, their prompts filling their blocks.
	later, _ := e.NewSeq(10, 10, nil)
	e.Add(later, 0)
	r := e.Step(0)
	if r.Preempted == 0 {
		t.Fatalf("no retraction with %d free blocks for 4 requests needing %d", e.kv.numFree(), e.decodeBlocks())
	}
	if seqs[0].Preemptions != 1 || seqs[3].Preemptions != 0 {
		t.Errorf("retracted %v, want the fewest outputs first (seq 0) and never the most (seq 3)",
			[]int{seqs[0].Preemptions, seqs[1].Preemptions, seqs[2].Preemptions, seqs[3].Preemptions})
	}
	if q := e.waiting[len(e.waiting)-1]; q.Preemptions == 0 {
		t.Errorf("queue ends with an unretracted request: retracted ones go to the back")
	}
	if len(e.running) != 3 {
		t.Errorf("%d running after retraction, want 3 (one retraction frees 9 blocks: room for 20 tokens each)", len(e.running))
	}
	out, maxNew := 0, 0
	for _, s := range e.running {
		out += s.Output - 1 // this step's token came after the estimate
		maxNew += s.MaxTokens
	}
	want := float64(out+20*len(e.running)) / float64(maxNew)
	if math.Abs(e.newTokenRatio-want) > 1e-9 {
		t.Errorf("ratio after retraction %g, want %g", e.newTokenRatio, want)
	}
	checkKV(t, e)
}

// TestSGLangPrefillChunks: a prompt longer than the budget is prefilled in
// budget-sized chunks over consecutive prefill-only steps; the running
// request does not decode until the chunked prompt is done.
func TestSGLangPrefillChunks(t *testing.T) {
	d := sglangDeployment(t, 1000, 512)
	e := NewEngine(d)
	a, _ := e.NewSeq(100, 50, nil)
	e.Add(a, 0)
	now := e.Step(0).End
	long, _ := e.NewSeq(1300, 10, nil)
	e.Add(long, now)
	var sizes []int
	for range 3 {
		r := e.Step(now)
		now = r.End
		sizes = append(sizes, r.Tokens)
		if r.Seqs != 1 {
			t.Fatalf("step with %d sequences during the chunked prefill, want the prompt alone", r.Seqs)
		}
	}
	if sizes[0] != 512 || sizes[1] != 512 || sizes[2] != 1300-1024 {
		t.Errorf("chunks %v, want [512 512 276]", sizes)
	}
	if long.Output != 1 || a.Output != 1 {
		t.Errorf("outputs %d, %d after the chunks; want 1 and 1 (no decode in between)", long.Output, a.Output)
	}
	if r := e.Step(now); r.Seqs != 2 || r.Tokens != 2 {
		t.Errorf("next step: %d sequences, %d tokens; want a decode of both", r.Seqs, r.Tokens)
	}
}

// TestVLLMBatchDefaults: vLLM's API server (≥ 0.9) batches 8192 tokens and
// 1024 requests per step on GPUs of ≥ 70 GiB other than the A100, else
// 2048 and 256; a deployment's own limits win.
func TestVLLMBatchDefaults(t *testing.T) {
	for _, tc := range []struct {
		gpu              string
		seqs, budget     int
		wantSeqs, wantBt int
	}{
		{"h100-sxm", 0, 0, 1024, 8192},
		{"h200", 0, 0, 1024, 8192},
		{"a100-80gb", 0, 0, 256, 2048},
		{"l4", 0, 0, 256, 2048},
		{"h100-sxm", 128, 4096, 128, 4096},
	} {
		d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: tc.gpu, Engine: "vllm", MaxModelLen: 8192, MaxNumSeqs: tc.seqs, MaxNumBatchedTokens: tc.budget})
		if err != nil {
			t.Fatal(err)
		}
		if d.MaxNumSeqs != tc.wantSeqs || d.MaxNumBatchedTokens != tc.wantBt {
			t.Errorf("%s (set %d/%d): %d seqs, %d tokens; want %d, %d", tc.gpu, tc.seqs, tc.budget, d.MaxNumSeqs, d.MaxNumBatchedTokens, tc.wantSeqs, tc.wantBt)
		}
	}
}

// TestSGLangDrains: under SGLang's scheduler every request finishes with
// its full output and the block accounting holds at every step, through
// retractions (a cache too small for the outputs), chunked prompts and
// staggered arrivals.
func TestSGLangDrains(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		blocks, budget, n     int
		prompt, out, arriveNs int
		retract               int // 1: some, 0: none, -1: either
	}{
		{"burst outgrows the cache", 60, 2048, 30, 100, 200, 0, 1},
		{"long prompts chunked", 400, 256, 12, 900, 40, 0, 0},
		{"staggered arrivals", 120, 512, 40, 150, 120, 3_000_000, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sglangDeployment(t, tc.blocks, tc.budget)
			e := NewEngine(d)
			var seqs []*Seq
			var now, next int64
			added := 0
			for steps := 0; added < tc.n || e.HasWork(); steps++ {
				if steps > 1_000_000 {
					t.Fatal("never drained")
				}
				for added < tc.n && next <= now {
					s, err := e.NewSeq(tc.prompt+added%7, tc.out-added%5, nil)
					if err != nil {
						t.Fatal(err)
					}
					e.Add(s, durationNs(now))
					seqs = append(seqs, s)
					added++
					next += int64(tc.arriveNs)
				}
				if !e.HasWork() {
					now = next
					continue
				}
				r := e.Step(durationNs(now))
				if r.Seqs == 0 {
					t.Fatalf("step %d scheduled nothing with %d running, %d waiting", steps, e.NumRunning(), e.NumWaiting())
				}
				now = int64(r.End)
				checkKV(t, e)
			}
			for _, s := range seqs {
				if !s.Finished || s.Output != s.MaxTokens {
					t.Fatalf("seq %d: finished %v with %d of %d tokens", s.ID, s.Finished, s.Output, s.MaxTokens)
				}
			}
			if pre := e.Stats().Preemptions; tc.retract >= 0 && (pre > 0) != (tc.retract == 1) {
				t.Errorf("%d retractions, want some: %v", pre, tc.retract == 1)
			}
		})
	}
}

func durationNs(ns int64) time.Duration { return time.Duration(ns) }

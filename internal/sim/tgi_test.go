package sim

import "testing"

// TestPrefillBatchTokens checks TGI's prefill budget (the tgi profile's
// prefill_batch_tokens, its launcher's max_batch_prefill_tokens): whole
// prompts FCFS within 4096 tokens per prefill batch, apart from the step
// budget; a longer prompt alone; a deployment's own budget instead of the
// profile's.
func TestPrefillBatchTokens(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cap       int // profile's prefill_batch_tokens (-1: keep the tgi profile's)
		budget    int // the deployment's --max-num-batched-tokens (0: default)
		prompts   []int
		wantFirst int // prompts prefilled by the first step at an idle engine
	}{
		{"two 2000-token prompts fit 4096", -1, 0, []int{2000, 2000, 2000, 2000}, 2},
		{"a prompt above the cap runs alone", -1, 0, []int{6000, 100, 100}, 1},
		{"small prompts fill the cap", -1, 0, []int{1000, 1000, 1000, 1000, 1000}, 4},
		{"no cap: the step budget", 0, 0, []int{2000, 2000, 2000, 2000}, 4},
		{"the deployment's budget wins", -1, 8192, []int{2000, 2000, 2000, 2000}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Engine: "tgi", MaxModelLen: 8192, MaxNumBatchedTokens: tc.budget})
			if err != nil {
				t.Fatal(err)
			}
			if d.Profile.PrefillBatchTokens != 4096 || !d.Profile.GuaranteedNoEvict {
				t.Fatalf("tgi profile: prefill_batch_tokens %d, guaranteed_no_evict %v; want TGI's 4096 and true", d.Profile.PrefillBatchTokens, d.Profile.GuaranteedNoEvict)
			}
			if tc.cap >= 0 {
				d.Profile.PrefillBatchTokens = tc.cap
			}
			e := NewEngine(d)
			for _, n := range tc.prompts {
				s, err := e.NewSeq(n, 50, nil)
				if err != nil {
					t.Fatal(err)
				}
				e.Add(s, 0)
			}
			res := e.Step(0)
			if len(res.Emits) != tc.wantFirst {
				t.Errorf("first step prefilled %d prompts (%d tokens), want %d", len(res.Emits), res.Tokens, tc.wantFirst)
			}
			// Everything drains: the cap never strands a prompt.
			now := res.End
			for i := 0; e.HasWork(); i++ {
				if i > 10000 {
					t.Fatal("engine did not drain")
				}
				now = e.Step(now).End
			}
		})
	}
}

// TestPrefillBatchTokensThrottle checks what the cap does to TGI's waiting
// policy: with 4 sequences decoding, a prefill needs floor(1.2 × 4) = 4
// waiting prompts inside one batch; 2000-token prompts fit two to a
// 4096-token batch, so newcomers wait for max_waiting_tokens (20) decode
// steps, where an uncapped batch takes them at once.
func TestPrefillBatchTokensThrottle(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cap         int
		newcomers   int
		prompt      int
		wantDecodes int
	}{
		{"capped: two fit, four needed", 4096, 5, 2000, 20},
		{"uncapped: four fit", 0, 5, 2000, 0},
		{"capped, short prompts: four fit", 4096, 5, 500, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Engine: "tgi", MaxModelLen: 8192})
			if err != nil {
				t.Fatal(err)
			}
			d.Profile.PrefillBatchTokens = tc.cap
			decodes := decodesBeforeNewcomers(t, NewEngine(d), 100, 500, tc.prompt, tc.newcomers)
			if decodes != tc.wantDecodes {
				t.Errorf("newcomers prefilled after %d decode steps, want %d", decodes, tc.wantDecodes)
			}
		})
	}
}

// TestV0WholePromptBudget checks the default step budget of the v0
// scheduler without chunks: vLLM V0's max(max_model_len, 2048) on every
// GPU (SchedulerConfig with chunked prefill off), where V1, TensorRT-LLM,
// lmdeploy and SGLang keep their per-GPU-size defaults.
func TestV0WholePromptBudget(t *testing.T) {
	for _, tc := range []struct {
		engine, model, gpu string
		want               int
	}{
		{"vllm-v0", "llama-2-7b", "h100-sxm", 4096}, // was 8192: the V1 API server's ≥ 70 GiB default
		{"vllm-v0", "llama-2-7b", "rtx-3090", 4096},
		{"vllm-v0", "llama-3-8b", "h100-sxm", 8192},
		{"vllm-v0", "gpt-j-6b", "a100-80gb", 2048},
		{"tgi", "llama-2-7b", "h100-sxm", 4096},
		{"vllm", "llama-2-7b", "h100-sxm", 8192},
		{"trtllm", "llama-2-7b", "h100-sxm", 8192},
		{"lmdeploy", "llama-2-7b", "a100-80gb", 8192},
		{"sglang", "llama-2-7b", "h100-sxm", 8192},
	} {
		d, err := Resolve(nil, Config{Model: tc.model, GPU: tc.gpu, Engine: tc.engine})
		if err != nil {
			t.Fatalf("%s %s %s: %v", tc.engine, tc.model, tc.gpu, err)
		}
		if d.MaxNumBatchedTokens != tc.want {
			t.Errorf("%s %s on %s: step budget %d, want %d", tc.engine, tc.model, tc.gpu, d.MaxNumBatchedTokens, tc.want)
		}
	}
}

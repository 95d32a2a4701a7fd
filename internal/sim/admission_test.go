package sim

import (
	"math"
	"testing"
)

// TestGuaranteedNoEvict: under TensorRT-LLM's default capacity scheduler a
// burst larger than the KV cache queues instead of preempting: no running
// sequence is ever evicted, and the blocks reserved for every running
// sequence's prompt + max_tokens never exceed the cache. vLLM's policy,
// on the same cache and burst, admits on the prompt alone and preempts.
func TestGuaranteedNoEvict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noEvict bool
		wantPre bool
	}{
		{"vllm policy preempts", false, true},
		{"guaranteed no evict", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := smallDeployment(t, 64, 256, 2048, false) // 1024 tokens of KV
			d.Profile.GuaranteedNoEvict = tc.noEvict
			e := NewEngine(d)
			var seqs []*Seq
			for range 12 {
				s, err := e.NewSeq(100, 200, nil) // 19 blocks each at the end
				if err != nil {
					t.Fatal(err)
				}
				e.Add(s, 0)
				seqs = append(seqs, s)
			}
			var now = e.Step(0).End
			maxRunning := 0
			for steps := 0; e.HasWork(); steps++ {
				if steps > 100000 {
					t.Fatal("burst never drained")
				}
				if tc.noEvict {
					reserved := 0
					for _, s := range e.running {
						reserved += e.blocksToFinish(s)
					}
					if reserved > d.NumBlocks {
						t.Fatalf("running sequences reserve %d blocks of %d", reserved, d.NumBlocks)
					}
				}
				maxRunning = max(maxRunning, len(e.running))
				checkKV(t, e)
				now = e.Step(now).End
			}
			for _, s := range seqs {
				if !s.Finished || s.Output != 200 {
					t.Fatalf("seq %d: finished %v with %d tokens, want 200", s.ID, s.Finished, s.Output)
				}
			}
			pre := e.Stats().Preemptions
			if (pre > 0) != tc.wantPre {
				t.Errorf("%d preemptions, want any: %v", pre, tc.wantPre)
			}
			if tc.noEvict && maxRunning != 64/19 {
				t.Errorf("at most %d running, want %d (whole requests that fit 64 blocks)", maxRunning, 64/19)
			}
		})
	}
}

// TestKVFreeFraction: lmdeploy and TensorRT-LLM size their KV cache as a
// fraction of the memory free after the weights; vLLM as its utilisation
// of the total less the weights. trtllm-serve batches up to 2048 requests
// by default, vLLM 256.
func TestKVFreeFraction(t *testing.T) {
	for _, engine := range []string{"vllm", "lmdeploy", "trtllm-serve"} {
		d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: "rtx-3090", Engine: engine, MaxModelLen: 8192})
		if err != nil {
			t.Fatal(err)
		}
		mem := d.GPU.UsableGB
		want := mem*0.9 - d.WeightGBGPU - d.Profile.ReserveGB
		if f := map[string]float64{"lmdeploy": 0.8, "trtllm-serve": 0.9}[engine]; f > 0 {
			// lmdeploy's cache_max_entry_count, TensorRT-LLM's
			// free_gpu_memory_fraction: shares of the memory left free.
			if d.Profile.KVFreeFraction != f {
				t.Fatalf("%s kv_free_fraction %g, want %g", engine, d.Profile.KVFreeFraction, f)
			}
			want = f * (mem - d.WeightGBGPU - d.Profile.ReserveGB)
		}
		if math.Abs(d.KVGBPerGPU-want) > 1e-9 {
			t.Errorf("%s: KV %.3f GB, want %.3f", engine, d.KVGBPerGPU, want)
		}
		wantSeqs := map[string]int{"trtllm-serve": 2048}[engine]
		if wantSeqs == 0 {
			wantSeqs = 256
		}
		if d.MaxNumSeqs != wantSeqs {
			t.Errorf("%s: max_num_seqs %d, want %d", engine, d.MaxNumSeqs, wantSeqs)
		}
	}
}

// TestKVWatermark: with vLLM V0's watermark a prompt waits while admitting
// it would leave fewer than watermark × blocks free (and others run);
// without it, it is admitted as soon as its blocks fit.
func TestKVWatermark(t *testing.T) {
	for _, tc := range []struct {
		watermark float64
		wantRun   int // sequences running after the newcomer's chance
	}{
		{0, 2},
		{0.1, 1}, // 10 of 100 blocks must stay free: 48 + 48 leaves 4
	} {
		d := smallDeployment(t, 100, 256, 8192, false)
		d.Config.Scheduler = "v0"
		d.Profile.KVWatermark = tc.watermark
		e := NewEngine(d)
		first, _ := e.NewSeq(48*16, 50, nil)
		e.Add(first, 0)
		now := e.Step(0).End
		second, _ := e.NewSeq(48*16, 50, nil)
		e.Add(second, now)
		e.Step(now)
		if got := e.NumRunning(); got != tc.wantRun {
			t.Errorf("watermark %g: %d running, want %d", tc.watermark, got, tc.wantRun)
		}
	}
	d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: "rtx-3090", Engine: "vllm-v0", MaxModelLen: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if d.Profile.KVWatermark != 0.01 {
		t.Errorf("vllm-v0 watermark %g, want vLLM V0's 0.01", d.Profile.KVWatermark)
	}
}

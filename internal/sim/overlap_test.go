package sim

import (
	"math"
	"testing"
)

// TestHostOverlap: with host_overlap a decode step's per-sequence and
// per-token host work runs under the GPU's kernels and shows only where it
// outlasts them; a step that starts prompts is prepared before it is
// launched and keeps its full cost; without the flag nothing changes.
func TestHostOverlap(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "gpt-j-6b", GPU: "h100-sxm", Quantization: "fp8", KVCacheDtype: "fp8", Engine: "trtllm-v05", MaxNumSeqs: 1024, MaxModelLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	const seqUs, tokUs = 5.0, 0.2
	prefill := stepLoad{tokens: 64 * 128, seqs: 64, attn: 64 * 128 * 64, prefill: true}
	for _, tc := range []struct {
		name    string
		seqUs   float64 // per-sequence host work
		load    stepLoad
		overlap bool
		// saved is the host work that no longer adds to the step:
		// "all" (hidden under the GPU), "none", or "gpu" (the host
		// outlasts the GPU: the step takes the host's time).
		saved string
	}{
		{"large decode batch, overlap", seqUs, decodeLoad(1024, 192), true, "all"},
		{"large decode batch, serial", seqUs, decodeLoad(1024, 192), false, "none"},
		{"prefill step, overlap", seqUs, prefill, true, "none"},
		{"host outlasts the GPU", 1000, decodeLoad(64, 256), true, "gpu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, off := *d, *d
			on.Profile.SeqOverheadUs, on.Profile.TokenOverheadUs, on.Profile.HostOverlap = tc.seqUs, tokUs, tc.overlap
			off.Profile.SeqOverheadUs, off.Profile.TokenOverheadUs, off.Profile.HostOverlap = tc.seqUs, tokUs, false
			a, b := on.stepTime(tc.load), off.stepTime(tc.load)
			host := float64(tc.load.seqs)*tc.seqUs*1e-6 + float64(tc.load.tokens)*tokUs*1e-6
			step := on.Profile.StepOverheadMs * 1e-3
			gpu := b.Total - step - host // kernels, all-reduces, per-layer work
			var want float64
			switch tc.saved {
			case "all":
				if host >= gpu {
					t.Fatalf("case needs host work (%.2f ms) under the GPU's (%.2f ms)", host*1e3, gpu*1e3)
				}
				want = b.Total - host
			case "none":
				want = b.Total
			case "gpu":
				if host <= gpu {
					t.Fatalf("case needs host work (%.2f ms) over the GPU's (%.2f ms)", host*1e3, gpu*1e3)
				}
				want = host + step
			}
			if math.Abs(a.Total-want) > 1e-12 {
				t.Errorf("step %.4f ms, want %.4f (serial %.4f, host %.4f, GPU %.4f)", a.Total*1e3, want*1e3, b.Total*1e3, host*1e3, gpu*1e3)
			}
			if a.Total > b.Total+1e-15 {
				t.Errorf("overlap made the step slower: %.4f > %.4f ms", a.Total*1e3, b.Total*1e3)
			}
		})
	}
	// Which profiles overlap, by engine and version: TensorRT-LLM's
	// GptSession (v0.5–0.9 session benchmarks) and its PyTorch backend's
	// overlap scheduler (trtllm-serve ≥ 1.0); vLLM 0.4–0.11, SGLang 0.2
	// and lmdeploy 0.4 as profiled here do not.
	cat := DefaultCatalog()
	for name, want := range map[string]bool{"trtllm": true, "trtllm-v05": true, "trtllm-serve": true, "vllm": false, "vllm-v0": false, "sglang": false, "lmdeploy": false, "tgi": false} {
		p, err := cat.Engine(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.HostOverlap != want {
			t.Errorf("%s: host_overlap %v, want %v", name, p.HostOverlap, want)
		}
	}
}

// decodeLoad is one decode step of b sequences of context ctx each.
func decodeLoad(b, ctx int) stepLoad {
	return stepLoad{tokens: b, seqs: b, attn: float64(b * ctx), ctxRead: float64(b * ctx), decodes: b, draftCtx: float64(b * ctx)}
}

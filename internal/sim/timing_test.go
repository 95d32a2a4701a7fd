package sim

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestTimingGolden pins the timing model: prefill and decode step times of
// representative deployments. A change to the physics or the calibration
// shows up here as a diff; regenerate with
// go test ./internal/sim -run TestTimingGolden -update
func TestTimingGolden(t *testing.T) {
	cases := []Config{
		{Model: "llama-3.1-8b", GPU: "h100-sxm"},
		{Model: "llama-3.1-8b", GPU: "l4", Quantization: "fp8", KVCacheDtype: "fp8"},
		{Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 4},
		{Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 4, KVCacheDtype: "fp8", EnablePrefixCaching: true},
		{Model: "llama-3-70b", GPU: "h100-sxm", TensorParallelSize: 4, Quantization: "fp8"},
		{Model: "mixtral-8x7b", GPU: "h100-sxm", TensorParallelSize: 2},
		{Model: "qwen2.5-72b", GPU: "mi300x"},
		{Model: "llama-3.1-8b", GPU: "h100-sxm", Speculative: SpecConfig{NumSpeculativeTokens: 4, Acceptance: 0.8, DraftModel: "llama-3.2-1b"}},
		{Model: "llama-3.1-8b", GPU: "a100-80gb", Quantization: "awq"},
		{Model: "llama-3.1-8b", GPU: "l4", Quantization: "int4", QuantGroupSize: 32, MaxModelLen: 32768},
		{Model: "llama-3-8b", GPU: "raspberry-pi-5", Engine: "llamacpp", Quantization: "int4"},
		{Model: "llama-3-8b", GPU: "apple-m2-pro", Engine: "llamacpp", Quantization: "int8"},
		{Model: "llama-3.1-70b", GPU: "xeon-8480", Engine: "llamacpp", Quantization: "int4", MaxModelLen: 8192},
	}
	var b strings.Builder
	fmt.Fprintln(&b, "deployment | kv_blocks | prefill128 ms | prefill2048 ms | prefill2048@2048 ms | decode b1 c1k ms | decode b64 c2k ms | decode b256 c2k ms")
	for _, c := range cases {
		d, err := Resolve(nil, c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		ms := func(s StepBreakdown) string { return fmt.Sprintf("%.3f", s.Total*1e3) }
		fmt.Fprintf(&b, "%s | %d | %s | %s | %s | %s | %s | %s\n", d.Name(), d.NumBlocks,
			ms(d.PrefillTime(128, 0)), ms(d.PrefillTime(2048, 0)), ms(d.PrefillTime(2048, 2048)),
			ms(d.DecodeTime(1, 1024)), ms(d.DecodeTime(64, 2048)), ms(d.DecodeTime(256, 2048)))
	}
	got := b.String()
	checkGolden(t, "timing.golden", "timing model", got)
}

// TestTimingMonotone: more work never takes less time (property, fixed grid).
func TestTimingMonotone(t *testing.T) {
	for _, c := range []Config{{Model: "llama-3.1-8b", GPU: "h100-sxm"}, {Model: "llama-3-70b", GPU: "a100-80gb", TensorParallelSize: 4}, {Model: "mixtral-8x7b", GPU: "h100-sxm", TensorParallelSize: 2}} {
		d, err := Resolve(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		prev := 0.0
		for n := 1; n <= 8192; n *= 2 {
			if p := d.PrefillTime(n, 0).Total; p < prev {
				t.Errorf("%s: prefill of %d tokens %.4fs < prefill of %d %.4fs", d.Name(), n, p, n/2, prev)
			} else {
				prev = p
			}
		}
		prev = 0
		for b := 1; b <= 512; b *= 2 {
			if p := d.DecodeTime(b, 1024).Total; p < prev {
				t.Errorf("%s: decode batch %d faster than batch %d", d.Name(), b, b/2)
			} else {
				prev = p
			}
		}
		if d.DecodeTime(8, 4096).Total < d.DecodeTime(8, 512).Total {
			t.Errorf("%s: longer context decodes faster", d.Name())
		}
	}
}

// checkGolden compares got with testdata/name, rewriting it under -update.
func checkGolden(t *testing.T, name, what, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("%s changed; diff against %s (rerun with -update if intended):\n got:\n%s\nwant:\n%s", what, path, got, want)
	}
}

// TestHalfTokensScaleWithBalance: the GEMMs' efficiency ramp is the
// profile's compute_half_tokens on an H100 SXM and scales with each GPU's
// 16-bit peak over HBM bandwidth elsewhere; a CPU profile's (≤ 1) is kept.
// A GPU of a quarter of the H100's balance then reaches a higher share of
// its peak on a 200-token prefill than the H100 does.
func TestHalfTokensScaleWithBalance(t *testing.T) {
	for _, tc := range []struct {
		gpu, engine, quant string
		want               float64 // halfTokens / compute_half_tokens
	}{
		{"h100-sxm", "vllm", "", 1},
		{"h200", "vllm", "", (989.0 / 4800) / (989.0 / 3350)},
		{"rtx-3090", "vllm", "", (71.0 / 936) / (989.0 / 3350)},
		{"l40s", "trtllm", "", (362.0 / 864) / (989.0 / 3350)},
		{"xeon-8480", "llamacpp", "int4", 1},
	} {
		d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: tc.gpu, Engine: tc.engine, Quantization: tc.quant})
		if err != nil {
			t.Fatalf("%s: %v", tc.gpu, err)
		}
		got := d.halfTokens() / d.Profile.ComputeHalfTokens
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s (%s): ramp ×%.4f of compute_half_tokens, want ×%.4f", tc.gpu, tc.engine, got, tc.want)
		}
	}
	share := func(gpu string) float64 {
		d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: gpu})
		if err != nil {
			t.Fatal(err)
		}
		const T = 200.0
		return T / (T + d.halfTokens())
	}
	if h100, g3090 := share("h100-sxm"), share("rtx-3090"); !(g3090 > h100) {
		t.Errorf("200-token step: RTX 3090 at %.2f of its plateau, H100 at %.2f; want the lower-balance GPU nearer its plateau", g3090, h100)
	}
}

package sim

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCatalogLookups(t *testing.T) {
	cat := DefaultCatalog()
	for _, tc := range []struct{ in, want string }{
		{"meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"},
		{"Llama-3.1-8B-Instruct", "llama-3.1-8b"},
		{"mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"},
		{"Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"},
		{"EleutherAI/gpt-j-6b", "gpt-j-6b"},
	} {
		m, err := cat.Model(tc.in)
		if err != nil || m.Name != tc.want {
			t.Errorf("Model(%q) = %v, %v; want %s", tc.in, m, err, tc.want)
		}
	}
	for _, g := range []string{"H100", "a100", "A100-80GB", "mi300x", "L4"} {
		if _, err := cat.GPU(g); err != nil {
			t.Errorf("GPU(%q): %v", g, err)
		}
	}
	// KV bytes per token match the reference (fp16): 8B 131072, 70B 327680
	// (whole model; TP 2 halves the per-GPU figure).
	for name, want := range map[string]float64{"llama-3-8b": 131072, "llama-3-70b": 327680} {
		d, err := Resolve(cat, Config{Model: name, GPU: "h200", TensorParallelSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		if d.KVBytesTok*2 != want {
			t.Errorf("%s KV bytes/token = %v, want %v", name, d.KVBytesTok, want)
		}
	}
}

func TestHFConfigParamCount(t *testing.T) {
	// Llama-3-8B's config.json: the derived parameter count must be 8.03 B.
	cfg := `{"_name_or_path":"meta-llama/Meta-Llama-3-8B","hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,
	"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":128256,"max_position_embeddings":8192,"tie_word_embeddings":false}`
	m, err := ModelFromHFConfig([]byte(cfg), "x")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.ParamsB-8.03) > 0.01 || m.HeadDim != 128 || m.KVHeads != 8 {
		t.Errorf("derived %+v, want 8.03 B params, head_dim 128, 8 KV heads", m)
	}
	// Mixtral: 46.7 B total, 12.9 B active.
	mix := `{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,
	"vocab_size":32000,"num_local_experts":8,"num_experts_per_tok":2}`
	m, err = ModelFromHFConfig([]byte(mix), "mixtral")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m.ParamsB-46.7) > 0.1 || math.Abs(m.ActiveParamsB-12.9) > 0.1 {
		t.Errorf("mixtral derived %.2f / %.2f B, want 46.7 / 12.9", m.ParamsB, m.ActiveParamsB)
	}
	if _, err := ModelFromHFConfig([]byte(`{"hidden_size":1}`), "bad"); err == nil {
		t.Error("incomplete config accepted")
	}
}

func TestCatalogUserFiles(t *testing.T) {
	dir := t.TempDir()
	y := filepath.Join(dir, "c.yaml")
	os.WriteFile(y, []byte("gpus:\n  - {name: b200, tflops: {bf16: 2250, fp8: 4500}, memory_gb: 192, bandwidth_gbs: 8000, interconnect_gbs: 1800, price_per_hour: 5.5}\nengines:\n  - {name: vllm, compute_eff_max: 0.5, compute_half_tokens: 48, mem_eff: 0.5, step_overhead_ms: 9}\n"), 0o644)
	cat := DefaultCatalog()
	if err := cat.LoadFile(y); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.GPU("b200"); err != nil {
		t.Error(err)
	}
	if p, _ := cat.Engine("vllm"); p.StepOverheadMs != 9 {
		t.Errorf("user engine profile did not replace the built-in one: %+v", p)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("gpus:\n  - {name: x, memory_gb: 0}\n"), 0o644)
	if err := cat.LoadFile(bad); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("bad catalog error %v does not name the file", err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("modles: []\n"), 0o644)
	if err := cat.LoadFile(typo); err == nil {
		t.Error("unknown top-level key accepted")
	}
	hf := filepath.Join(dir, "tiny-llama", "config.json")
	os.MkdirAll(filepath.Dir(hf), 0o755)
	os.WriteFile(hf, []byte(`{"hidden_size":2048,"intermediate_size":5632,"num_attention_heads":32,"num_hidden_layers":22,"num_key_value_heads":4,"vocab_size":32000,"max_position_embeddings":2048}`), 0o644)
	if err := cat.LoadFile(hf); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(cat, Config{Model: "tiny-llama", GPU: "l4"}); err != nil {
		t.Errorf("model from config.json unusable: %v", err)
	}
}

func TestWeightOnlyQuantization(t *testing.T) {
	// Llama-3-70B does not fit on one A100-80GB in 16-bit, does in AWQ.
	if _, err := Resolve(nil, Config{Model: "llama-3-70b", GPU: "a100-80gb"}); err == nil {
		t.Fatal("16-bit 70B accepted on one 80 GB GPU")
	}
	d, err := Resolve(nil, Config{Model: "llama-3-70b", GPU: "a100-80gb", Quantization: "awq", MaxModelLen: 8192})
	if err != nil {
		t.Fatal(err)
	}
	// 68.45 B linear weights × (0.5 + 2.5/128) B + 2.1 B embedding and
	// head parameters at 2 B = 39.8 GB, the size of public AWQ checkpoints.
	if d.ComputeDtype != "bf16" || d.WeightGBGPU < 39.3 || d.WeightGBGPU > 40.3 {
		t.Errorf("awq: compute %s, %.1f GB of weights; want bf16 math and ≈ 39.8 GB", d.ComputeDtype, d.WeightGBGPU)
	}
	// Weight-only int8 decodes faster than 16-bit (fewer bytes), same math.
	a, _ := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "a100-80gb"})
	b, _ := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "a100-80gb", Quantization: "int8"})
	if b.DecodeTime(1, 512).Total >= a.DecodeTime(1, 512).Total {
		t.Error("int8 weights do not speed up a memory-bound decode")
	}
}

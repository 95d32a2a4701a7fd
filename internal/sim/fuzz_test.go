package sim

import "testing"

func FuzzModelFromHFConfig(f *testing.F) {
	f.Add(`{"hidden_size":4096,"intermediate_size":14336,"num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,"vocab_size":128256}`)
	f.Add(`{"n_embd":4096,"n_layer":28,"n_head":16,"vocab_size":50400}`)
	f.Add(`{"hidden_size":4096,"num_attention_heads":32,"num_hidden_layers":32,"vocab_size":32000,"num_local_experts":8,"num_experts_per_tok":9}`)
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ModelFromHFConfig([]byte(s), "fuzz")
		if err != nil {
			return
		}
		if m.ParamsB <= 0 || m.Layers <= 0 || m.Heads <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0 {
			t.Fatalf("accepted unusable model %+v", m)
		}
	})
}

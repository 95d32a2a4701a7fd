package serve

import "testing"

func TestParseFleet(t *testing.T) {
	cfgs, err := ParseFleet([]byte("replicas:\n  - {model: llama-3.1-8b, gpu: h100-sxm, count: 2}\n  - {model: llama-3-70b, gpu: a100-80gb, tensor_parallel_size: 4, kv_cache_dtype: fp8, faults: {error_rate: 0.5, error_status: 503}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 3 || cfgs[2].TensorParallelSize != 4 || cfgs[2].Faults.ErrorStatus != 503 || cfgs[1].Model != "llama-3.1-8b" {
		t.Fatalf("parsed %+v", cfgs)
	}
	for _, bad := range []string{"replicas: []", "replicas:\n  - {gpu: h100}", "replicas:\n  - {model: x, gpu: y, tp: 2}"} {
		if _, err := ParseFleet([]byte(bad)); err == nil {
			t.Errorf("ParseFleet(%q) accepted", bad)
		}
	}
	servers, err := StartFleet(t.Context(), cfgs[:2])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		defer s.Close()
	}
	if len(servers) != 2 || servers[0].URL() == servers[1].URL() {
		t.Fatalf("fleet URLs %v", servers)
	}
}

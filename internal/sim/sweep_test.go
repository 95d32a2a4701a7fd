package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// sweepCSV is a three-point open-loop sweep run from the highest rate down
// on one server with the same prompts (sweep desc), beside the same
// deployment's point run on a fresh server.
const sweepCSV = `source,url,engine,version,profile,sched,frontend,model,gpu,tp,dtype,kv,prompt,output,lengths,load,value,requests,ttft_ms,ttft_stat,itl_ms,itl_stat,e2e_ms,tput,tput_unit,mem_util,max_len,notes,sweep
s,u,vllm,0.8.5,vllm,v1,http,llama-3-8b,h100-sxm,1,bf16,auto,512,64,geom,rate,2,100,30,p50,,,,,,0,0,,desc
s,u,vllm,0.8.5,vllm,v1,http,llama-3-8b,h100-sxm,1,bf16,auto,512,64,geom,rate,8,100,30,p50,,,,,,0,0,,desc
s,u,vllm,0.8.5,vllm,v1,http,llama-3-8b,h100-sxm,1,bf16,auto,512,64,geom,rate,4,100,30,p50,,,,,,0,0,,desc
t,u,vllm,0.8.5,vllm,v1,http,llama-3-8b,h100-sxm,1,bf16,auto,512,64,geom,rate,2,100,30,p50,,,,,,0,0,,
`

// TestSweepWarmCache: a row of a descending sweep is predicted after the
// sweep's higher rates ran on the same engine with the same prompts, so
// its prompts are in vLLM V1's prefix cache (on by default) and its TTFT
// is that of a prefill of the last partial block; the fresh-server row
// prefills whole prompts. The planner's question ignores the sweep.
func TestSweepWarmCache(t *testing.T) {
	rows, err := ParseCorpus(strings.NewReader(sweepCSV))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		i     int
		prior []float64
	}{{0, []float64{8, 4}}, {1, nil}, {2, []float64{8}}, {3, nil}} {
		if r := rows[tc.i]; !slices.Equal(r.PriorRates, tc.prior) {
			t.Errorf("row %d (rate %g, sweep %q): prior rates %v, want %v", tc.i, r.Value, r.Sweep, r.PriorRates, tc.prior)
		}
	}
	if rows[0].SweepSeed != uint64(rows[1].Line) || rows[2].SweepSeed != uint64(rows[1].Line) {
		t.Errorf("sweep seeds %d, %d, want the first run's line %d", rows[0].SweepSeed, rows[2].SweepSeed, rows[1].Line)
	}
	ctx := context.Background()
	pred := func(r CorpusRow) float64 {
		t.Helper()
		d, err := resolveRow(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Config.EnablePrefixCaching {
			t.Fatalf("line %d: vLLM V1 row without prefix caching", r.Line)
		}
		p, err := predictServed(ctx, d, &r)
		if err != nil {
			t.Fatal(err)
		}
		return p.TTFTMs
	}
	warm, fresh := pred(rows[0]), pred(rows[3])
	// Same seed for both, so only the cache differs.
	cold := rows[0]
	cold.Sweep, cold.PriorRates = "", nil
	cold.Line = int(rows[0].SweepSeed) // rowSource seeds a fresh row by its line
	same := pred(cold)
	t.Logf("rate 2 req/s, P50 TTFT: after the sweep's higher rates %.1f ms, fresh server (same prompts) %.1f ms, fresh server (other draw) %.1f ms", warm, same, fresh)
	if !(warm < 0.8*same) {
		t.Errorf("warm prefix cache: P50 TTFT %.1f ms, want < 80 %% of the fresh server's %.1f ms", warm, same)
	}
	got, err := SustainableRate(ctx, nil, rows[0], 100, 64)
	if err != nil {
		t.Fatal(err)
	}
	plain := rows[0]
	plain.Sweep, plain.PriorRates = "", nil
	ref, err := SustainableRate(ctx, nil, plain, 100, 64)
	if err != nil {
		t.Fatal(err)
	}
	if got != ref {
		t.Errorf("planner's question on a sweep row: %.1f req/s, want the fresh server's %.1f", got, ref)
	}

	bad := strings.Replace(sweepCSV, "rate,2,100,30,p50,,,,,,0,0,,desc", "closed,2,100,30,p50,,,,,,0,0,,desc", 1)
	if _, err := ParseCorpus(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "sweep") {
		t.Errorf("sweep desc on a closed loop: error %v, want one naming the sweep", err)
	}
}

// TestPCIeAllReduce: a tensor-parallel pair of H100 PCIe cards talks over
// PCIe Gen5 (128 GB/s both ways) unless bridged with NVLink (600 GB/s):
// a 2,048-token prefill's all-reduces (bandwidth-bound) take ≈ 4–5× as
// long, a batch-1 decode's (latency-bound) barely more.
func TestPCIeAllReduce(t *testing.T) {
	comm := func(gpu string) (pre, dec float64) {
		t.Helper()
		d, err := Resolve(nil, Config{Model: "llama-3.1-70b", GPU: gpu, TensorParallelSize: 2, Quantization: "fp8", MaxModelLen: 8192})
		if err != nil {
			t.Fatal(err)
		}
		return d.PrefillTime(2048, 0).Comm, d.DecodeTime(1, 512).Comm
	}
	pciePre, pcieDec := comm("h100-pcie")
	nvPre, nvDec := comm("h100-pcie-nvlink")
	t.Logf("all-reduce time per step, PCIe / NVLink bridge: prefill of 2048 tokens %.1f / %.1f ms, batch-1 decode %.2f / %.2f ms", pciePre*1e3, nvPre*1e3, pcieDec*1e3, nvDec*1e3)
	if r := pciePre / nvPre; r < 3 || r > 6 {
		t.Errorf("prefill all-reduce PCIe/NVLink ratio %.2f, want 3–6", r)
	}
	if r := pcieDec / nvDec; r < 1 || r > 1.3 {
		t.Errorf("batch-1 decode all-reduce PCIe/NVLink ratio %.2f, want 1–1.3", r)
	}
}

package sim

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestCorpusParses checks the public corpus: enough rows from enough
// independent sources, every row cited and resolvable against the catalog,
// and none taken from the tables reserved for the independent check.
func TestCorpusParses(t *testing.T) {
	rows, err := DefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	src := map[string]int{}
	for i := range rows {
		r := &rows[i]
		src[r.Source]++
		if !strings.HasPrefix(r.URL, "https://") {
			t.Errorf("line %d: citation %q is not a URL", r.Line, r.URL)
		}
		for _, reserved := range []string{"lmdeploy.readthedocs", "docs.nvidia.com/nim", "inference-sim"} {
			if strings.Contains(r.URL, reserved) {
				t.Errorf("line %d cites %s, reserved for the independent check", r.Line, r.URL)
			}
		}
		if _, err := resolveRow(DefaultCatalog(), r); err != nil {
			t.Error(err)
		}
	}
	if len(rows) < 100 || len(src) < 8 {
		t.Errorf("corpus has %d rows from %d sources, want ≥ 100 from ≥ 8", len(rows), len(src))
	}
}

func TestParseCorpusErrors(t *testing.T) {
	head := "source,url,engine,version,profile,sched,frontend,model,gpu,tp,dtype,kv,prompt,output,lengths,load,value,requests,ttft_ms,ttft_stat\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown load", "s,https://x,vllm,1,vllm,v1,http,llama-3-8b,h100,1,bf16,auto,128,16,fixed,spike,1,0,10,p50\n", "unknown load"},
		{"no figure", "s,https://x,vllm,1,vllm,v1,http,llama-3-8b,h100,1,bf16,auto,128,16,fixed,closed,1,0,,\n", "no measured figure"},
		{"bad lengths", "s,https://x,vllm,1,vllm,v1,http,llama-3-8b,h100,1,bf16,auto,128,16,eos:x,closed,1,0,10,p50\n", "eos:MAX"},
		{"bad number", "s,https://x,vllm,1,vllm,v1,http,llama-3-8b,h100,one,bf16,auto,128,16,fixed,closed,1,0,10,p50\n", "column tp"},
		{"missing column", "source,url\ns,https://x\n", "lacks column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := head + tc.body
			if strings.HasPrefix(tc.body, "source,") {
				body = tc.body
			}
			_, err := ParseCorpus(strings.NewReader("# comment\n" + body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestEOSLengthSource checks the length distributions against their means
// and caps.
func TestEOSLengthSource(t *testing.T) {
	for _, tc := range []struct {
		name             string
		src              EOSLengthSource
		wantP, wantO     float64
		maxOut, maxPrmpt int
	}{
		{"eos capped", EOSLengthSource{MeanPrompt: 256, MeanOutput: 100, EOSCap: 128}, 256, 100, 128, 256},
		{"geometric", EOSLengthSource{MeanPrompt: 206, MeanOutput: 202, Geometric: true, MaxPrompt: 100000}, 206, 202, 1 << 30, 100000},
		{"uniform", EOSLengthSource{MeanPrompt: 4065, MeanOutput: 4, Uniform: true}, 4065, 4, 7, 8129},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.src
			s.Requests, s.Seed = 20000, 7
			var sp, so float64
			for {
				r, err := s.Next(context.Background())
				if err != nil {
					break
				}
				if r.MaxTokens != r.MinTokens || r.MaxTokens < 1 || r.MaxTokens > tc.maxOut || r.PromptTokens > tc.maxPrmpt {
					t.Fatalf("request %+v outside its bounds", r)
				}
				sp += float64(r.PromptTokens)
				so += float64(r.MaxTokens)
			}
			if p, o := sp/20000, so/20000; math.Abs(p/tc.wantP-1) > 0.03 || math.Abs(o/tc.wantO-1) > 0.03 {
				t.Errorf("mean prompt %.1f, output %.1f; want %.0f, %.0f (±3%%)", p, o, tc.wantP, tc.wantO)
			}
		})
	}
}

// TestGQAKVReread: a pre-XQA kernel reads a grouped-query model's KV once
// per query head, so decode steps with long contexts slow down; a model
// without GQA is unaffected.
func TestGQAKVReread(t *testing.T) {
	for _, tc := range []struct {
		model  string
		tp     int
		slower bool
	}{{"llama-2-70b", 4, true}, {"llama-2-7b", 1, false}} {
		times := map[string]float64{}
		for _, eng := range []string{"trtllm", "trtllm-v05"} {
			d, err := Resolve(nil, Config{Model: tc.model, GPU: "h100-sxm", TensorParallelSize: tc.tp, Engine: eng, Quantization: "fp8", KVCacheDtype: "fp8"})
			if err != nil {
				t.Fatal(err)
			}
			times[eng] = d.DecodeTime(64, 3000).Total
		}
		if got := times["trtllm-v05"] > times["trtllm"]*1.2; got != tc.slower {
			t.Errorf("%s: decode %.2f ms with re-read vs %.2f ms without; slower = %v, want %v", tc.model, times["trtllm-v05"]*1e3, times["trtllm"]*1e3, got, tc.slower)
		}
	}
}

// TestUsableMemory: vLLM sizes the KV cache from the memory the driver
// reports, so a 70B model in 16 bits fits on two "80 GB" GPUs.
func TestUsableMemory(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3-70b", GPU: "h100-pcie", TensorParallelSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := (85.5*0.9 - d.WeightGBGPU - d.Profile.ReserveGB)
	if math.Abs(d.KVGBPerGPU-want) > 1e-9 || d.KVGBPerGPU < 4 {
		t.Errorf("KV per GPU %.2f GB, want %.2f (usable 85.5 GB × 0.9 − weights − reserve)", d.KVGBPerGPU, want)
	}
}

// TestFitPhysicsRecoversScales: rows whose "measurements" were made by
// the model itself at known scales are fitted back: the fitted model
// reproduces them closely and each strongly identified factor moves the
// right way from the prior (the penalty keeps weakly identified ones near
// 1, by design).
func TestFitPhysicsRecoversScales(t *testing.T) {
	rows, err := DefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	cat := LOSOPriors(DefaultCatalog())
	truth := PhysicsScales{Compute: 1.25, FP8: 0.8, FP8AMD: 1, Mem: 0.85, Layer: 1, Step: 1, AllReduce: 1}
	res, err := evalRows(context.Background(), cat, cheapRows(rows), truth)
	if err != nil {
		t.Fatal(err)
	}
	synth := make([]CorpusRow, len(res))
	for i, r := range res {
		synth[i] = r.CorpusRow
		synth[i].TTFTMs, synth[i].E2EMs, synth[i].Tput = pick(r.TTFTMs, r.Pred.TTFTMs), pick(r.E2EMs, r.Pred.E2EMs), pick(r.Tput, r.Pred.Tput)
	}
	got, loss, err := FitPhysics(cat, synth)
	if err != nil {
		t.Fatal(err)
	}
	if loss > 0.01 {
		t.Errorf("fit loss %.4f on self-generated data, want ≤ 0.01 (scales %+v)", loss, got)
	}
	if got.Compute <= 1.1 || got.FP8 >= 0.9 || got.Mem >= 0.95 {
		t.Errorf("fitted %+v; want compute > 1.1, fp8 < 0.9, mem < 0.95 (truth %+v)", got, truth)
	}
}

func cheapRows(rows []CorpusRow) []CorpusRow {
	var out []CorpusRow
	for _, r := range rows {
		if cheap(&r) {
			out = append(out, r)
		}
	}
	return out
}

// pick keeps a figure only where the row publishes one.
func pick(meas, pred float64) float64 {
	if meas > 0 {
		return pred
	}
	return 0
}

// TestLeaveOneSourceOut is the accuracy the simulator reaches on sources it
// was not fitted to (docs/simulator-validation.md, `ttft sim validate
// --loso`). The bounds are the medians achieved plus a little slack, so a
// regression fails (achieved: TTFT 12.5 % overall, batch-1 7.8 %, static
// 0.8 %, open loop 19.6 %, closed loop 21.2 %; throughput 12.6 %, closed
// loop 2.0 %). The targets (≤ 15 % overall, ≤ 25 % per category)
// are met; saturation throughput within 10 % is not everywhere — see the
// docs for why.
func TestLeaveOneSourceOut(t *testing.T) {
	rows, err := DefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	res, err := LeaveOneSourceOut(context.Background(), DefaultCatalog(), rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != len(rows) {
		t.Fatalf("%d predictions for %d rows", len(res.Rows), len(rows))
	}
	for _, r := range res.Rows {
		if r.Fold != r.Source {
			t.Fatalf("line %d (%s) predicted in fold %s: its own source took part in the fit", r.Line, r.Source, r.Fold)
		}
	}
	sum := Summarize(res.Rows)
	for _, s := range sum {
		t.Logf("%-18s n=%3d median |error| %5.1f%%", s.Name, s.N, s.Median)
	}
	for _, tc := range []struct {
		name string
		max  float64
	}{
		{"TTFT all", 14},
		{"TTFT batch1", 10},
		{"TTFT static", 5},
		{"TTFT rate", 23},
		{"TTFT closed", 25},
		{"throughput all", 14},
		{"throughput static", 15},
		{"throughput rate", 14},
		{"throughput closed", 8},
		{"ITL all", 18},
	} {
		if got := SummaryMedian(sum, tc.name); !(got <= tc.max) {
			t.Errorf("%s: median |error| %.1f%%, want ≤ %.0f%%", tc.name, got, tc.max)
		}
	}
}

// TestProfileScheduler: an engine profile names its batching policy; a
// deployment's own --scheduler wins.
func TestProfileScheduler(t *testing.T) {
	for _, tc := range []struct {
		engine, sched, want string
	}{
		{"vllm", "", ""},
		{"vllm-v0", "", "v0"},
		{"tgi", "", "v0"},
		{"lmdeploy", "", "v0"},
		{"sglang", "", "v0"},
		{"trtllm", "", ""},
		{"tgi", "v1", "v1"},
	} {
		d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", Engine: tc.engine, Scheduler: tc.sched, MaxModelLen: 8192})
		if err != nil {
			t.Fatal(err)
		}
		if d.Config.Scheduler != tc.want || d.Config.DisableChunkedPrefill != (tc.want == "v0") {
			t.Errorf("%s with scheduler %q: got %q (chunking disabled %v), want %q", tc.engine, tc.sched, d.Config.Scheduler, d.Config.DisableChunkedPrefill, tc.want)
		}
	}
}

// TestSustainableRatePublished asks the planner's question — the highest
// Poisson rate one replica carries within a P90 TTFT limit — of published
// deployments (IOG's vLLM 0.8.5 sweeps, ShareGPT lengths, 200 requests)
// and compares it with the bracket their own sweeps give: the highest
// measured rate within the limit and the lowest beyond it. Two of four
// land in their bracket (or above the highest rate measured, where none
// missed); the two 70B deployments on two PCIe GPUs are predicted above it
// (docs/simulator-validation.md says why). The bounds pin that, so a
// change either way shows.
func TestSustainableRatePublished(t *testing.T) {
	got, err := PublishedCapacity(context.Background(), DefaultCatalog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		min, max   float64 // what the simulator is held to
		assessment string
	}{
		{16, 32, "inside"},
		{32, 64, "consistent"},
		{16, 48, "above"},
		{1, 10, "above"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d published deployments, want %d", len(got), len(want))
	}
	for i, c := range got {
		t.Logf("%s tp%d %s, P90 TTFT ≤ %.0f ms: simulated %.1f req/s, published [%g, %g): %s", c.Row.Model, c.Row.TP, c.Row.GPU, c.SLOP90Ms, c.Simulated, c.PubLo, c.PubHi, c.Assessment)
		if w := want[i]; c.Simulated < w.min || c.Simulated > w.max || c.Assessment != w.assessment {
			t.Errorf("%s on %s: sustainable rate %.1f req/s (%s), want %g–%g (%s)", c.Row.Model, c.Row.GPU, c.Simulated, c.Assessment, w.min, w.max, w.assessment)
		}
	}
}

// TestHostFrontendPriors re-derives the host profiles' front-end factors
// from their out-of-corpus source (catalog/engines.yaml): vllm-desktop
// must reproduce the bare-vLLM sweep of ray-project/ray#59681
// (Qwen2.5-0.5B, 128 output tokens, TTFT P50 at concurrency 1, 8, 32,
// simulated on an L4 as the RTX 5050's bandwidth class) within 10 %, and
// vllm-vm-smt must be those factors divided by the SMT share 0.65 — so a
// change to either profile that breaks its derivation fails here.
func TestHostFrontendPriors(t *testing.T) {
	cat := DefaultCatalog()
	for _, tc := range []struct {
		c    float64
		meas float64
	}{{1, 16.9}, {8, 35.0}, {32, 84.1}} {
		row := CorpusRow{Source: "ray-59681", Profile: "vllm-desktop", Sched: "v1", Frontend: "http", Model: "qwen2.5-0.5b", GPU: "l4", TP: 1,
			Prompt: 32, Output: 128, Lengths: "fixed", Load: LoadClosed, Value: tc.c, Requests: 20 * int(tc.c), TTFTStat: "p50", MemUtil: 0.9, MaxLen: 8192}
		d, err := resolveRow(cat, &row)
		if err != nil {
			t.Fatal(err)
		}
		p, err := predictRow(context.Background(), d, &row)
		if err != nil {
			t.Fatal(err)
		}
		if e := p.TTFTMs/tc.meas - 1; math.Abs(e) > 0.10 {
			t.Errorf("vllm-desktop at C=%g: TTFT P50 %.1f ms, published %.1f (%+.0f%%), want within 10%%", tc.c, p.TTFTMs, tc.meas, e*100)
		}
	}
	desk, err := cat.Engine("vllm-desktop")
	if err != nil {
		t.Fatal(err)
	}
	vm, err := cat.Engine("vllm-vm-smt")
	if err != nil {
		t.Fatal(err)
	}
	const smtShare = 0.65 // two threads on one core: ≈ 1.3× one thread's throughput
	for _, f := range []struct {
		name     string
		vm, desk float64
	}{{"api_overhead_ms", vm.APIOverheadMs, desk.APIOverheadMs}, {"api_inflight_ms", vm.APIInflightMs, desk.APIInflightMs}} {
		if want := f.desk / smtShare; math.Abs(f.vm/want-1) > 0.01 {
			t.Errorf("vllm-vm-smt %s = %g, want vllm-desktop's %g / %.2f = %.2f", f.name, f.vm, f.desk, smtShare, want)
		}
	}
}

// TestAttnEff: attention's own efficiency slows prefills by their
// attention share only — a long prompt (attention quadratic in its length)
// far more than a short one — and 0 means the GEMMs' efficiency.
func TestAttnEff(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", MaxModelLen: 32768})
	if err != nil {
		t.Fatal(err)
	}
	one := *d
	one.Profile.AttnEff = 1
	slow := *d
	slow.Profile.AttnEff = 0.1
	for _, tc := range []struct {
		tokens   int
		min, max float64 // slow/default prefill time
	}{{128, 1, 1.2}, {16384, 2, 20}} {
		base := d.PrefillTime(tc.tokens, 0).Total
		if got := one.PrefillTime(tc.tokens, 0).Total; got != base {
			t.Errorf("%d tokens: attn_eff 1 gives %.3f ms, 0 gives %.3f ms; want equal", tc.tokens, got*1e3, base*1e3)
		}
		if r := slow.PrefillTime(tc.tokens, 0).Total / base; r < tc.min || r > tc.max {
			t.Errorf("%d tokens: attn_eff 0.1 slows the prefill ×%.2f, want ×%g–%g", tc.tokens, r, tc.min, tc.max)
		}
	}
}

// TestCorpusRowMaxSeqs: a row's batch limit (max_seqs; --max-num-seqs of
// ttft sim calibrate) reaches the deployment; 0 keeps the engine default.
func TestCorpusRowMaxSeqs(t *testing.T) {
	for _, tc := range []struct{ seqs, want int }{{0, 256}, {1, 1}, {8, 8}} {
		r := CorpusRow{Source: "s", Profile: "vllm", Sched: "v1", Model: "llama-3.1-8b", GPU: "h100-sxm", TP: 1, Prompt: 128, Output: 16, Load: LoadClosed, Value: 1, MaxLen: 8192, MaxSeqs: tc.seqs}
		d, err := resolveRow(DefaultCatalog(), &r)
		if err != nil {
			t.Fatal(err)
		}
		if d.MaxNumSeqs != tc.want {
			t.Errorf("max_seqs %d: deployment batches %d, want %d", tc.seqs, d.MaxNumSeqs, tc.want)
		}
	}
}

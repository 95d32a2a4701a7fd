package sim

import (
	"context"
	"math"
	"slices"
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
	if len(rows) < 160 || len(src) < 11 {
		t.Errorf("corpus has %d rows from %d sources, want ≥ 160 from ≥ 11", len(rows), len(src))
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

// TestRowDraw: a row's Draw gives its served run other requests (lengths
// drawn from another seed; a sweep's rows still share theirs), and Draw 0
// the ones the published table is pinned to.
func TestRowDraw(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3-8b", GPU: "rtx-4090"})
	if err != nil {
		t.Fatal(err)
	}
	lengths := func(r CorpusRow) []int {
		src, err := rowSource(d, &r, 32)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for {
			q, err := src.Next(context.Background())
			if err != nil {
				return out
			}
			out = append(out, q.PromptTokens, q.MaxTokens)
		}
	}
	row := CorpusRow{Line: 40, Prompt: 206, Output: 202, Lengths: "geom"}
	again, other := row, row
	other.Draw = 1000
	if !slices.Equal(lengths(row), lengths(again)) {
		t.Error("the same row drew different lengths twice")
	}
	if slices.Equal(lengths(row), lengths(other)) {
		t.Error("Draw 1000 drew the lengths of Draw 0")
	}
	a, b := row, row
	a.Sweep, a.SweepSeed, a.Line = "desc", 38, 40
	b.Sweep, b.SweepSeed, b.Line = "desc", 38, 41
	a.Draw, b.Draw = 1000, 1000
	if !slices.Equal(lengths(a), lengths(b)) {
		t.Error("two rows of one sweep drew different prompts under the same Draw")
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
	truth := PhysicsScales{Compute: 1.25, FP8: 0.8, FP8AMD: 1, Mem: 0.85, MemAMD: 1, Layer: 1, Step: 1, AllReduce: 1}
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
// regression fails (achieved with the GPUStack, AMD and zhjunqin rows, 161
// rows from 11 sources: TTFT 16.3 % overall, batch-1 6.0 %, static 0.7 %,
// open loop and bursts 22.2 %, closed loop 32.6 %; throughput 11.5 %,
// static 13.0 %, open loop and bursts 11.0 %, closed loop 4.7 %,
// saturation 11.7 % — the TensorRT-LLM tables 10.5 %, GPUStack 13.0 %;
// ITL 10.2 %). Before them (105 rows, 8 sources) they read TTFT 12.3 /
// 7.2 / 0.7 / 13.3 / 17.3 %, throughput 10.5 / 11.6 / 7.2 / 4.8 / 10.0 %,
// ITL 9.7 %: GPUStack's closed loops miss on a front-end cost the profiles
// do not carry (vLLM 0.11 and trtllm-serve: ≈ 45–60 ms measured, 11–17 ms
// simulated), the RTX 3090 sweeps saturate in the simulator at rates the
// real servers held, and AMD's static batches move the shared overhead
// factors a little for every fold. Of the targets, TTFT per
// category ≤ 25 % holds for batch-1, static and open loop but not closed
// loop; TTFT overall ≤ 15 % and saturation throughput ≤ 10 % are missed.
// Latest (TensorRT-LLM's runtimes prepare decode steps while the GPU
// runs, host_overlap): TTFT 15.9 % overall, 19.4 % open loop; throughput
// 11.0 %, static 11.5 %, saturation 10.9 % — TensorRT-LLM 10.0 %,
// GPUStack 11.8 %; ITL 9.2 %. The round after (TGI's prefill budget, vLLM
// V0's step budget: no corpus row runs either) left every figure as it
// was; the slack on batch-1 (6.0 %), static (0.7 %), closed-loop TTFT
// (32.6 %) and closed-loop throughput (4.7 %) was narrowed then.
// Latest (the GEMMs' efficiency ramp scaled by each GPU's machine
// balance, halfTokens): TTFT 13.4 % overall (the 15 % met),
// 14.7 % open loop, batch-1 7.2 % (6.0 before), closed loop 33.8 %
// (32.6); throughput 10.8 %, static 12.3 % (11.5), saturation 10.6 %
// (10.9) — TensorRT-LLM 10.0 %, GPUStack 11.4 %; ITL 10.0 % (9.2).
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
		{"TTFT batch1", 8},
		{"TTFT static", 2},
		{"TTFT rate", 16},
		{"TTFT closed", 35},
		{"throughput all", 11.5},
		{"throughput static", 13},
		{"throughput rate", 10.5},
		{"throughput closed", 6},
		{"throughput saturation", 11},
		{"ITL all", 10.5},
	} {
		if got := SummaryMedian(sum, tc.name); !(got <= tc.max) {
			t.Errorf("%s: median |error| %.1f%%, want ≤ %g%%", tc.name, got, tc.max)
		}
	}
	// Saturation throughput per source: the TensorRT-LLM peak-throughput
	// tables (41 rows; 10.0 % since the session runtime's host work
	// overlaps its decode steps, 10.5 % before) and the two closed loops
	// at their top concurrency within the 10 % or nearly;
	// GPUStack's bursts and top closed loop (10 rows) are pinned where
	// they are (13.0 → 11.6 % once the trtllm profiles admit as
	// GUARANTEED_NO_EVICT; 11.8 % now).
	for _, s := range SummarizeBySource(res.Rows) {
		t.Logf("%-14s saturation throughput median |error| %5.1f%%", s.Source, s.Saturation)
		max, ok := map[string]float64{"nvidia-trtllm": 10.5, "wmx": 8, "mushfiq": 8, "gpustack": 12.5}[s.Source]
		if ok && !(s.Saturation <= max) {
			t.Errorf("%s: saturation throughput median |error| %.1f%%, want ≤ %g%%", s.Source, s.Saturation, max)
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
		{"lmdeploy", "", ""}, // TurboMind: dynamic split&fuse
		{"sglang", "", "v0"},
		{"trtllm", "", ""},
		{"trtllm-serve", "", ""},
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
// measured rate within the limit and the lowest beyond it. Three of four
// land in their bracket (or above the highest rate measured, where none
// missed) — the FP8 70B on two H100 PCIe since their all-reduces go over
// PCIe, not NVLink; the BF16 70B on the same pair is still predicted
// above it (docs/simulator-validation.md says why). The bounds pin that,
// so a change either way shows.
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
		{16, 32, "inside"},
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
// ttft sim calibrate) reaches the deployment; 0 keeps the engine default
// (vLLM's 1024 on an H100).
func TestCorpusRowMaxSeqs(t *testing.T) {
	for _, tc := range []struct{ seqs, want int }{{0, 1024}, {1, 1}, {8, 8}} {
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

// TestMarkSaturation: which rows count as saturation throughput is decided
// by the load alone — static batches publishing a throughput, bursts, the
// top concurrency of a closed-loop sweep of two or more points — never by
// open-loop rates (their req/s over a finite run is set by the drain of
// the longest requests) or lone points.
func TestMarkSaturation(t *testing.T) {
	head := "source,url,engine,version,profile,sched,frontend,model,gpu,tp,dtype,kv,prompt,output,lengths,load,value,requests,ttft_ms,ttft_stat,e2e_ms,tput,tput_unit\n"
	row := func(src, load, value, prompt, ttft, e2e, tput string) string {
		return src + ",https://x,vllm,1,vllm,v1,http,llama-3.1-8b,h100-sxm,1,bf16,auto," + prompt + ",128,fixed," + load + "," + value + ",0," + ttft + ",p50," + e2e + "," + tput + ",req_s\n"
	}
	body := head +
		row("a", "static", "64", "128", "", "", "100") + // peak-throughput table: yes
		row("a", "static", "8", "128", "", "900", "") + // latency table (e2e only): no
		row("b", "burst", "1000", "128", "", "", "5") + // rate inf: yes
		row("c", "closed", "1", "256", "20", "", "1") + // sweep of three, not the top: no
		row("c", "closed", "32", "260", "90", "", "30") + // top of the sweep (means differ a little): yes
		row("c", "closed", "8", "256", "40", "", "") + // no throughput published: no
		row("d", "closed", "1", "1024", "", "", "75") + // a lone point: no
		row("e", "rate", "4", "206", "50", "", "3") + // open loop: no
		row("e", "rate", "32", "206", "160", "", "8") // top rate of an open loop: no
	rows, err := ParseCorpus(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true, false, true, false, false, false, false}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if r.Saturation != want[i] {
			t.Errorf("row %d (%s %s %g): saturation %v, want %v", i+1, r.Source, r.Load, r.Value, r.Saturation, want[i])
		}
	}
}

// TestKernelRoofline: GEMMs and attention meet their rooflines one after
// the other. A batch-1 decode (both memory-bound) takes the bytes' time; a
// large decode batch whose GEMMs are compute-bound still pays for reading
// its KV cache, so it takes clearly longer than one roofline over the
// step's summed FLOPs and bytes would give.
func TestKernelRoofline(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-2-13b", GPU: "h200", Engine: "trtllm", Quantization: "fp8", KVCacheDtype: "fp8", MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		b, ctx   int
		min, max float64 // (total − comm − overheads) / max(compute, memory)
	}{
		{"batch 1, memory-bound", 1, 1024, 1, 1.01},
		{"batch 1024, compute-bound GEMMs + KV reads", 1024, 192, 1.5, 2.1},
	} {
		bd := d.DecodeTime(tc.b, tc.ctx)
		r := (bd.Total - bd.Comm - bd.Overhead) / math.Max(bd.Compute, bd.Memory)
		t.Logf("%s: ×%.3f", tc.name, r)
		if r < tc.min || r > tc.max {
			t.Errorf("%s: kernel time %.2f ms is ×%.2f of max(compute %.2f, memory %.2f) ms, want ×%g–%g", tc.name, (bd.Total-bd.Comm-bd.Overhead)*1e3, r, bd.Compute*1e3, bd.Memory*1e3, tc.min, tc.max)
		}
	}
}

// TestFitInSample fits the physics on every source at once and reports how
// well the model's form can reproduce the saturation rows it was fitted
// to — the in-sample counterpart of TestLeaveOneSourceOut, which shows
// what the form allows when the priors are not the limit (achieved: the
// 41 TensorRT-LLM peak-throughput rows at 8.4 %, loss 0.0250, since the
// GEMMs' efficiency ramp scales with each GPU's machine balance — the
// static tables of datacentre GPUs ask a little less of it than the
// GeForce sweeps that it fits out of sample; 8.3 %, 0.0234 since the
// session runtime's host work overlaps its decode steps; 8.7 %, 0.0235
// before, with AMD's MI300X latency table in the fit; 8.5 %, 0.0226
// before that). The model
// before this form — one roofline per step, one memory efficiency for
// both vendors — read 11.3 % at loss 0.0273.
func TestFitInSample(t *testing.T) {
	rows, err := DefaultCorpus()
	if err != nil {
		t.Fatal(err)
	}
	cat := LOSOPriors(DefaultCatalog())
	s, loss, err := FitPhysics(cat, rows)
	if err != nil {
		t.Fatal(err)
	}
	res, err := evalRows(context.Background(), cat, cheapRows(rows), s)
	if err != nil {
		t.Fatal(err)
	}
	var sat []float64
	for _, r := range res {
		if r.Saturation && !math.IsNaN(r.TErr) {
			sat = append(sat, math.Abs(r.TErr))
		}
	}
	med := medianOf(sat)
	t.Logf("in sample: loss %.4f, scales %+v, static saturation rows %d, median |error| %.1f%%", loss, s, len(sat), med)
	if len(sat) != 41 || med > 9.5 || loss > 0.026 {
		t.Errorf("in-sample fit: %d saturation rows at median %.1f%%, loss %.4f; want 41 at ≤ 9.5%%, loss ≤ 0.026", len(sat), med, loss)
	}
}

package sim

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Config describes one simulated deployment (one replica). Field names follow
// vLLM's engine arguments where they mean the same.
type Config struct {
	Model              string `yaml:"model" json:"model"`
	GPU                string `yaml:"gpu" json:"gpu"`
	TensorParallelSize int    `yaml:"tensor_parallel_size,omitempty" json:"tensor_parallel_size,omitempty"`
	Quantization       string `yaml:"quantization,omitempty" json:"quantization,omitempty"` // "", fp8, int8, int4, awq, gptq
	// QuantGroupSize is the number of weights sharing one 16-bit scale in
	// the int8/int4/awq/gptq formats (0: 128, AWQ's and GPTQ's default).
	QuantGroupSize       int     `yaml:"quant_group_size,omitempty" json:"quant_group_size,omitempty"`
	KVCacheDtype         string  `yaml:"kv_cache_dtype,omitempty" json:"kv_cache_dtype,omitempty"` // "auto" or "fp8"
	EnablePrefixCaching  bool    `yaml:"enable_prefix_caching,omitempty" json:"enable_prefix_caching,omitempty"`
	MaxNumSeqs           int     `yaml:"max_num_seqs,omitempty" json:"max_num_seqs,omitempty"`
	MaxNumBatchedTokens  int     `yaml:"max_num_batched_tokens,omitempty" json:"max_num_batched_tokens,omitempty"`
	GPUMemoryUtilization float64 `yaml:"gpu_memory_utilization,omitempty" json:"gpu_memory_utilization,omitempty"`
	MaxModelLen          int     `yaml:"max_model_len,omitempty" json:"max_model_len,omitempty"`
	BlockSize            int     `yaml:"block_size,omitempty" json:"block_size,omitempty"`
	// DisableChunkedPrefill schedules whole prompts only (vLLM v0 style).
	DisableChunkedPrefill bool `yaml:"disable_chunked_prefill,omitempty" json:"disable_chunked_prefill,omitempty"`
	// Scheduler is "v1" (default: vLLM ≥ 0.8, chunked prefill mixed with
	// decodes) or "v0" (vLLM ≤ 0.6 default: whole-prompt prefill steps take
	// priority over decode steps and never mix with them).
	Scheduler string `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// Engine selects the engine profile (vllm, trtllm, sglang, or a user one).
	Engine string `yaml:"engine,omitempty" json:"engine,omitempty"`
	// Speculative decoding; zero NumSpeculativeTokens disables it.
	Speculative SpecConfig `yaml:"speculative,omitempty" json:"speculative,omitzero"`
	// KVRetention is the engine's KV policy: "" or "full" (vLLM: the whole
	// sequence cached, prefix caching as configured), "sliding:W" (attend
	// to the last W tokens; older blocks are freed) or "compress:R" (KV
	// stored at 1/R of its bytes, e.g. low-bit KV: more blocks, less to
	// read; attention FLOPs unchanged) or "evict:F" (score-based eviction:
	// when a conversation turn finishes, the fraction F of its cached
	// prompt blocks with the lowest attention scores is dropped; the next
	// turn attends to the kept blocks only and does not recompute the
	// dropped ones; needs EnablePrefixCaching, where the history is kept).
	// Per-turn compression of a session is modelled per session only
	// (SimulateSession).
	KVRetention string `yaml:"kv_retention,omitempty" json:"kv_retention,omitempty"`
	// Jitter is the relative standard deviation of step times (0 =
	// deterministic); Seed makes it reproducible.
	Jitter float64 `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	Seed   int64   `yaml:"seed,omitempty" json:"seed,omitempty"`
	// AllowLongMaxModelLen lets MaxModelLen exceed the model's own limit
	// (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN).
	AllowLongMaxModelLen bool `yaml:"allow_long_max_model_len,omitempty" json:"allow_long_max_model_len,omitempty"`
}

// SpecConfig is speculative decoding: k draft tokens per step, each accepted
// with probability Acceptance; DraftModel (from the catalog) costs k decode
// steps of its own per engine step, its weights and its KV cache take memory
// beside the target's; empty means a free drafter (n-gram).
type SpecConfig struct {
	NumSpeculativeTokens int     `yaml:"num_speculative_tokens,omitempty" json:"num_speculative_tokens,omitempty"`
	Acceptance           float64 `yaml:"acceptance,omitempty" json:"acceptance,omitempty"`
	DraftModel           string  `yaml:"draft_model,omitempty" json:"draft_model,omitempty"`
	// DraftQuantization is the draft model's weight format ("": the
	// target's Quantization; "bf16" forces 16-bit).
	DraftQuantization string `yaml:"draft_quantization,omitempty" json:"draft_quantization,omitempty"`
}

// Deployment is a Config resolved against a catalog: everything the engine
// needs to schedule and time steps.
type Deployment struct {
	Config  Config
	Model   Model
	GPU     GPU
	Profile EngineProfile
	Draft   *Model

	TP                  int
	BlockSize           int
	NumBlocks           int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int
	// Window is the sliding-window size in tokens (0: none), from
	// KVRetention.
	Window int
	// Evict is the fraction of a finished turn's retained prompt blocks
	// that score-based eviction drops (0: none), from KVRetention evict:F.
	Evict float64

	ComputeDtype string
	WeightBytes  float64 // whole model
	BytesPerW    float64
	KVBytesTok   float64 // per token, per GPU
	KVGBPerGPU   float64
	WeightGBGPU  float64
	// Draft model (speculative decoding): weight bytes (per GPU: the draft
	// is replicated, not sharded) and KV bytes per token.
	DraftWeightBytes float64
	DraftKVBytesTok  float64
	// WeightOnly: int8/int4 weights are unpacked to 16-bit before the
	// matrix multiply, costing the profile's dequant_overhead.
	WeightOnly bool

	peakFLOPS float64 // per GPU, compute dtype
	peak16    float64 // per GPU, 16-bit
	// Linear FLOPs per token outside the LM head, and the head's per
	// sequence, for the whole model.
	linearFlopsTok float64
	headFlopsSeq   float64
	attnDim        float64
	// MoE: bytes of non-expert weights and of one expert across layers.
	denseBytes, expertBytes float64
	draftFmt                weightFormat
}

// Defaults fills unset fields with vLLM's defaults.
func (c Config) withDefaults() Config {
	if c.TensorParallelSize <= 0 {
		c.TensorParallelSize = 1
	}
	if c.GPUMemoryUtilization <= 0 {
		c.GPUMemoryUtilization = 0.9
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.KVCacheDtype == "" {
		c.KVCacheDtype = "auto"
	}
	if c.Engine == "" {
		c.Engine = "vllm"
	}
	return c
}

// Resolve checks a configuration against the catalog (nil: the embedded
// one) and sizes its KV cache. Errors say what is wrong and what would fit.
func Resolve(cat *Catalog, cfg Config) (*Deployment, error) {
	if cat == nil {
		cat = DefaultCatalog()
	}
	d, err := lookUp(cat, cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	wf, kvBytes, err := d.resolvePrecision()
	if err != nil {
		return nil, err
	}
	if err := d.resolveMaxModelLen(); err != nil {
		return nil, err
	}
	d.resolveShapes(wf, kvBytes)
	if err := d.resolveRetention(); err != nil {
		return nil, err
	}
	if err := d.resolveDraft(cat, kvBytes); err != nil {
		return nil, err
	}
	if err := d.sizeKVCache(); err != nil {
		return nil, err
	}
	if err := d.resolveBatching(); err != nil {
		return nil, err
	}
	if j := d.Config.Jitter; j < 0 || j > 1 {
		return nil, fmt.Errorf("jitter %g must be in [0, 1]", j)
	}
	return d, nil
}

// lookUp finds the model, the GPU and the engine profile of cfg (with its
// defaults) and checks that the tensor-parallel size splits the model.
func lookUp(cat *Catalog, cfg Config) (*Deployment, error) {
	m, err := cat.Model(cfg.Model)
	if err != nil {
		return nil, err
	}
	g, err := cat.GPU(cfg.GPU)
	if err != nil {
		return nil, err
	}
	prof, err := cat.Engine(cfg.Engine)
	if err != nil {
		return nil, err
	}
	if cfg.MaxNumSeqs <= 0 {
		// The engine's own batch limit (vLLM's 256 unless the profile
		// names another).
		cfg.MaxNumSeqs = 256
		if prof.MaxNumSeqs > 0 {
			cfg.MaxNumSeqs = prof.MaxNumSeqs
		}
		if prof.BatchDefaults == "vllm-v1" && vllmLargeGPU(g) {
			cfg.MaxNumSeqs = 1024
		}
	}
	d := &Deployment{Config: cfg, Model: *m, GPU: *g, Profile: *prof, TP: cfg.TensorParallelSize, BlockSize: cfg.BlockSize, MaxNumSeqs: cfg.MaxNumSeqs}
	tp := d.TP
	if m.Heads%tp != 0 {
		return nil, fmt.Errorf("tensor parallel size %d does not divide %s's %d attention heads (try one of %v)", tp, m.Name, m.Heads, divisors(m.Heads))
	}
	if m.KVHeads%tp != 0 && tp%m.KVHeads != 0 {
		return nil, fmt.Errorf("tensor parallel size %d and %s's %d KV heads: one must divide the other", tp, m.Name, m.KVHeads)
	}
	return d, nil
}

// resolvePrecision sets the weight format and the compute dtype with its
// peak FLOPS, and returns the weight format and the KV cache's bytes per
// element.
func (d *Deployment) resolvePrecision() (wf weightFormat, kvBytes float64, err error) {
	cfg, g := &d.Config, &d.GPU
	wf, err = parseWeightFormat(cfg.Quantization, cfg.QuantGroupSize)
	if err != nil {
		return wf, 0, err
	}
	d.BytesPerW = wf.bytesPerW
	d.WeightOnly = wf.weightOnly
	kvBytes = 2.0
	switch strings.ToLower(cfg.KVCacheDtype) {
	case "auto", "bf16", "fp16":
	case "fp8", "fp8_e4m3", "fp8_e5m2":
		kvBytes = 1
	default:
		return wf, 0, fmt.Errorf("unknown kv-cache-dtype %q (known: auto, fp8)", cfg.KVCacheDtype)
	}
	// Compute dtype: W8A8 FP8 where the GPU has FP8 tensor cores; otherwise
	// FP8 is weight-only (vLLM's Marlin path) and the math stays 16-bit.
	d.ComputeDtype = "bf16"
	if g.TFLOPS["bf16"] <= 0 {
		d.ComputeDtype = "fp16"
	}
	if strings.EqualFold(cfg.Quantization, "fp8") && g.TFLOPS["fp8"] > 0 {
		d.ComputeDtype = "fp8"
	}
	if d.Profile.Int8Activations && (wf.name == "int4" || wf.name == "int8") && g.TFLOPS["int8"] > 0 {
		d.ComputeDtype = "int8"
	}
	d.peakFLOPS = g.TFLOPS[d.ComputeDtype] * 1e12
	d.peak16 = g.TFLOPS["bf16"] * 1e12
	if d.peak16 <= 0 {
		d.peak16 = g.TFLOPS["fp16"] * 1e12
	}
	return wf, kvBytes, nil
}

// resolveMaxModelLen is the model's own limit unless the config sets one,
// which may exceed it only when allowed.
func (d *Deployment) resolveMaxModelLen() error {
	cfg, m := &d.Config, &d.Model
	switch {
	case cfg.MaxModelLen <= 0:
		d.MaxModelLen = m.MaxModelLen
	case m.MaxModelLen > 0 && cfg.MaxModelLen > m.MaxModelLen && !cfg.AllowLongMaxModelLen:
		return fmt.Errorf("max model length %d exceeds %s's maximum of %d", cfg.MaxModelLen, m.Name, m.MaxModelLen)
	default:
		d.MaxModelLen = cfg.MaxModelLen
	}
	return nil
}

// resolveShapes sets the weights' bytes, the FLOPs per token and per
// sequence, and the KV bytes per token per GPU.
func (d *Deployment) resolveShapes(wf weightFormat, kvBytes float64) {
	m := &d.Model
	params := m.ParamsB * 1e9
	active := params
	if m.ActiveParamsB > 0 {
		active = m.ActiveParamsB * 1e9
	}
	emb := float64(m.Vocab) * float64(m.Hidden)
	headShare := emb // embedding table
	if !m.TiedEmbeddings {
		headShare = 2 * emb
	}
	d.WeightBytes = wf.modelBytes(m)
	d.linearFlopsTok = 2 * math.Max(active-headShare, active*0.5)
	d.headFlopsSeq = 2 * emb
	d.attnDim = float64(m.Heads * m.HeadDim)
	if m.Experts > 0 {
		// The embedding table and head may keep 16-bit (awq/gptq); the
		// dense share absorbs the difference.
		perExpert := (params - active) / float64(m.Experts-m.ActiveExperts)
		d.expertBytes = perExpert * d.BytesPerW
		d.denseBytes = d.WeightBytes - float64(m.Experts)*d.expertBytes
	}
	kvHeadsGPU := math.Max(1, float64(m.KVHeads)/float64(d.TP))
	d.KVBytesTok = 2 * float64(m.Layers) * kvHeadsGPU * float64(m.HeadDim) * kvBytes
}

// resolveRetention applies the engine's KV retention policy.
func (d *Deployment) resolveRetention() error {
	cfg := &d.Config
	if cfg.KVRetention == "" {
		return nil
	}
	r, err := ParseRetention(cfg.KVRetention)
	if err != nil {
		return err
	}
	switch r.Kind {
	case "full":
	case "sliding":
		d.Window = r.Window
	case "compress":
		d.KVBytesTok /= r.Ratio
	case "evict":
		// The kept history lives in the prefix cache (as with full):
		// without it there is nothing to evict from.
		if !cfg.EnablePrefixCaching {
			return fmt.Errorf("kv retention %q evicts from the prefix cache, where a conversation's history is kept between turns; enable prefix caching (--enable-prefix-caching)", cfg.KVRetention)
		}
		d.Evict = r.Evict
	default:
		return fmt.Errorf("kv retention %q is modelled per session only (sim.SimulateSession); the engine takes full, sliding:W, compress:R or evict:F", cfg.KVRetention)
	}
	return nil
}

// resolveDraft checks speculative decoding and sizes its draft model.
func (d *Deployment) resolveDraft(cat *Catalog, kvBytes float64) error {
	cfg := &d.Config
	sp := cfg.Speculative
	if sp.NumSpeculativeTokens < 0 || sp.Acceptance < 0 || sp.Acceptance >= 1 && sp.NumSpeculativeTokens > 0 {
		return fmt.Errorf("speculative decoding needs num_speculative_tokens ≥ 0 and acceptance in [0, 1), got %d and %g", sp.NumSpeculativeTokens, sp.Acceptance)
	}
	if sp.DraftModel == "" {
		return nil
	}
	dm, err := cat.Model(sp.DraftModel)
	if err != nil {
		return fmt.Errorf("draft model: %w", err)
	}
	cp := *dm
	d.Draft = &cp
	dq := sp.DraftQuantization
	if dq == "" {
		dq = cfg.Quantization
	}
	dwf, err := parseWeightFormat(dq, cfg.QuantGroupSize)
	if err != nil {
		return fmt.Errorf("draft model: %w", err)
	}
	d.draftFmt = dwf
	// The draft runs unsharded on every GPU of the group (vLLM's
	// draft_tensor_parallel_size=1), with its own KV cache in the same
	// blocks as the target's, so it shrinks the target's KV cache.
	d.DraftWeightBytes = dwf.modelBytes(&cp)
	d.DraftKVBytesTok = 2 * float64(cp.Layers) * float64(cp.KVHeads) * float64(cp.HeadDim) * kvBytes
	return nil
}

// sizeKVCache gives the KV cache what vLLM does: memory × utilisation per
// GPU after the weights and the profiled activations.
func (d *Deployment) sizeKVCache() error {
	cfg, g, prof, tp := &d.Config, &d.GPU, &d.Profile, d.TP
	mem := g.MemoryGB
	if g.UsableGB > 0 {
		mem = g.UsableGB
	}
	budget := mem * cfg.GPUMemoryUtilization
	d.WeightGBGPU = (d.WeightBytes/float64(tp) + d.DraftWeightBytes) / 1e9
	d.KVGBPerGPU = budget - d.WeightGBGPU - prof.ReserveGB
	if f := prof.KVFreeFraction; f > 0 {
		// lmdeploy TurboMind (cache_max_entry_count) and TensorRT-LLM
		// (free_gpu_memory_fraction): the cache takes a fraction of what
		// is free once the weights are loaded; the rest stays for
		// activations and workspaces.
		d.KVGBPerGPU = f * (mem - d.WeightGBGPU - prof.ReserveGB)
	}
	if d.KVGBPerGPU <= 0 {
		return fmt.Errorf("%s does not fit on %d× %s: weights need %.1f GB per GPU, available %.1f GB (%.0f GB × %.2f utilisation − %.1f GB reserve); try a larger --tensor-parallel-size, --quantization fp8 or a bigger GPU",
			d.Model.Name, tp, g.Name, d.WeightGBGPU, budget-prof.ReserveGB, mem, cfg.GPUMemoryUtilization, prof.ReserveGB)
	}
	d.NumBlocks = int(d.KVGBPerGPU * 1e9 / ((d.KVBytesTok + d.DraftKVBytesTok) * float64(d.BlockSize)))
	if d.NumBlocks*d.BlockSize < d.MaxModelLen {
		return fmt.Errorf("max model length %d is larger than the %d tokens the KV cache can hold on %d× %s (%.1f GB per GPU); lower --max-model-len or raise --gpu-memory-utilization",
			d.MaxModelLen, d.NumBlocks*d.BlockSize, tp, g.Name, d.KVGBPerGPU)
	}
	return nil
}

// resolveBatching sets the scheduler and the per-step token budget.
func (d *Deployment) resolveBatching() error {
	cfg := &d.Config
	if cfg.Scheduler == "" {
		cfg.Scheduler = d.Profile.Scheduler
	}
	switch cfg.Scheduler {
	case "", "v1":
	case "v0":
		cfg.DisableChunkedPrefill = true
	default:
		return fmt.Errorf("unknown scheduler %q (known: v1, v0)", cfg.Scheduler)
	}
	noChunk := cfg.DisableChunkedPrefill
	if cfg.Scheduler == "v0" && d.Profile.PrefillChunks {
		// Prefill steps apart from decodes, but long prompts chunked
		// (SGLang): the budget need not hold a whole prompt.
		noChunk = false
	}
	d.MaxNumBatchedTokens = cfg.MaxNumBatchedTokens
	if d.MaxNumBatchedTokens <= 0 {
		// vLLM's API-server default: 8192 on GPUs with ≥ 70 GiB, else 2048;
		// without chunked prefill, at least one whole maximum-length prompt.
		// vLLM V0's scheduler (whole prompts, prefill first) takes
		// max(max_model_len, 2048) on every GPU: its SchedulerConfig
		// default with chunked prefill off (0.5–0.8), before the
		// per-GPU-size defaults of V1's API server existed.
		v0Whole := cfg.Scheduler == "v0" && !d.Profile.PrefillChunks
		d.MaxNumBatchedTokens = 2048
		if d.GPU.MemoryGB*1e9 >= 70*(1<<30) && !v0Whole {
			d.MaxNumBatchedTokens = 8192
		}
		if d.Profile.BatchDefaults == "vllm-v1" && cfg.Scheduler != "v0" {
			d.MaxNumBatchedTokens = 2048
			if vllmLargeGPU(&d.GPU) {
				d.MaxNumBatchedTokens = 8192
			}
		}
		if d.Profile.PrefillChunks {
			// SGLang's chunked_prefill_size default by GPU memory
			// (server_args: < 35 GiB 2048, < 160 GiB 8192, else 16384).
			gib := d.GPU.MemoryGB * 1e9 / (1 << 30)
			switch {
			case gib < 35:
				d.MaxNumBatchedTokens = 2048
			case gib < 160:
				d.MaxNumBatchedTokens = 8192
			default:
				d.MaxNumBatchedTokens = 16384
			}
		}
		if noChunk && d.MaxModelLen > d.MaxNumBatchedTokens {
			d.MaxNumBatchedTokens = d.MaxModelLen
		}
	}
	if noChunk && d.MaxNumBatchedTokens < d.MaxModelLen {
		return fmt.Errorf("max-num-batched-tokens %d is smaller than max-model-len %d with chunked prefill disabled", d.MaxNumBatchedTokens, d.MaxModelLen)
	}
	if d.MaxNumBatchedTokens < d.MaxNumSeqs {
		return fmt.Errorf("max-num-batched-tokens %d must be at least max-num-seqs %d", d.MaxNumBatchedTokens, d.MaxNumSeqs)
	}
	return nil
}

// vllmLargeGPU is vLLM's test for its larger API-server batch defaults
// (EngineArgs since 0.9, PR #17885): at least 70 GiB of memory and not an
// A100, on which the larger token budget measured slower.
func vllmLargeGPU(g *GPU) bool {
	return g.MemoryGB*1e9 >= 70*(1<<30) && !strings.Contains(strings.ToLower(g.Name), "a100")
}

func divisors(n int) []int {
	var out []int
	for i := 1; i <= n && i <= 16; i++ {
		if n%i == 0 {
			out = append(out, i)
		}
	}
	return out
}

// Name is a short label, e.g. "llama-3-70b tp4 a100-80gb fp8kv".
func (d *Deployment) Name() string {
	s := fmt.Sprintf("%s tp%d %s", d.Model.Name, d.TP, d.GPU.Name)
	if q := strings.ToLower(d.Config.Quantization); q != "" && q != "none" && q != "auto" && q != "bf16" && q != "fp16" {
		s += " " + q
	}
	if d.KVBytesTok > 0 && strings.HasPrefix(strings.ToLower(d.Config.KVCacheDtype), "fp8") {
		s += " fp8kv"
	}
	return s
}

// stepLoad summarises one engine step's batch for the timing model.
type stepLoad struct {
	tokens   int     // new tokens computed (prefill chunks + decodes + draft verifications)
	seqs     int     // sequences in the batch
	attn     float64 // Σ n·(c + n/2): attention work in token-pairs
	ctxRead  float64 // Σ c: cached tokens whose KV is read
	decodes  int     // sequences decoding (for the draft model's cost)
	draftCtx float64 // Σ c over decoding sequences
	prefill  bool    // some sequence is prefilling (no CUDA graph)
}

// StepBreakdown is one step's time split by cause, in seconds.
type StepBreakdown struct {
	Compute, Memory, Comm, Overhead, Draft, Total float64
}

// stepTime is the roofline of each kernel class — the GEMMs' max(compute,
// weight streaming) plus attention's max(compute, KV reads) — over the TP
// group, plus the all-reduces, plus software overheads.
func (d *Deployment) stepTime(l stepLoad) StepBreakdown {
	var b StepBreakdown
	if l.tokens == 0 {
		return b
	}
	p := &d.Profile
	tp := float64(d.TP)
	T := float64(l.tokens)
	// GEMMs run in the compute dtype; attention stays 16-bit (FlashAttention).
	half := d.halfTokens()
	eff := p.ComputeEffMax * T / (T + half)
	gemmEff := eff
	if d.ComputeDtype == "fp8" && p.FP8ComputeEffMax > 0 {
		gemmEff = p.FP8ComputeEffMax * T / (T + half)
	}
	gemm := d.linearFlopsTok*T + d.headFlopsSeq*float64(l.seqs)
	attn := 4 * float64(d.Model.Layers) * d.attnDim * l.attn
	gemmTime := gemm / (d.peakFLOPS * gemmEff)
	if d.WeightOnly {
		// Weight-only formats unpack every weight to 16-bit in registers
		// before the multiply: extra ALU work proportional to the GEMMs.
		gemmTime *= 1 + p.DequantOverhead
	}
	attnEff := eff
	if p.AttnEff > 0 {
		attnEff *= p.AttnEff
	}
	gemmC := gemmTime / tp
	attnC := attn / (d.peak16 * attnEff) / tp
	b.Compute = gemmC + attnC

	wbytes := d.WeightBytes
	if d.Model.Experts > 0 {
		// Expected distinct experts a layer touches for T tokens.
		e, k := float64(d.Model.Experts), float64(d.Model.ActiveExperts)
		touched := e * (1 - math.Pow(1-k/e, T))
		wbytes = d.denseBytes + touched*d.expertBytes
	}
	ctxRead := l.ctxRead
	if p.GQAKVReread && d.Model.KVHeads > 0 {
		ctxRead *= float64(d.Model.Heads) / float64(d.Model.KVHeads)
	}
	bw := d.GPU.BandwidthGBs * 1e9 * p.MemEff
	gemmM := wbytes / tp / bw
	attnM := d.KVBytesTok * (ctxRead + T) / bw
	b.Memory = gemmM + attnM

	if d.TP > 1 {
		msg := T * float64(d.Model.Hidden) * 2
		oneWay := d.GPU.InterconnectGBs / 2 * 1e9 * p.LinkEff
		per := p.AllReduceLatencyUs*1e-6 + 2*(tp-1)/tp*msg/oneWay
		b.Comm = 2 * float64(d.Model.Layers) * per
	}
	layerUs := p.LayerOverheadUs
	if !l.prefill || l.tokens <= p.GraphMaxTokens {
		layerUs = p.DecodeLayerOverheadUs
	}
	fixed := float64(d.Model.Layers)*layerUs*1e-6 + p.StepOverheadMs*1e-3
	host := float64(l.seqs)*p.SeqOverheadUs*1e-6 + T*p.TokenOverheadUs*1e-6
	if k := d.Config.Speculative.NumSpeculativeTokens; k > 0 && d.Draft != nil && l.decodes > 0 {
		b.Draft = float64(k) * d.draftStep(l.decodes, l.draftCtx)
	}
	// Each kernel meets its own roofline: the GEMMs (bound by their FLOPs
	// or by streaming the weights) and attention (by its FLOPs or by
	// reading the KV cache) run one after the other in every layer, so a
	// large decode batch whose GEMMs are compute-bound still waits for
	// attention to read its context. One roofline over the step's summed
	// FLOPs and bytes would let the KV reads hide under GEMM compute.
	gpu := math.Max(gemmC, gemmM) + math.Max(attnC, attnM) + b.Comm + b.Draft + float64(d.Model.Layers)*layerUs*1e-6
	if p.HostOverlap && !l.prefill {
		// A decode step's inputs were prepared on the host while the GPU
		// ran the step before: only what outlasts the GPU's work shows.
		// (A step that starts prompts is prepared before it is launched.)
		host = math.Max(0, host-gpu)
	}
	b.Overhead = fixed + host
	b.Total = gpu + p.StepOverheadMs*1e-3 + host
	return b
}

// refBalance is the 16-bit machine balance at which a profile's
// compute_half_tokens is stated: the H100 SXM's, 989 dense TFLOPS over
// 3.35 TB/s, ≈ 295 FLOP per byte.
const refBalance = 989e12 / 3350e9

// halfTokens is the tokens per step at which this deployment's GEMMs
// reach half of their peak efficiency: the profile's compute_half_tokens
// scaled by the GPU's 16-bit machine balance (peak FLOPS per byte of
// HBM bandwidth) over the H100 SXM's.
//
// Why the balance: a GEMM over T tokens does 2·T FLOPs per 16-bit weight
// it streams, so it turns from bound by streaming the weights to bound
// by compute at T ≈ the balance (its ridge point), and the kernels' fall
// from their peak efficiency — tiles part-filled, loads not hidden under
// math — is the rounded corner of that roofline, which sits where the
// ridge does. A constant ramp put the corner of a GPU of a quarter of
// the H100's balance (an RTX 3090: 71 TFLOPS over 936 GB/s) four times
// too far out, timing its 200-token prefills at about half of peak where
// measured runs needed two thirds (docs/simulator-validation.md).
// CPU profiles (compute_half_tokens ≤ 1: a core's SIMD lanes fill at one
// token) keep theirs.
func (d *Deployment) halfTokens() float64 {
	h := d.Profile.ComputeHalfTokens
	if h <= 1 || d.peak16 <= 0 || d.GPU.BandwidthGBs <= 0 {
		return h
	}
	return h * d.peak16 / (d.GPU.BandwidthGBs * 1e9) / refBalance
}

// draftStep is one decode step of the draft model for n sequences, run on
// the same GPUs (weights replicated, so no all-reduce), with 16-bit math on
// weights in the draft's own format.
func (d *Deployment) draftStep(n int, ctx float64) float64 {
	m := d.Draft
	p := &d.Profile
	N := float64(n)
	params := m.ParamsB * 1e9
	flops := 2*params*N + 4*float64(m.Layers)*float64(m.Heads*m.HeadDim)*ctx
	peak := d.GPU.TFLOPS["bf16"]
	if peak <= 0 {
		peak = d.GPU.TFLOPS["fp16"]
	}
	if p.Int8Activations && (d.draftFmt.name == "int4" || d.draftFmt.name == "int8") && d.GPU.TFLOPS["int8"] > 0 {
		peak = d.GPU.TFLOPS["int8"]
	}
	tc := flops / (peak * 1e12 * p.ComputeEffMax * N / (N + d.halfTokens()))
	if d.draftFmt.weightOnly {
		tc *= 1 + p.DequantOverhead
	}
	tm := (d.DraftWeightBytes + d.DraftKVBytesTok*ctx) / (d.GPU.BandwidthGBs * 1e9 * p.MemEff)
	return math.Max(tc, tm) + p.StepOverheadMs*1e-3*0.25
}

// PrefillTime is the time of one step that prefills n prompt tokens after c
// cached ones for a single sequence: the batch-1 TTFT minus API overhead.
func (d *Deployment) PrefillTime(n, c int) StepBreakdown {
	return d.stepTime(stepLoad{tokens: n, seqs: 1, attn: float64(n) * (float64(c) + float64(n)/2), ctxRead: float64(c), prefill: true})
}

// DecodeTime is one decode step of b sequences of context ctx each.
func (d *Deployment) DecodeTime(b, ctx int) StepBreakdown {
	return d.stepTime(stepLoad{tokens: b, seqs: b, attn: float64(b) * float64(ctx), ctxRead: float64(b) * float64(ctx), decodes: b, draftCtx: float64(b * ctx)})
}

// APIDelay is the time between a request reaching the API server and the
// engine seeing it when others requests are already in flight there: the
// profile's fixed api_overhead_ms plus api_inflight_ms per other request.
// Both the live server and the offline runner use it, so they agree.
func (d *Deployment) APIDelay(others int) time.Duration {
	ms := d.Profile.APIOverheadMs + float64(max(0, others))*d.Profile.APIInflightMs
	return time.Duration(ms * 1e6)
}

// String is Name, for fmt.
func (d *Deployment) String() string { return d.Name() }

// FootprintBytes is the memory one replica's GPU (or device) holds for a
// single sequence of the given length: the weights (the target's share plus
// the replicated draft) and that sequence's KV cache, target and draft.
// The rest of the KV pool is preallocated by vLLM-style engines; this is
// the floor a llama.cpp-style engine sized to one session would use.
func (d *Deployment) FootprintBytes(tokens int) float64 {
	return d.WeightBytes/float64(d.TP) + d.DraftWeightBytes + float64(tokens)*(d.KVBytesTok+d.DraftKVBytesTok)
}

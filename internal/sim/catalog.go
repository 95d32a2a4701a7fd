package sim

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/yamlerr"
)

//go:embed catalog/*.yaml
var embeddedCatalog embed.FS

// Model is a decoder-only transformer architecture.
type Model struct {
	Name           string   `yaml:"name" json:"name"`
	Aliases        []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	HFID           string   `yaml:"hf_id,omitempty" json:"hf_id,omitempty"`
	ParamsB        float64  `yaml:"params_b" json:"params_b"`
	ActiveParamsB  float64  `yaml:"active_params_b,omitempty" json:"active_params_b,omitempty"`
	Layers         int      `yaml:"layers" json:"layers"`
	Hidden         int      `yaml:"hidden" json:"hidden"`
	Heads          int      `yaml:"heads" json:"heads"`
	KVHeads        int      `yaml:"kv_heads" json:"kv_heads"`
	HeadDim        int      `yaml:"head_dim" json:"head_dim"`
	Vocab          int      `yaml:"vocab" json:"vocab"`
	Intermediate   int      `yaml:"intermediate" json:"intermediate"`
	Experts        int      `yaml:"experts,omitempty" json:"experts,omitempty"`
	ActiveExperts  int      `yaml:"active_experts,omitempty" json:"active_experts,omitempty"`
	MaxModelLen    int      `yaml:"max_model_len" json:"max_model_len"`
	TiedEmbeddings bool     `yaml:"tied_embeddings,omitempty" json:"tied_embeddings,omitempty"`
}

// GPU is an accelerator's datasheet.
type GPU struct {
	Name    string   `yaml:"name" json:"name"`
	Aliases []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	Vendor  string   `yaml:"vendor,omitempty" json:"vendor,omitempty"`
	// TFLOPS is dense tensor throughput by dtype (bf16, fp16, fp8, int8).
	TFLOPS   map[string]float64 `yaml:"tflops" json:"tflops"`
	MemoryGB float64            `yaml:"memory_gb" json:"memory_gb"`
	// UsableGB is the memory the driver reports (cudaMemGetInfo's total,
	// nvidia-smi's "MiB" figure), in 10^9 bytes, when it differs from the
	// datasheet's: an "80 GB" H100 holds 80 GiB = 85.5 GB, and vLLM sizes
	// its KV cache from the reported total × gpu_memory_utilization. 0:
	// MemoryGB. It decides whether a 70B model fits on two 80 GB GPUs.
	UsableGB        float64 `yaml:"usable_gb,omitempty" json:"usable_gb,omitempty"`
	BandwidthGBs    float64 `yaml:"bandwidth_gbs" json:"bandwidth_gbs"`
	InterconnectGBs float64 `yaml:"interconnect_gbs" json:"interconnect_gbs"`
	PricePerHour    float64 `yaml:"price_per_hour" json:"price_per_hour"`
	// Class is empty for datacentre accelerators and "cpu" or "edge" for
	// the CPU and edge devices, which "ttft plan" leaves out unless asked.
	Class string `yaml:"class,omitempty" json:"class,omitempty"`
}

// EngineProfile holds the calibratable efficiency factors and overheads of
// one serving engine (see catalog/engines.yaml for their meaning).
type EngineProfile struct {
	Name              string  `yaml:"name" json:"name"`
	ComputeEffMax     float64 `yaml:"compute_eff_max" json:"compute_eff_max"`
	ComputeHalfTokens float64 `yaml:"compute_half_tokens" json:"compute_half_tokens"`
	// FP8ComputeEffMax replaces ComputeEffMax for FP8 GEMMs (0: same).
	FP8ComputeEffMax float64 `yaml:"fp8_compute_eff_max,omitempty" json:"fp8_compute_eff_max,omitempty"`
	LayerOverheadUs  float64 `yaml:"layer_overhead_us" json:"layer_overhead_us"`
	// DecodeLayerOverheadUs replaces LayerOverheadUs in decode-only steps,
	// which engines replay as CUDA graphs.
	DecodeLayerOverheadUs float64 `yaml:"decode_layer_overhead_us" json:"decode_layer_overhead_us"`
	MemEff                float64 `yaml:"mem_eff" json:"mem_eff"`
	StepOverheadMs        float64 `yaml:"step_overhead_ms" json:"step_overhead_ms"`
	SeqOverheadUs         float64 `yaml:"seq_overhead_us" json:"seq_overhead_us"`
	TokenOverheadUs       float64 `yaml:"token_overhead_us" json:"token_overhead_us"`
	APIOverheadMs         float64 `yaml:"api_overhead_ms" json:"api_overhead_ms"`
	// AttnEff is attention's efficiency relative to the GEMMs' (0 or 1:
	// the same, as fused FlashAttention kernels on GPUs reach). A CPU
	// engine without fused attention (ggml: separate KQ, softmax and KQV
	// passes over small head dimensions) runs it several times slower per
	// FLOP than its matrix multiplies; `ttft sim calibrate` fits it.
	AttnEff float64 `yaml:"attn_eff,omitempty" json:"attn_eff,omitempty"`
	// APIInflightMs is the front end's contention cost: extra delay before a
	// new request reaches the engine for every other request the API server
	// is already handling. vLLM's API server is one Python event loop that
	// tokenises, detokenises and streams every token of every request; a
	// new request's path through it (parse, chat template, tokenise, hand
	// off, first chunk) waits behind all of that work, so its delay grows
	// linearly with the requests in flight (docs/simulator-validation.md).
	APIInflightMs      float64 `yaml:"api_inflight_ms,omitempty" json:"api_inflight_ms,omitempty"`
	AllReduceLatencyUs float64 `yaml:"allreduce_latency_us" json:"allreduce_latency_us"`
	LinkEff            float64 `yaml:"link_eff" json:"link_eff"`
	ReserveGB          float64 `yaml:"reserve_gb" json:"reserve_gb"`
	// DequantOverhead is the extra fraction of GEMM time weight-only
	// formats (int8, int4, awq, gptq) spend unpacking weights to 16-bit.
	DequantOverhead float64 `yaml:"dequant_overhead,omitempty" json:"dequant_overhead,omitempty"`
	// GraphMaxTokens: steps of at most this many tokens, prefill chunks
	// included, replay CUDA graphs and cost decode_layer_overhead_us per
	// layer (vLLM V1 captures piecewise graphs around attention for batches
	// up to 512 tokens). 0: only decode-only steps do (vLLM V0, SGLang,
	// TensorRT-LLM as profiled here).
	GraphMaxTokens int `yaml:"graph_max_tokens,omitempty" json:"graph_max_tokens,omitempty"`
	// Scheduler is the engine's batching policy when a deployment does not
	// set one: "v1" (chunked prefill mixed with decodes under a token
	// budget: vLLM ≥ 0.8, TensorRT-LLM's in-flight batching with context
	// chunking, lmdeploy TurboMind's dynamic split&fuse) or "v0" (prefill
	// first, whole prompts, never mixed with decodes: vLLM ≤ 0.7, TGI,
	// SGLang's default policy). Empty: v1.
	Scheduler string `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// WaitingServedRatio and MaxWaitingTokens are TGI's router policy
	// for starting a prefill while a batch is decoding (v0 scheduler
	// only; 0: off, prefill as soon as a prompt waits). A new prefill
	// batch starts only when the prompts it would take number at least
	// WaitingServedRatio × the running sequences, or when
	// MaxWaitingTokens decode steps have run since the last prefill; in
	// between, waiting requests sit out decode steps. TGI's launcher
	// defaults (1.x–2.0): 1.2 and 20. With an idle engine a prompt
	// starts at once, so batch-1 latency is unaffected.
	WaitingServedRatio float64 `yaml:"waiting_served_ratio,omitempty" json:"waiting_served_ratio,omitempty"`
	MaxWaitingTokens   int     `yaml:"max_waiting_tokens,omitempty" json:"max_waiting_tokens,omitempty"`
	// PrefillBatchTokens (v0 scheduler only; 0: the step budget) caps the
	// prompt tokens one prefill batch takes, apart from the step budget
	// that decodes share: TGI's max_batch_prefill_tokens (launcher default
	// 4096 in 1.x–2.0; max_input_tokens + 50 = 4145 from 2.1, inputs
	// defaulting to 4095). Whole prompts are taken FCFS while they fit; a
	// prompt longer than the cap still goes alone (TGI refuses to start
	// with max_input_tokens above it, so it never meets one). With
	// WaitingServedRatio it also bounds how many waiting prompts can count
	// towards the ratio: TGI's router collects a batch within this budget
	// before comparing its size with ratio × running.
	PrefillBatchTokens int `yaml:"prefill_batch_tokens,omitempty" json:"prefill_batch_tokens,omitempty"`
	// GQAKVReread: the engine's decode-attention kernel reads each KV head
	// once per query head instead of once per group (TensorRT-LLM's
	// masked-MHA kernel before XQA, v0.5–0.6), so a grouped-query model's
	// KV traffic is heads/kv_heads times its cache. Kernel generation, not
	// a fitted factor.
	GQAKVReread bool `yaml:"gqa_kv_reread,omitempty" json:"gqa_kv_reread,omitempty"`
	// Int8Activations: the engine quantizes activations to 8 bits and runs
	// int8/int4 weights on the device's int8 dot-product units (llama.cpp's
	// Q8_0 × Q4_0 path) instead of unpacking to 16-bit.
	Int8Activations bool `yaml:"int8_activations,omitempty" json:"int8_activations,omitempty"`
	// GuaranteedNoEvict is TensorRT-LLM's default capacity scheduler
	// (CapacitySchedulerPolicy GUARANTEED_NO_EVICT): a request is admitted
	// only when the KV blocks it needs to finish (prompt + max_tokens),
	// together with what every running request still needs to finish, fit
	// in the cache, so a running request is never preempted and recomputed.
	// false: vLLM's policy (admit on the prompt's blocks, preempt the newest
	// when decodes run out).
	GuaranteedNoEvict bool `yaml:"guaranteed_no_evict,omitempty" json:"guaranteed_no_evict,omitempty"`
	// KVFreeFraction sizes the KV cache as this fraction of the memory
	// left free after the weights and reserve_gb (lmdeploy TurboMind's
	// cache_max_entry_count, 0.8 by default since v0.2.1; TensorRT-LLM's
	// free_gpu_memory_fraction, 0.9) instead of vLLM's
	// gpu_memory_utilization × total − weights − reserve. 0: vLLM's.
	KVFreeFraction float64 `yaml:"kv_free_fraction,omitempty" json:"kv_free_fraction,omitempty"`
	// KVWatermark is the fraction of the KV blocks a new prompt must leave
	// free to be admitted (vLLM V0's BlockSpaceManager watermark, 0.01 by
	// default), so that running sequences have room to grow before one
	// is preempted. 0: admit while the prompt fits (vLLM V1).
	KVWatermark float64 `yaml:"kv_watermark,omitempty" json:"kv_watermark,omitempty"`
	// MaxNumSeqs is the engine's default limit on requests batched at
	// once, used when a deployment sets none (0: vLLM's 256;
	// trtllm-serve's max_batch_size defaults to 2048).
	MaxNumSeqs int `yaml:"max_num_seqs,omitempty" json:"max_num_seqs,omitempty"`
	// BatchDefaults names the engine whose defaults for the batch limits
	// apply when a deployment sets none: "vllm-v1" is vLLM ≥ 0.9's API
	// server (EngineArgs: max_num_batched_tokens 8192 and max_num_seqs 1024
	// on GPUs of ≥ 70 GiB other than the A100, else 2048 and 256). Empty:
	// max_num_seqs from MaxNumSeqs (else 256) and a budget of 8192 on ≥ 70
	// GiB, else 2048.
	BatchDefaults string `yaml:"batch_defaults,omitempty" json:"batch_defaults,omitempty"`
	// PrefillChunks (v0 scheduler only): prefill steps stay apart from
	// decodes, but a prompt longer than the step's token budget is cut
	// into chunks, continued first in the next prefill steps, instead of
	// the budget being raised to the maximum model length (SGLang's
	// chunked_prefill_size without --enable-mixed-chunk).
	PrefillChunks bool `yaml:"prefill_chunks,omitempty" json:"prefill_chunks,omitempty"`
	// InitNewTokenRatio > 0 selects SGLang's admission (PrefillAdder): a
	// waiting request is admitted only while its prompt plus its
	// max_tokens (clipped at 4096) fit in the free KV tokens less, for
	// every running request, new_token_ratio × its output still to come.
	// The ratio starts at InitNewTokenRatio (0.7 × schedule_conservativeness
	// 1), falls by (init − MinNewTokenRatio) / NewTokenRatioDecaySteps at
	// each decode step down to MinNewTokenRatio (init × 0.14), returns to
	// init when the server idles, and, when a decode step finds no room
	// for one more token per request, requests are retracted (fewest
	// outputs first, to the back of the queue) until RetractDecodeSteps
	// tokens per remaining request fit, and the ratio is re-estimated from
	// the remaining requests' progress. SGLang's global_config defaults:
	// 0.7, 0.098, 600 and 20.
	InitNewTokenRatio       float64 `yaml:"init_new_token_ratio,omitempty" json:"init_new_token_ratio,omitempty"`
	MinNewTokenRatio        float64 `yaml:"min_new_token_ratio,omitempty" json:"min_new_token_ratio,omitempty"`
	NewTokenRatioDecaySteps float64 `yaml:"new_token_ratio_decay_steps,omitempty" json:"new_token_ratio_decay_steps,omitempty"`
	RetractDecodeSteps      int     `yaml:"retract_decode_steps,omitempty" json:"retract_decode_steps,omitempty"`
	// HostOverlap: the engine prepares a decode step's per-sequence and
	// per-token host work (seq_overhead_us, token_overhead_us: input
	// tensors, KV block tables, bookkeeping) while the GPU runs the step
	// before, so that work costs time only where it outlasts the GPU's
	// kernels; a step that starts prompts is prepared before it is
	// launched and keeps the serial cost. TensorRT-LLM's GptSession (the
	// session benchmarks) enqueues a generation step and then prepares the
	// next one's inputs before it synchronises; its PyTorch backend's
	// overlap scheduler (on by default) launches step n+1 before step n's
	// CPU work. false: the host work runs between GPU steps (vLLM's
	// Python scheduler and input preparation before async scheduling).
	HostOverlap bool `yaml:"host_overlap,omitempty" json:"host_overlap,omitempty"`
}

// Catalog is the set of known models, GPUs and engine profiles.
type Catalog struct {
	Models  []Model         `yaml:"models,omitempty"`
	GPUs    []GPU           `yaml:"gpus,omitempty"`
	Engines []EngineProfile `yaml:"engines,omitempty"`
}

// DefaultCatalog returns the embedded catalog. Each call returns a fresh
// copy, so callers may extend it.
func DefaultCatalog() *Catalog {
	c := &Catalog{}
	entries, err := embeddedCatalog.ReadDir("catalog")
	if err != nil {
		panic(fmt.Sprintf("sim: embedded catalog: %v", err)) // build-time invariant
	}
	for _, e := range entries {
		b, err := embeddedCatalog.ReadFile("catalog/" + e.Name())
		if err != nil {
			panic(fmt.Sprintf("sim: embedded catalog %s: %v", e.Name(), err))
		}
		var part Catalog
		if err := decodeYAML(b, &part); err != nil {
			panic(fmt.Sprintf("sim: embedded catalog %s: %v", e.Name(), err))
		}
		c.Merge(&part)
	}
	return c
}

func decodeYAML(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && err.Error() != "EOF" {
		return err
	}
	return nil
}

// Merge adds other's entries; an entry whose name matches an existing one
// replaces it, so user files can recalibrate built-in profiles.
func (c *Catalog) Merge(other *Catalog) {
	for _, m := range other.Models {
		if i := indexByName(len(c.Models), func(i int) string { return c.Models[i].Name }, m.Name); i >= 0 {
			c.Models[i] = m
		} else {
			c.Models = append(c.Models, m)
		}
	}
	for _, g := range other.GPUs {
		if i := indexByName(len(c.GPUs), func(i int) string { return c.GPUs[i].Name }, g.Name); i >= 0 {
			c.GPUs[i] = g
		} else {
			c.GPUs = append(c.GPUs, g)
		}
	}
	for _, e := range other.Engines {
		if i := indexByName(len(c.Engines), func(i int) string { return c.Engines[i].Name }, e.Name); i >= 0 {
			c.Engines[i] = e
		} else {
			c.Engines = append(c.Engines, e)
		}
	}
}

func indexByName(n int, name func(int) string, want string) int {
	for i := 0; i < n; i++ {
		if strings.EqualFold(name(i), want) {
			return i
		}
	}
	return -1
}

// LoadFile merges a user catalog: a YAML file with models/gpus/engines
// lists, or a HuggingFace config.json (added as a model named after its
// directory or _name_or_path).
func (c *Catalog) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading catalog %s: %w", path, err)
	}
	if strings.HasSuffix(strings.ToLower(path), ".json") {
		m, err := ModelFromHFConfig(b, filepath.Base(filepath.Dir(path)))
		if err != nil {
			return fmt.Errorf("reading HuggingFace config %s: %w", path, err)
		}
		c.Merge(&Catalog{Models: []Model{m}})
		return nil
	}
	var part Catalog
	if err := decodeYAML(b, &part); err != nil {
		return fmt.Errorf("reading catalog %w", yamlerr.Clean(path, err))
	}
	for i, m := range part.Models {
		if err := m.validate(); err != nil {
			return fmt.Errorf("catalog %s: models[%d]: %w", path, i, err)
		}
	}
	for i, g := range part.GPUs {
		if err := g.validate(); err != nil {
			return fmt.Errorf("catalog %s: gpus[%d]: %w", path, i, err)
		}
	}
	for i, e := range part.Engines {
		if e.Name == "" {
			return fmt.Errorf("catalog %s: engines[%d]: name is required", path, i)
		}
		if e.DequantOverhead < 0 {
			return fmt.Errorf("catalog %s: engines[%d] (%s): dequant_overhead must not be negative", path, i, e.Name)
		}
		if e.APIOverheadMs < 0 || e.APIInflightMs < 0 {
			return fmt.Errorf("catalog %s: engines[%d] (%s): api_overhead_ms and api_inflight_ms must not be negative", path, i, e.Name)
		}
		if e.PrefillBatchTokens < 0 {
			return fmt.Errorf("catalog %s: engines[%d] (%s): prefill_batch_tokens must not be negative", path, i, e.Name)
		}
	}
	c.Merge(&part)
	return nil
}

func (m *Model) validate() error {
	switch {
	case m.Name == "":
		return fmt.Errorf("name is required")
	case m.Layers <= 0 || m.Hidden <= 0 || m.Heads <= 0:
		return fmt.Errorf("model %s: layers, hidden and heads must be positive", m.Name)
	case m.KVHeads <= 0 || m.HeadDim <= 0:
		return fmt.Errorf("model %s: kv_heads and head_dim must be positive", m.Name)
	case m.ParamsB <= 0:
		return fmt.Errorf("model %s: params_b must be positive", m.Name)
	case m.Experts > 0 && (m.ActiveExperts <= 0 || m.ActiveExperts > m.Experts):
		return fmt.Errorf("model %s: active_experts must be in 1..experts", m.Name)
	}
	return nil
}

func (g *GPU) validate() error {
	switch {
	case g.Name == "":
		return fmt.Errorf("name is required")
	case g.MemoryGB <= 0 || g.BandwidthGBs <= 0:
		return fmt.Errorf("gpu %s: memory_gb and bandwidth_gbs must be positive", g.Name)
	case g.TFLOPS["bf16"] <= 0 && g.TFLOPS["fp16"] <= 0:
		return fmt.Errorf("gpu %s: tflops needs bf16 or fp16", g.Name)
	}
	return nil
}

// hfConfig is the subset of a HuggingFace config.json the simulator reads.
type hfConfig struct {
	NameOrPath            string  `json:"_name_or_path"`
	HiddenSize            int     `json:"hidden_size"`
	NEmbd                 int     `json:"n_embd"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NLayer                int     `json:"n_layer"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NHead                 int     `json:"n_head"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim"`
	VocabSize             int     `json:"vocab_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	NumLocalExperts       int     `json:"num_local_experts"`
	NumExperts            int     `json:"num_experts"`
	NumExpertsPerTok      int     `json:"num_experts_per_tok"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	MoEIntermediateSize   int     `json:"moe_intermediate_size"`
	RopeTheta             float64 `json:"rope_theta"`
}

// ModelFromHFConfig builds a Model from a HuggingFace config.json. The
// parameter count is derived from the shapes (attention, gated MLP or MoE
// experts, embeddings), since config.json does not state it.
func ModelFromHFConfig(b []byte, fallbackName string) (Model, error) {
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return Model{}, err
	}
	first := func(v ...int) int {
		for _, x := range v {
			if x > 0 {
				return x
			}
		}
		return 0
	}
	m := Model{
		Layers:         first(c.NumHiddenLayers, c.NLayer),
		Hidden:         first(c.HiddenSize, c.NEmbd),
		Heads:          first(c.NumAttentionHeads, c.NHead),
		Vocab:          c.VocabSize,
		MaxModelLen:    first(c.MaxPositionEmbeddings, 4096),
		Experts:        first(c.NumLocalExperts, c.NumExperts),
		ActiveExperts:  c.NumExpertsPerTok,
		TiedEmbeddings: c.TieWordEmbeddings,
	}
	m.KVHeads = first(c.NumKeyValueHeads, m.Heads)
	if m.Heads > 0 {
		m.HeadDim = first(c.HeadDim, m.Hidden/m.Heads)
	}
	m.Intermediate = first(c.IntermediateSize, 4*m.Hidden)
	name := c.NameOrPath
	if name == "" {
		name = fallbackName
	}
	m.Name = strings.ToLower(name)
	if m.Layers == 0 || m.Hidden == 0 || m.Heads == 0 || m.Vocab == 0 {
		return Model{}, fmt.Errorf("missing one of hidden_size, num_hidden_layers, num_attention_heads, vocab_size")
	}
	d, L := float64(m.Hidden), float64(m.Layers)
	attn := d*float64(m.Heads*m.HeadDim) + 2*d*float64(m.KVHeads*m.HeadDim) + float64(m.Heads*m.HeadDim)*d
	ffnOne := 3 * d * float64(m.Intermediate)
	if m.Experts > 0 && c.MoEIntermediateSize > 0 {
		ffnOne = 3 * d * float64(c.MoEIntermediateSize)
	}
	emb := float64(m.Vocab) * d
	if !m.TiedEmbeddings {
		emb *= 2
	}
	if m.Experts > 0 {
		if m.ActiveExperts == 0 {
			m.ActiveExperts = 2
		}
		m.ParamsB = (L*(attn+float64(m.Experts)*ffnOne) + emb) / 1e9
		m.ActiveParamsB = (L*(attn+float64(m.ActiveExperts)*ffnOne) + emb) / 1e9
	} else {
		m.ParamsB = (L*(attn+ffnOne) + emb) / 1e9
	}
	return m, m.validate()
}

// normName lowercases a model or GPU name and strips organisation prefixes
// and instruction-tuning suffixes, so "meta-llama/Meta-Llama-3-70B-Instruct"
// finds llama-3-70b.
func normName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndex(s, "/"); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimPrefix(s, "meta-")
	for _, suf := range []string{"-instruct", "-chat", "-hf", "-it", "-base"} {
		s = strings.ReplaceAll(s, suf, "")
	}
	s = strings.ReplaceAll(s, "_", "-")
	return s
}

// SameModelName reports whether two model names are the same once
// organisation prefixes, case and instruction-tuning suffixes are set aside
// ("meta-llama/Meta-Llama-3-70B-Instruct" and "llama-3-70b" are). Aliases
// are not consulted: that is Catalog.Model's job.
func SameModelName(a, b string) bool { return normName(a) == normName(b) }

// Model finds a model by name, alias or HuggingFace id.
func (c *Catalog) Model(name string) (*Model, error) {
	want := normName(name)
	for i := range c.Models {
		m := &c.Models[i]
		if normName(m.Name) == want || (m.HFID != "" && normName(m.HFID) == want) {
			return m, nil
		}
		for _, a := range m.Aliases {
			if normName(a) == want {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("unknown model %q; known models: %s (add one with --catalog FILE.yaml or a HuggingFace config.json)", name, strings.Join(c.ModelNames(), ", "))
}

// GPU finds an accelerator by name or alias.
func (c *Catalog) GPU(name string) (*GPU, error) {
	want := normName(name)
	for i := range c.GPUs {
		g := &c.GPUs[i]
		if normName(g.Name) == want {
			return g, nil
		}
		for _, a := range g.Aliases {
			if normName(a) == want {
				return g, nil
			}
		}
	}
	return nil, fmt.Errorf("unknown GPU %q; known GPUs: %s (add one with --catalog FILE.yaml)", name, strings.Join(c.GPUNames(), ", "))
}

// Engine finds an engine profile by name.
func (c *Catalog) Engine(name string) (*EngineProfile, error) {
	if name == "" {
		name = "vllm"
	}
	for i := range c.Engines {
		if strings.EqualFold(c.Engines[i].Name, name) {
			return &c.Engines[i], nil
		}
	}
	names := make([]string, len(c.Engines))
	for i, e := range c.Engines {
		names[i] = e.Name
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown engine profile %q; known: %s", name, strings.Join(names, ", "))
}

// ModelNames lists the known model names, sorted.
func (c *Catalog) ModelNames() []string {
	out := make([]string, len(c.Models))
	for i, m := range c.Models {
		out[i] = m.Name
	}
	sort.Strings(out)
	return out
}

// GPUNames lists the known GPU names, sorted.
func (c *Catalog) GPUNames() []string {
	out := make([]string, len(c.GPUs))
	for i, g := range c.GPUs {
		out[i] = g.Name
	}
	sort.Strings(out)
	return out
}

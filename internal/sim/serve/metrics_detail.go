package serve

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttft-dev/ttft/internal/sim"
)

// The rest of vLLM v1's metrics that dashboards, the Gateway API Inference
// Extension's endpoint picker, llm-d and autoscalers read: request-shape
// histograms, per-step tokens, cached prompt tokens, the waiting queue by
// reason, the cache-config and LoRA info gauges and, with speculative
// decoding, its counters. Names, types, labels, buckets and the moment
// each is recorded follow vllm/v1/metrics/loggers.py (PrometheusStatLogger),
// vllm/v1/metrics/stats.py and vllm/v1/spec_decode/metrics.py; every value
// comes from the engine's state or its step events.

// finishReasons are vLLM's finished_reason values (FINISH_REASON_STRINGS in
// vllm/v1/engine/__init__.py): request_success_total has a series for each
// from the start, as vLLM pre-creates them.
var finishReasons = []string{"stop", "length", "abort", "error", "repetition"}

// Buckets of vLLM's count histograms; the token-count ones are
// build_1_2_5_buckets(max_model_len) (buckets125).
var (
	iterationTokenBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	paramsNBuckets        = []float64{1, 2, 5, 10, 20}
	preemptionBuckets     = []float64{1, 2, 3, 4, 5, 10, 20}
)

// promptSources are vllm:prompt_tokens_by_source's source values
// (PromptTokenStats.ALL_SOURCES): prefilled here, found in the local
// prefix cache, loaded by a KV connector (never, in the simulator).
var promptSources = [...]string{"local_compute", "local_cache_hit", "external_kv_transfer"}

// buckets125 is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, … while
// not above max.
func buckets125(max int) []float64 {
	var b []float64
	for p := 1; ; p *= 10 {
		for _, m := range [...]int{1, 2, 5} {
			if m*p > max {
				return b
			}
			b = append(b, float64(m*p))
		}
	}
}

// detailMetrics are the metrics beyond the latency histograms and the
// scheduler's gauges and counters (metrics.go).
type detailMetrics struct {
	// Per finished request (vLLM's FinishedRequestStats).
	promptTokens, genTokens, maxGenTokens, paramsMaxTokens, paramsN prometheus.Observer
	numPreemptions, prefillKVComputed                               prometheus.Observer
	// Per engine step (IterationStats): tokens, and the prompt tokens of
	// the requests whose prefill completed, by source.
	iterationTokens prometheus.Observer
	promptCached    prometheus.Counter
	promptBySource  [len(promptSources)]prometheus.Counter
	// Scheduler state.
	waitingCapacity, waitingDeferred prometheus.Gauge
	loraInfo                         prometheus.Gauge
	spec                             *specMetrics // nil without speculative decoding
}

// specMetrics are vLLM's SpecDecodingProm counters.
type specMetrics struct {
	drafts, draftTokens, accepted prometheus.Counter
	acceptedPerPos                []prometheus.Counter // position 0 … k−1
}

// requestParams are a request's sampling parameters as vLLM's metrics see
// them.
type requestParams struct {
	// maxTokens is vLLM's SamplingParams.max_tokens: the client's
	// max_completion_tokens or max_tokens, else what vLLM's OpenAI server
	// sets when neither is given, the context left after the prompt.
	maxTokens int
	n         int
}

func newRequestParams(d *sim.Deployment, maxCompletionTokens, maxTokens *int, n, promptLen int) requestParams {
	p := requestParams{maxTokens: d.MaxModelLen - promptLen, n: max(n, 1)}
	for _, v := range []*int{maxCompletionTokens, maxTokens} {
		if v != nil {
			p.maxTokens = *v
			break
		}
	}
	return p
}

// registerDetail adds the detail metrics to m's registry; labels are
// model_name and engine.
func (m *serverMetrics) registerDetail(d *sim.Deployment, r registrar) {
	reg, labels := r.reg, r.labels
	x := &m.detail
	hist, counter := r.hist, r.counter
	tokens := buckets125(d.MaxModelLen)
	x.promptTokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
	x.genTokens = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
	x.maxGenTokens = hist("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tokens)
	x.paramsMaxTokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens)
	x.paramsN = hist("vllm:request_params_n", "Histogram of the n request parameter.", paramsNBuckets)
	x.numPreemptions = hist("vllm:request_num_preemptions", "Histogram of the number of preemptions of finished requests.", preemptionBuckets)
	x.prefillKVComputed = hist("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tokens)
	x.iterationTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationTokenBuckets)
	x.promptCached = counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).")
	bySource := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prompt_tokens_by_source_total", Help: "Number of prompt tokens by source.", ConstLabels: labels}, []string{"source"})
	reg.MustRegister(bySource)
	for i, src := range promptSources {
		x.promptBySource[i] = bySource.WithLabelValues(src)
	}

	waiting := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting_by_reason",
		Help: "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; " +
			"'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). " +
			"Sum of all reasons equals vllm:num_requests_waiting.", ConstLabels: labels}, []string{"reason"})
	reg.MustRegister(waiting)
	x.waitingCapacity = waiting.WithLabelValues("capacity")
	// The simulator defers nothing (no LoRA budget, no KV transfer):
	// every waiting request waits for capacity.
	x.waitingDeferred = waiting.WithLabelValues("deferred")

	for _, r := range finishReasons {
		m.success.WithLabelValues(r)
	}

	// vllm:cache_config_info: CacheConfig.metrics_info(), its fields as
	// Python prints them, plus engine; no model_name.
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: cacheConfigLabels(d, labels["engine"])})
	reg.MustRegister(info)
	info.Set(1)

	// vllm:lora_requests_info: the adapters with running and waiting
	// requests (none: the simulator serves the base model only, and has no
	// adapter slots, hence max_lora 0); the value is when it was last
	// updated, as vLLM's set_to_current_time.
	x.loraInfo = prometheus.NewGauge(prometheus.GaugeOpts{Name: "vllm:lora_requests_info", Help: "Running stats on lora requests.",
		ConstLabels: prometheus.Labels{"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}})
	reg.MustRegister(x.loraInfo)
	x.loraInfo.Set(unixNow())

	if k := d.Config.Speculative.NumSpeculativeTokens; k > 0 {
		sp := &specMetrics{
			drafts:      counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts."),
			draftTokens: counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens."),
			accepted:    counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens."),
		}
		perPos := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:spec_decode_num_accepted_tokens_per_pos_total", Help: "Accepted tokens per draft position.", ConstLabels: labels}, []string{"position"})
		reg.MustRegister(perPos)
		for pos := range k {
			sp.acceptedPerPos = append(sp.acceptedPerPos, perPos.WithLabelValues(strconv.Itoa(pos)))
		}
		x.spec = sp
	}
}

// cacheConfigLabels are vllm:cache_config_info's labels for d: the vLLM
// CacheConfig fields the simulator models, valued as str() prints them.
func cacheConfigLabels(d *sim.Deployment, engine string) prometheus.Labels {
	none := func(v int) string {
		if v <= 0 {
			return "None"
		}
		return strconv.Itoa(v)
	}
	return prometheus.Labels{
		"engine":                  engine,
		"block_size":              strconv.Itoa(d.BlockSize),
		"cache_dtype":             d.Config.KVCacheDtype,
		"enable_prefix_caching":   pyBool(d.Config.EnablePrefixCaching),
		"gpu_memory_utilization":  pyFloat(d.Config.GPUMemoryUtilization),
		"is_attention_free":       pyBool(false),
		"num_gpu_blocks":          strconv.Itoa(d.NumBlocks),
		"num_gpu_blocks_override": "None",
		"kv_cache_size_tokens":    strconv.Itoa(d.NumBlocks * d.BlockSize),
		"sliding_window":          none(d.Window),
	}
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// pyFloat formats v as Python's str does for a float of ordinary size:
// 0.9 → "0.9", 1 → "1.0".
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// updateDetail publishes the scheduler-state detail gauges after a step.
func (m *serverMetrics) updateDetail(e *sim.Engine) {
	x := &m.detail
	x.waitingCapacity.Set(float64(e.NumWaiting()))
	x.waitingDeferred.Set(0)
	x.loraInfo.Set(unixNow())
}

// observeStep records one engine step's iteration stats from its emits, as
// vLLM's IterationStats does from the step's outputs: the tokens generated
// plus the prompt of each request whose prefill completed (its first
// token), that prompt's cached and computed tokens, and the speculative
// drafts verified. A step that completed nothing is observed as 0 tokens.
func (m *serverMetrics) observeStep(emits []sim.Emit) {
	x := &m.detail
	tokens := 0
	for _, em := range emits {
		tokens += em.Tokens
		if em.First {
			sq := em.Seq
			tokens += sq.PromptLen
			x.promptCached.Add(float64(sq.CachedTokens))
			x.promptBySource[0].Add(float64(prefillComputed(sq)))
			x.promptBySource[1].Add(float64(sq.CachedTokens))
		}
		if sp := x.spec; sp != nil && em.Drafted > 0 {
			acc := em.Tokens - 1
			sp.drafts.Inc()
			sp.draftTokens.Add(float64(em.Drafted))
			sp.accepted.Add(float64(acc))
			for pos := 0; pos < acc && pos < len(sp.acceptedPerPos); pos++ {
				sp.acceptedPerPos[pos].Inc()
			}
		}
	}
	x.iterationTokens.Observe(float64(tokens))
}

// prefillComputed is the prompt tokens sq prefilled: neither prefix-cache
// hits nor (under evict:F) tokens of dropped blocks, which are skipped.
func prefillComputed(sq *sim.Seq) int { return sq.PromptLen - sq.CachedTokens - sq.SkippedTokens }

// observeFinished records a finished request's shape histograms, as vLLM's
// FinishedRequestStats (n is 1, so its longest completion is its own).
func (m *serverMetrics) observeFinished(sq *sim.Seq, p requestParams) {
	x := &m.detail
	x.promptTokens.Observe(float64(sq.PromptLen))
	x.genTokens.Observe(float64(sq.Output))
	x.maxGenTokens.Observe(float64(sq.Output))
	x.paramsN.Observe(float64(p.n))
	if p.maxTokens > 0 {
		x.paramsMaxTokens.Observe(float64(p.maxTokens))
	}
	x.numPreemptions.Observe(float64(sq.Preemptions))
	x.prefillKVComputed.Observe(float64(prefillComputed(sq)))
}

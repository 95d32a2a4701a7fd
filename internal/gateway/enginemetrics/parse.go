package enginemetrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// MaxBytes bounds how much of an exposition Scrape reads: a vLLM engine
// with detailed histograms publishes some hundreds of KiB.
const MaxBytes = 16 << 20

// Scrape GETs url and parses the Prometheus text exposition it answers.
func Scrape(ctx context.Context, client *http.Client, url string) (sched.EngineStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sched.UnknownEngineStats(), fmt.Errorf("scraping %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return sched.UnknownEngineStats(), fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Read a little so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return sched.UnknownEngineStats(), fmt.Errorf("scraping %s: status %d", url, resp.StatusCode)
	}
	es, err := Parse(io.LimitReader(resp.Body, MaxBytes))
	if err != nil {
		return es, fmt.Errorf("scraping %s: %w", url, err)
	}
	return es, nil
}

// name is one engine's name for a series, with the label that selects it
// when the engine publishes several quantities under one name.
type name struct {
	name, label, value string
}

// The reference picker's model-server protocol names
// (gateway-api-inference-extension docs/proposals/003-model-server-protocol):
// vLLM, SGLang and Triton TensorRT-LLM, the first present wins. vLLM's KV
// gauge was gpu_cache_usage_perc before v0.10. An engine that names its
// gauges otherwise but ends them as vLLM does (suffixes) is read too.
var (
	waitingNames = []name{
		{name: "vllm:num_requests_waiting"},
		{name: "sglang:num_queue_reqs"},
		{name: "nv_trt_llm_request_metrics", label: "request_type", value: "waiting"},
	}
	runningNames = []name{
		{name: "vllm:num_requests_running"},
		{name: "sglang:num_running_reqs"},
		{name: "nv_trt_llm_request_metrics", label: "request_type", value: "scheduled"},
	}
	kvNames = []name{
		{name: "vllm:kv_cache_usage_perc"},
		{name: "vllm:gpu_cache_usage_perc"},
		{name: "sglang:token_usage"},
		{name: "nv_trt_llm_kv_cache_block_metrics", label: "kv_cache_block_type", value: "fraction"},
	}
	waitingSuffixes = []string{"num_requests_waiting"}
	runningSuffixes = []string{"num_requests_running"}
	kvSuffixes      = []string{"kv_cache_usage_perc", "gpu_cache_usage_perc"}

	// Prefix-cache counters, the first family present wins (vLLM renamed
	// gpu_prefix_cache_* to prefix_cache_* in v0.10; an exposition may
	// name a counter with or without _total). Only the local cache's:
	// vLLM's external_prefix_cache_* count a KV connector's.
	prefixQueryNames = []string{"vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"}
	prefixHitNames   = []string{"vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"}
)

// Parse reads a Prometheus text exposition, whichever engine wrote it:
//
//   - Waiting and Running requests, summed over label sets (several
//     models, or data-parallel ranks);
//   - KVUsage, the highest over label sets, since the fullest cache is
//     the one a new request would wait on;
//   - CacheTokens, the KV capacity in tokens: vLLM's cache_config_info,
//     whose labels num_gpu_blocks × block_size carry it, summed over
//     series, or SGLang's max_total_num_tokens;
//   - vLLM's prefix-cache query and hit counters, summed, both or
//     neither;
//   - HitRate, SGLang's cache_hit_rate gauge, the mean over label sets (a
//     sum of rates means nothing).
//
// What the engine does not publish is NaN, as are samples that are not
// finite numbers and values that cannot be what they claim (a KV size
// that is not positive, a hit rate outside [0, 1]). The error is for text
// that is not a Prometheus exposition.
func Parse(r io.Reader) (sched.EngineStats, error) {
	es := sched.UnknownEngineStats()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return es, fmt.Errorf("parsing engine metrics: %w", err)
	}
	sum := func(a, b float64) float64 { return a + b }
	es.Waiting = pick(fams, waitingNames, waitingSuffixes, sum)
	es.Running = pick(fams, runningNames, runningSuffixes, sum)
	es.KVUsage = pick(fams, kvNames, kvSuffixes, math.Max)

	if q, ok := combine(counterFamily(fams, prefixQueryNames), name{}, sum); ok {
		if h, ok := combine(counterFamily(fams, prefixHitNames), name{}, sum); ok {
			es.PrefixQueries, es.PrefixHits = q, h
		}
	}

	tokens := cacheConfigTokens(fams["vllm:cache_config_info"])
	if math.IsNaN(tokens) {
		if t, ok := combine(fams["sglang:max_total_num_tokens"], name{}, sum); ok {
			tokens = t
		}
	}
	if tokens > 0 && !math.IsInf(tokens, 0) {
		es.CacheTokens = tokens
	}

	if t, ok := combine(fams["process_start_time_seconds"], name{}, math.Max); ok && t > 0 {
		es.StartTime = t
	}

	if f := fams["sglang:cache_hit_rate"]; f != nil {
		t, n := 0.0, 0
		for _, m := range f.GetMetric() {
			if v := value(m); v >= 0 && v <= 1 {
				t, n = t+v, n+1
			}
		}
		if n > 0 {
			es.HitRate = t / float64(n)
		}
	}
	return es, nil
}

// Load returns the queue and KV gauges with 0 for those the engine does
// not publish, and ok false when it publishes none of them: an endpoint
// the picker cannot tell anything about.
func Load(es sched.EngineStats) (waiting, running, kvUsage float64, ok bool) {
	ok = !math.IsNaN(es.Waiting) || !math.IsNaN(es.Running) || !math.IsNaN(es.KVUsage)
	return zeroNaN(es.Waiting), zeroNaN(es.Running), zeroNaN(es.KVUsage), ok
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// pick combines the samples of the first of names that has any; failing
// those, of the first family (in name order, so that the answer does not
// depend on map order) whose name ends in one of suffixes. NaN when none
// has a sample.
func pick(fams map[string]*dto.MetricFamily, names []name, suffixes []string, op func(a, b float64) float64) float64 {
	for _, n := range names {
		if v, ok := combine(fams[n.name], n, op); ok {
			return v
		}
	}
	var others []string
	for k := range fams {
		for _, s := range suffixes {
			if strings.HasSuffix(k, s) {
				others = append(others, k)
				break
			}
		}
	}
	slices.Sort(others)
	for _, k := range others {
		if v, ok := combine(fams[k], name{}, op); ok {
			return v
		}
	}
	return math.NaN()
}

// combine folds op over f's finite samples that n's label selects; false
// when there are none.
func combine(f *dto.MetricFamily, n name, op func(a, b float64) float64) (float64, bool) {
	if f == nil {
		return 0, false
	}
	v, ok := 0.0, false
	for _, m := range f.GetMetric() {
		if n.label != "" && !hasLabel(m, n.label, n.value) {
			continue
		}
		x := value(m)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		if !ok {
			v, ok = x, true
		} else {
			v = op(v, x)
		}
	}
	return v, ok
}

// counterFamily returns the first of names present, as n_total or n.
func counterFamily(fams map[string]*dto.MetricFamily, names []string) *dto.MetricFamily {
	for _, n := range names {
		for _, k := range []string{n + "_total", n} {
			if f := fams[k]; f != nil {
				return f
			}
		}
	}
	return nil
}

// cacheConfigTokens is num_gpu_blocks × block_size summed over
// cache_config_info's series, NaN when no series carries both as numbers
// (vLLM writes "None" before the KV cache is profiled).
func cacheConfigTokens(f *dto.MetricFamily) float64 {
	if f == nil {
		return math.NaN()
	}
	t, ok := 0.0, false
	for _, m := range f.GetMetric() {
		var blocks, size float64
		var hasB, hasS bool
		for _, l := range m.GetLabel() {
			v, err := strconv.ParseFloat(l.GetValue(), 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				continue
			}
			switch l.GetName() {
			case "num_gpu_blocks":
				blocks, hasB = v, true
			case "block_size":
				size, hasS = v, true
			}
		}
		if hasB && hasS {
			t += blocks * size
			ok = true
		}
	}
	if !ok {
		return math.NaN()
	}
	return t
}

// hasLabel reports whether m's label called name has value.
func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// value is a gauge's, counter's or untyped sample's value, NaN for other
// types (a histogram or summary is no queue length).
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

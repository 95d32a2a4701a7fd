package serve

import (
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/sim"
)

// scrape parses a live server's /metrics.
func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, b)
	}
	return fams
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// family returns the named family, checking its type.
func family(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("/metrics lacks %s", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want %v", name, f.GetType(), typ)
	}
	return f
}

// hist returns the only series of a histogram family (model_name and
// engine labelled), checking its classic buckets against want.
func hist(t *testing.T, fams map[string]*dto.MetricFamily, name string, want []float64) *dto.Histogram {
	t.Helper()
	f := family(t, fams, name, dto.MetricType_HISTOGRAM)
	if len(f.Metric) != 1 {
		t.Fatalf("%s has %d series, want 1", name, len(f.Metric))
	}
	if l := labelMap(f.Metric[0]); l["model_name"] != "llama-3.1-8b" || l["engine"] != "0" || len(l) != 2 {
		t.Errorf("%s labels %v, want model_name and engine", name, l)
	}
	h := f.Metric[0].Histogram
	var got []float64
	for _, b := range h.Bucket {
		if !math.IsInf(b.GetUpperBound(), 1) {
			got = append(got, b.GetUpperBound())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s buckets %v, want vLLM's %v", name, got, want)
	}
	return h
}

// byLabel maps a family's series by the value of one label.
func byLabel(f *dto.MetricFamily, label string) map[string]*dto.Metric {
	out := map[string]*dto.Metric{}
	for _, m := range f.Metric {
		out[labelMap(m)[label]] = m
	}
	return out
}

// TestServerDetailMetrics: after a few requests, each of vLLM's
// request-shape histograms, per-step and cached-token counters, info gauges
// and by-reason gauges is on /metrics with vLLM's type, labels and buckets,
// and its values add up to what was sent.
func TestServerDetailMetrics(t *testing.T) {
	s := startTest(t, func(c *Config) {
		c.MaxModelLen = 4096
		c.DefaultMaxTokens = 4
	})
	d := s.Deployment()
	const shared = "The same shared system prompt that is long enough to fill at least two KV blocks of sixteen tokens each, repeated here for effect."
	reqs := []struct {
		body       string
		maxTokens  int // the max_tokens parameter as vLLM sees it (0: the context left)
		out        int
		wantReason string
	}{
		{`"max_tokens":3`, 3, 3, "length"},
		{`"max_completion_tokens":5`, 5, 5, "length"},
		{``, 0, 4, "stop"}, // no limit: the default length, ended at EOS
		{`"ignore_eos":true`, 0, 4, "length"},
	}
	var prompt, cached, out, maxTokens int
	for i, r := range reqs {
		body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"` + shared + `"}],"stream":true,"stream_options":{"include_usage":true}`
		if r.body != "" {
			body += "," + r.body
		}
		res := postStream(t, s.URL(), "/v1/chat/completions", body+"}", nil)
		if !res.done {
			t.Fatalf("request %d did not finish: %d %s", i, res.status, res.body)
		}
		reason := ""
		for _, ev := range res.events {
			if ch, _ := ev["choices"].([]any); len(ch) > 0 {
				if f, ok := ch[0].(map[string]any)["finish_reason"].(string); ok {
					reason = f
				}
			}
		}
		if reason != r.wantReason {
			t.Errorf("request %d: finish_reason %q, want %q", i, reason, r.wantReason)
		}
		u := res.events[len(res.events)-1]["usage"].(map[string]any)
		p := int(u["prompt_tokens"].(float64))
		prompt += p
		cached += int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
		out += int(u["completion_tokens"].(float64))
		if r.maxTokens > 0 {
			maxTokens += r.maxTokens
		} else {
			maxTokens += d.MaxModelLen - p
		}
	}
	if out != 16 || cached == 0 {
		t.Fatalf("sent %d output tokens (want 16) with %d cached: the repeated prompt should hit", out, cached)
	}
	fams := scrape(t, s)
	n := uint64(len(reqs))
	tokens := buckets125(d.MaxModelLen)

	check := func(name string, h *dto.Histogram, count uint64, sum float64) {
		t.Helper()
		if h.GetSampleCount() != count || h.GetSampleSum() != sum {
			t.Errorf("%s: count %d sum %v, want %d and %v", name, h.GetSampleCount(), h.GetSampleSum(), count, sum)
		}
	}
	check("vllm:request_prompt_tokens", hist(t, fams, "vllm:request_prompt_tokens", tokens), n, float64(prompt))
	check("vllm:request_generation_tokens", hist(t, fams, "vllm:request_generation_tokens", tokens), n, float64(out))
	check("vllm:request_max_num_generation_tokens", hist(t, fams, "vllm:request_max_num_generation_tokens", tokens), n, float64(out))
	check("vllm:request_params_max_tokens", hist(t, fams, "vllm:request_params_max_tokens", tokens), n, float64(maxTokens))
	check("vllm:request_params_n", hist(t, fams, "vllm:request_params_n", paramsNBuckets), n, float64(n))
	check("vllm:request_num_preemptions", hist(t, fams, "vllm:request_num_preemptions", preemptionBuckets), n, 0)
	check("vllm:request_prefill_kv_computed_tokens", hist(t, fams, "vllm:request_prefill_kv_computed_tokens", tokens), n, float64(prompt-cached))
	// Every step's tokens: the prompts (counted when their prefill
	// completes) and the generated tokens.
	iter := hist(t, fams, "vllm:iteration_tokens_total", iterationTokenBuckets)
	if iter.GetSampleSum() != float64(prompt+out) || iter.GetSampleCount() < uint64(out/int(n)) {
		t.Errorf("vllm:iteration_tokens_total: sum %v over %d steps, want %d over at least %d", iter.GetSampleSum(), iter.GetSampleCount(), prompt+out, out/int(n))
	}

	counter := func(name string) float64 {
		t.Helper()
		f := family(t, fams, name, dto.MetricType_COUNTER)
		return f.Metric[0].Counter.GetValue()
	}
	if got := counter("vllm:prompt_tokens_cached_total"); got != float64(cached) {
		t.Errorf("vllm:prompt_tokens_cached_total = %v, want the usage's %d cached tokens", got, cached)
	}
	src := byLabel(family(t, fams, "vllm:prompt_tokens_by_source_total", dto.MetricType_COUNTER), "source")
	for name, want := range map[string]int{"local_compute": prompt - cached, "local_cache_hit": cached, "external_kv_transfer": 0} {
		if m := src[name]; m == nil || m.Counter.GetValue() != float64(want) {
			t.Errorf("vllm:prompt_tokens_by_source_total{source=%q} = %v, want %d", name, m, want)
		}
	}
	// Unchanged: the prompt counter still counts every prompt.
	if got := counter("vllm:prompt_tokens_total"); got != float64(prompt) {
		t.Errorf("vllm:prompt_tokens_total = %v, want %d", got, prompt)
	}

	// request_success_total: a series per vLLM finish reason from the start.
	succ := byLabel(family(t, fams, "vllm:request_success_total", dto.MetricType_COUNTER), "finished_reason")
	for _, r := range finishReasons {
		want := 0.0
		switch r {
		case "stop":
			want = 1
		case "length":
			want = 3
		}
		if m := succ[r]; m == nil || m.Counter.GetValue() != want {
			t.Errorf("vllm:request_success_total{finished_reason=%q} = %v, want %v", r, m, want)
		}
	}

	wait := byLabel(family(t, fams, "vllm:num_requests_waiting_by_reason", dto.MetricType_GAUGE), "reason")
	for _, r := range []string{"capacity", "deferred"} {
		m := wait[r]
		if m == nil || m.Gauge.GetValue() != 0 {
			t.Errorf("vllm:num_requests_waiting_by_reason{reason=%q} = %v, want 0 when idle", r, m)
		} else if l := labelMap(m); l["model_name"] != "llama-3.1-8b" || l["engine"] != "0" {
			t.Errorf("vllm:num_requests_waiting_by_reason labels %v", l)
		}
	}

	info := family(t, fams, "vllm:cache_config_info", dto.MetricType_GAUGE)
	if len(info.Metric) != 1 || info.Metric[0].Gauge.GetValue() != 1 {
		t.Fatalf("vllm:cache_config_info: %v, want one series of value 1", info.Metric)
	}
	want := map[string]string{
		"engine": "0", "block_size": "16", "num_gpu_blocks": strconv.Itoa(d.NumBlocks), "kv_cache_size_tokens": strconv.Itoa(16 * d.NumBlocks),
		"enable_prefix_caching": "True", "gpu_memory_utilization": "0.9", "cache_dtype": "auto", "sliding_window": "None",
		"is_attention_free": "False", "num_gpu_blocks_override": "None",
	}
	if l := labelMap(info.Metric[0]); !mapsEqual(l, want) {
		t.Errorf("vllm:cache_config_info labels %v, want %v", l, want)
	}

	lora := family(t, fams, "vllm:lora_requests_info", dto.MetricType_GAUGE)
	if len(lora.Metric) != 1 {
		t.Fatalf("vllm:lora_requests_info has %d series", len(lora.Metric))
	}
	l := labelMap(lora.Metric[0])
	for _, k := range []string{"running_lora_adapters", "waiting_lora_adapters"} {
		if v, ok := l[k]; !ok || v != "" {
			t.Errorf("vllm:lora_requests_info label %s = %q (present %v), want present and empty", k, v, ok)
		}
	}
	if l["max_lora"] != "0" {
		t.Errorf("vllm:lora_requests_info max_lora = %q, want 0", l["max_lora"])
	}
	if ts := lora.Metric[0].Gauge.GetValue(); math.Abs(ts-float64(time.Now().Unix())) > 60 {
		t.Errorf("vllm:lora_requests_info = %v, want the last update's Unix time", ts)
	}

	for name := range fams {
		if strings.HasPrefix(name, "vllm:spec_decode") {
			t.Errorf("%s exported without speculative decoding", name)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestServerSpecDecodeMetrics: with speculative decoding, vLLM's
// spec_decode counters count each verification step: every decode step
// drafts, accepted tokens plus one (the target's own) make the output after
// the first token, and the per-position counts fall with the position and
// add up to the accepted tokens.
func TestServerSpecDecodeMetrics(t *testing.T) {
	const k, out = 3, 20
	s := startTest(t, func(c *Config) {
		c.Speculative = sim.SpecConfig{NumSpeculativeTokens: k, Acceptance: 0.8}
	})
	body := `{"model":"llama-3.1-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":` + strconv.Itoa(out) + `}`
	if res := postStream(t, s.URL(), "/v1/chat/completions", body, nil); !res.done {
		t.Fatalf("request did not finish: %d %s", res.status, res.body)
	}
	fams := scrape(t, s)
	value := func(name string) float64 {
		t.Helper()
		f := family(t, fams, name, dto.MetricType_COUNTER)
		if l := labelMap(f.Metric[0]); l["model_name"] != "llama-3.1-8b" || l["engine"] != "0" {
			t.Errorf("%s labels %v", name, l)
		}
		return f.Metric[0].Counter.GetValue()
	}
	drafts := value("vllm:spec_decode_num_drafts_total")
	draftTokens := value("vllm:spec_decode_num_draft_tokens_total")
	accepted := value("vllm:spec_decode_num_accepted_tokens_total")
	if drafts+accepted != out-1 {
		t.Errorf("drafts %v + accepted %v = %v, want the %d tokens after the first", drafts, accepted, drafts+accepted, out-1)
	}
	if drafts == 0 || draftTokens > k*drafts || draftTokens < accepted {
		t.Errorf("%v drafts of %v tokens, %v accepted: want 0 < accepted ≤ draft tokens ≤ %d per draft", drafts, draftTokens, accepted, k)
	}
	pos := byLabel(family(t, fams, "vllm:spec_decode_num_accepted_tokens_per_pos_total", dto.MetricType_COUNTER), "position")
	if len(pos) != k {
		t.Fatalf("per-position counter has %d positions, want %d", len(pos), k)
	}
	sum, prev := 0.0, drafts
	for i := range k {
		v := pos[strconv.Itoa(i)].Counter.GetValue()
		if v > prev {
			t.Errorf("position %d accepted %v times, more than position %d's %v", i, v, i-1, prev)
		}
		sum, prev = sum+v, v
	}
	if sum != accepted {
		t.Errorf("per-position accepted tokens add up to %v, want %v", sum, accepted)
	}
}

// TestDetailObservations: the per-request histograms take the sequence's
// own counts (preemptions included), and vLLM's bucket builder matches
// build_1_2_5_buckets.
func TestDetailObservations(t *testing.T) {
	if got, want := buckets125(100), []float64{1, 2, 5, 10, 20, 50, 100}; !slices.Equal(got, want) {
		t.Errorf("buckets125(100) = %v, want %v", got, want)
	}
	if got := buckets125(4096); got[len(got)-1] != 2000 {
		t.Errorf("buckets125(4096) ends at %v, want 2000", got[len(got)-1])
	}
	for v, want := range map[float64]string{0.9: "0.9", 1: "1.0", 0.92: "0.92"} {
		if got := pyFloat(v); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", v, got, want)
		}
	}
	d, err := sim.Resolve(nil, DefaultConfig().Config)
	if err != nil {
		t.Fatal(err)
	}
	m := newServerMetrics("m", "0", d)
	sq := &sim.Seq{PromptLen: 100, CachedTokens: 32, Output: 7, Preemptions: 2}
	m.observeFinished(sq, newRequestParams(d, nil, nil, 0, sq.PromptLen))
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if h := f.Metric[0].Histogram; h != nil && h.GetSampleCount() > 0 {
			got[f.GetName()] = h.GetSampleSum()
		}
	}
	for name, want := range map[string]float64{
		"vllm:request_num_preemptions": 2, "vllm:request_prefill_kv_computed_tokens": 68, "vllm:request_prompt_tokens": 100,
		"vllm:request_generation_tokens": 7, "vllm:request_params_n": 1, "vllm:request_params_max_tokens": float64(d.MaxModelLen - 100),
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

package enginemetrics

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// What Parse reads from each engine's exposition; NaN where the engine
// publishes nothing. The cases are those of the gateway's former
// parseEngineStats and parseEngineMetrics and of the picker's former
// parseEngineMetrics, every assertion kept.
func TestParse(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name                 string
		text                 string
		waiting, running, kv float64
		tokens, q, h, hrate  float64
		load                 bool // Load's ok: some queue or KV gauge published
	}{
		{
			name: "vLLM v1 (client_golang names counters with _total)",
			text: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="m"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 600
# TYPE vllm:external_prefix_cache_queries_total counter
vllm:external_prefix_cache_queries_total{model_name="m"} 99999
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048",num_gpu_blocks_override="None"} 1
`,
			waiting: 3, running: nan, kv: 0.25, tokens: 2048 * 16, q: 1000, h: 600, hrate: nan, load: true,
		},
		{
			name: "vLLM, two models: queues summed, KV usage the highest, waiting_by_reason not a queue",
			text: "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 3\n" +
				"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"a\"} 4\n" +
				"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\nvllm:kv_cache_usage_perc{model_name=\"b\"} 0.5\n" +
				"# TYPE vllm:num_requests_waiting_by_reason gauge\nvllm:num_requests_waiting_by_reason{reason=\"capacity\"} 99\n",
			waiting: 5, running: 4, kv: 0.5, tokens: nan, q: nan, h: nan, hrate: nan, load: true,
		},
		{
			name: "vLLM before v0.10 (gpu_ names), two models waiting",
			text: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 2
vllm:num_requests_waiting{model_name="b"} 5
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="a"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="m"} 50
vllm:gpu_prefix_cache_hits_total{model_name="m"} 5
`,
			waiting: 7, running: nan, kv: 0.5, tokens: nan, q: 50, h: 5, hrate: nan, load: true,
		},
		{
			name:    "vLLM before v0.10, unlabelled",
			text:    "vllm:num_requests_waiting 1\nvllm:gpu_cache_usage_perc 0.75\n",
			waiting: 1, running: nan, kv: 0.75, tokens: nan, q: nan, h: nan, hrate: nan, load: true,
		},
		{
			name: "stand-in (TYPE line without _total), two models summed",
			text: `# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="a"} 10
vllm:prefix_cache_queries_total{model_name="b"} 30
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="a"} 4
vllm:prefix_cache_hits_total{model_name="b"} 6
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="64",num_gpu_blocks="96"} 1
`,
			waiting: nan, running: nan, kv: nan, tokens: 96 * 64, q: 40, h: 10, hrate: nan,
		},
		{
			name:    "KV cache not yet profiled",
			text:    "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1\n",
			waiting: nan, running: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan,
		},
		{
			name: "SGLang",
			text: "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 6\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 8\n# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.4\n" +
				"# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{model_name=\"m\"} 161721\n# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name=\"m\"} 0.75\n",
			waiting: 6, running: 8, kv: 0.4, tokens: 161721, q: nan, h: nan, hrate: 0.75, load: true,
		},
		{
			name: "vLLM-style suffix under another prefix; hit rates averaged",
			text: `# TYPE sglang:num_requests_waiting gauge
sglang:num_requests_waiting{model_name="m"} 2
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp="0"} 0.5
sglang:cache_hit_rate{dp="1"} 1
`,
			waiting: 2, running: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: 0.75, load: true,
		},
		{
			name: "Triton TensorRT-LLM: the gauge selected by its label",
			text: "# TYPE nv_trt_llm_request_metrics gauge\nnv_trt_llm_request_metrics{request_type=\"waiting\",model=\"m\"} 3\nnv_trt_llm_request_metrics{request_type=\"scheduled\",model=\"m\"} 7\nnv_trt_llm_request_metrics{request_type=\"max\",model=\"m\"} 64\n" +
				"# TYPE nv_trt_llm_kv_cache_block_metrics gauge\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"} 0.3\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\"} 300\n",
			waiting: 3, running: 7, kv: 0.3, tokens: nan, q: nan, h: nan, hrate: nan, load: true,
		},
		{
			name:    "hits without queries are not a rate",
			text:    "vllm:prefix_cache_hits_total 5\n",
			waiting: nan, running: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan,
		},
		{
			name:    "not a number is not published",
			text:    "vllm:num_requests_waiting{a=\"1\"} NaN\nvllm:num_requests_waiting{a=\"2\"} 4\nvllm:kv_cache_usage_perc +Inf\nsglang:max_total_num_tokens -5\nsglang:cache_hit_rate 1.5\n",
			waiting: 4, running: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan, load: true,
		},
		{
			name:    "none of them",
			text:    "process_cpu_seconds_total 3\n",
			waiting: nan, running: nan, kv: nan, tokens: nan, q: nan, h: nan, hrate: nan,
		},
	}
	same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := Parse(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"waiting", es.Waiting, tt.waiting}, {"running", es.Running, tt.running}, {"kv usage", es.KVUsage, tt.kv},
				{"cache tokens", es.CacheTokens, tt.tokens}, {"prefix queries", es.PrefixQueries, tt.q},
				{"prefix hits", es.PrefixHits, tt.h}, {"hit rate gauge", es.HitRate, tt.hrate},
			} {
				if !same(c.got, c.want) {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
			w, r, kv, ok := Load(es)
			if ok != tt.load {
				t.Errorf("Load ok = %v, want %v", ok, tt.load)
			}
			// Load reads 0 for what is not published.
			for _, c := range []struct {
				what      string
				got, want float64
			}{{"waiting", w, tt.waiting}, {"running", r, tt.running}, {"kv usage", kv, tt.kv}} {
				if want := zeroNaN(c.want); c.got != want {
					t.Errorf("Load %s = %v, want %v", c.what, c.got, want)
				}
			}
		})
	}
	for _, bad := range []string{"vllm:x{ 1\n", "{\"json\":1}"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("malformed exposition %q parsed", bad)
		}
	}
}

// Scrape over loopback: the exposition a server answers, and errors for
// a status other than 200 and for nothing listening.
func TestScrape(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/loading" {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "vllm:num_requests_waiting 2\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"10\"} 1\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	ctx := context.Background()
	es, err := Scrape(ctx, http.DefaultClient, base+"/metrics")
	if err != nil || es.Waiting != 2 || es.CacheTokens != 160 {
		t.Errorf("got %+v, %v; want 2 waiting and 160 cache tokens", es, err)
	}
	if _, err := Scrape(ctx, http.DefaultClient, base+"/loading"); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Errorf("a 503 answer: error %v, want one naming the status", err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	if _, err := Scrape(ctx, http.DefaultClient, "http://"+addr+"/metrics"); err == nil {
		t.Error("scraping an address where nothing listens succeeded")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("vllm:num_requests_waiting 1\n")
	f.Add("# TYPE sglang:token_usage gauge\nsglang:token_usage{a=\"b\"} NaN\n")
	f.Add("nv_trt_llm_request_metrics{request_type=\"waiting\"} +Inf\nnv_trt_llm_request_metrics{request_type=\"waiting\",x=\"1\"} -Inf\n")
	f.Add("vllm:cache_config_info{block_size=\"1e308\",num_gpu_blocks=\"1e308\"} 1\nsglang:cache_hit_rate 0.5\n")
	f.Add("a:num_requests_waiting 1\nb:num_requests_waiting 2\nvllm:prefix_cache_queries_total 3\nvllm:prefix_cache_hits 1\n")
	f.Fuzz(func(t *testing.T, text string) {
		es, err := Parse(strings.NewReader(text))
		// An error exactly when the text is no exposition.
		tp := expfmt.NewTextParser(model.UTF8Validation)
		_, perr := tp.TextToMetricFamilies(strings.NewReader(text))
		if (err == nil) != (perr == nil) {
			t.Fatalf("Parse error %v, exposition error %v, for %q", err, perr, text)
		}
		if err != nil {
			return
		}
		// The same text reads the same (no dependence on map order).
		again, _ := Parse(strings.NewReader(text))
		if !sameStats(es, again) {
			t.Fatalf("%q read as %+v, then %+v", text, es, again)
		}
		// A reading accepted by Load has no NaN gauge.
		w, r, kv, ok := Load(es)
		if ok && (math.IsNaN(w) || math.IsNaN(r) || math.IsNaN(kv)) {
			t.Fatalf("NaN gauge from %q: %+v", text, es)
		}
		if ok == (math.IsNaN(es.Waiting) && math.IsNaN(es.Running) && math.IsNaN(es.KVUsage)) {
			t.Fatalf("Load ok %v for %+v", ok, es)
		}
		if math.IsNaN(es.PrefixQueries) != math.IsNaN(es.PrefixHits) {
			t.Fatalf("one prefix-cache counter without the other from %q: %+v", text, es)
		}
		if !math.IsNaN(es.CacheTokens) && !(es.CacheTokens > 0 && !math.IsInf(es.CacheTokens, 0)) {
			t.Fatalf("cache tokens %v from %q", es.CacheTokens, text)
		}
		if !math.IsNaN(es.HitRate) && !(es.HitRate >= 0 && es.HitRate <= 1) {
			t.Fatalf("hit rate %v from %q", es.HitRate, text)
		}
	})
}

func sameStats(a, b sched.EngineStats) bool {
	eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	return eq(a.Waiting, b.Waiting) && eq(a.Running, b.Running) && eq(a.KVUsage, b.KVUsage) &&
		eq(a.CacheTokens, b.CacheTokens) && eq(a.PrefixQueries, b.PrefixQueries) &&
		eq(a.PrefixHits, b.PrefixHits) && eq(a.HitRate, b.HitRate)
}

// process_start_time_seconds, as Python's and Go's Prometheus clients
// publish it, is the engine's start time; absent, zero or not a number,
// it is unknown.
func TestParseStartTime(t *testing.T) {
	tests := []struct {
		name string
		text string
		want float64 // NaN: unknown
	}{
		{"published", "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 1.7330857921e+09\n", 1.7330857921e+09},
		{"absent", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n", math.NaN()},
		{"zero", "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds 0\n", math.NaN()},
		{"not a number", "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds NaN\n", math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := Parse(strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if es.StartTime != tt.want && !(math.IsNaN(es.StartTime) && math.IsNaN(tt.want)) {
				t.Fatalf("start time %v, want %v", es.StartTime, tt.want)
			}
		})
	}
}

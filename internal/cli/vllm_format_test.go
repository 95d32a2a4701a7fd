package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// testdata/vllm_bench_serve_result.json is a result file as `vllm bench
// serve --backend openai-chat --request-rate inf --max-concurrency 4
// --save-result --save-detailed` writes it (default --percentile-metrics
// ttft,tpot,itl and --metric-percentiles 99), laid out from vLLM's
// vllm/benchmarks/serve.py: main_async's setup and traffic keys, then
// benchmark()'s result dict, then process_one_metric's statistics; its
// values are a 3-request run's, its key order and JSON types vLLM's.
const vllmFixture = "testdata/vllm_bench_serve_result.json"

// jsonField is one top-level key of a JSON object with its value.
type jsonField struct {
	key string
	raw json.RawMessage
}

// readObject reads a JSON object's fields in file order.
func readObject(t *testing.T, data []byte) []jsonField {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %v %v", tok, err)
	}
	var fields []jsonField
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%v: %v", tok, err)
		}
		fields = append(fields, jsonField{tok.(string), raw})
	}
	return fields
}

// jsonType names a JSON value's type as Python reads it: an int is a
// number without a fraction or exponent, a float one with; an array is
// named by its first element whose type is known ("array<?>" when none).
func jsonType(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "null":
		return "null"
	case s == "true" || s == "false":
		return "bool"
	case strings.HasPrefix(s, `"`):
		return "string"
	case strings.HasPrefix(s, "["):
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return "bad array"
		}
		for _, e := range elems {
			if et := jsonType(e); !strings.HasSuffix(et, "<?>") {
				return "array<" + et + ">"
			}
		}
		return "array<?>"
	case strings.ContainsAny(s, ".eE") || s == "Infinity" || s == "NaN":
		return "float"
	}
	return "int"
}

func fieldKeys(fs []jsonField) []string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}

func fieldMap(t *testing.T, fs []jsonField) map[string]any {
	t.Helper()
	m := map[string]any{}
	for _, f := range fs {
		var v any
		if err := json.Unmarshal(f.raw, &v); err != nil {
			t.Fatalf("%s: %v", f.key, err)
		}
		m[f.key] = v
	}
	return m
}

func floats(t *testing.T, v any) []float64 {
	t.Helper()
	xs, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not a list", v)
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x.(float64)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestVLLMFormatMatchesVLLMResultFile runs the built-in simulator with
// --format vllm --format-detailed and checks that summary.vllm.json has
// exactly the keys of vLLM's result file, in its order, with its JSON
// types, and values that agree with each other and with requests.jsonl.
func TestVLLMFormatMatchesVLLMResultFile(t *testing.T) {
	fixture, err := os.ReadFile(vllmFixture)
	if err != nil {
		t.Fatal(err)
	}
	want := readObject(t, fixture)
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "-n", "12", "-c", "4", "--max-tokens", "16", "--out", out, "--no-progress", "--no-store",
		"--format", "vllm", "--save-detailed")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.vllm.json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(bytes.TrimSpace(data), []byte("\n")) != 0 {
		t.Error("vLLM writes its result on one line (json.dump); summary.vllm.json spans several")
	}
	got := readObject(t, data)
	if g, w := fieldKeys(got), fieldKeys(want); !slices.Equal(g, w) {
		t.Fatalf("keys differ from vLLM's result file\n got %v\nwant %v", g, w)
	}
	for i, f := range got {
		if g, w := jsonType(f.raw), jsonType(want[i].raw); g != w {
			t.Errorf("%s: JSON type %s (%s), vLLM writes %s (%s)", f.key, g, f.raw, w, want[i].raw)
		}
	}

	v := fieldMap(t, got)
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Index < recs[j].Index })
	n := int(v["num_prompts"].(float64))
	if completed, failed := int(v["completed"].(float64)), int(v["failed"].(float64)); completed+failed != n || n != 12 || failed != 0 {
		t.Errorf("completed %d + failed %d, num_prompts %d; want 12 + 0 = 12", completed, failed, n)
	}
	for _, k := range vllmDetailedKeys {
		if l := len(v[k].([]any)); l != n {
			t.Errorf("%s has %d entries for %d prompts", k, l, n)
		}
	}
	if v["backend"] != "openai-chat" || v["endpoint_type"] != "openai-chat" || v["request_rate"] != "inf" || v["max_concurrency"] != 4.0 ||
		v["burstiness"] != 1.0 || v["label"] != nil || v["request_goodput"] != nil || v["model_id"] != recs[0].Model || v["tokenizer_id"] == "" {
		t.Errorf("setup and traffic keys: %v %v %v %v %v %v %v %v %v", v["backend"], v["endpoint_type"], v["request_rate"], v["max_concurrency"],
			v["burstiness"], v["label"], v["request_goodput"], v["model_id"], v["tokenizer_id"])
	}
	if !regexp.MustCompile(`^\d{8}-\d{6}$`).MatchString(v["date"].(string)) {
		t.Errorf("date %q, want vLLM's %%Y%%m%%d-%%H%%M%%S", v["date"])
	}

	// Per-request values are in seconds, in request order.
	ttfts, latencies := floats(t, v["ttfts"]), floats(t, v["latencies"])
	itls := v["itls"].([]any)
	inLens, outLens := floats(t, v["input_lens"]), floats(t, v["output_lens"])
	var allITL, tpots []float64
	totalIn, totalOut, chunks := 0.0, 0.0, 0
	for i, r := range recs {
		if !near(ttfts[i]*1000, r.TTFTMs) {
			t.Errorf("request %d: ttfts %v s, requests.jsonl ttft_ms %v", i, ttfts[i], r.TTFTMs)
		}
		gaps := floats(t, itls[i])
		lat := ttfts[i]
		for j, g := range gaps {
			if !near(g*1000, r.ITLMs[j]) {
				t.Errorf("request %d gap %d: %v s, requests.jsonl %v ms", i, j, g, r.ITLMs[j])
			}
			lat += g
		}
		if !near(latencies[i], lat) {
			t.Errorf("request %d: latency %v, want ttft + gaps = %v", i, latencies[i], lat)
		}
		if int(outLens[i]) != r.OutputTokens() || int(inLens[i]) != r.InputTokens() {
			t.Errorf("request %d: lens %v/%v, records %d/%d", i, inLens[i], outLens[i], r.InputTokens(), r.OutputTokens())
		}
		if outLens[i] > 1 {
			tpots = append(tpots, (lat-ttfts[i])/(outLens[i]-1))
		}
		allITL = append(allITL, gaps...)
		totalIn += inLens[i]
		totalOut += outLens[i]
		chunks += 1 + len(gaps)
		if text := v["generated_texts"].([]any)[i].(string); text == "" {
			t.Errorf("request %d: no generated text", i)
		}
		if e := v["errors"].([]any)[i].(string); e != "" {
			t.Errorf("request %d: error %q", i, e)
		}
	}
	if v["total_input_tokens"] != totalIn || v["total_output_tokens"] != totalOut {
		t.Errorf("totals %v/%v, sums of the lens %v/%v", v["total_input_tokens"], v["total_output_tokens"], totalIn, totalOut)
	}
	dur := v["duration"].(float64)
	if !near(v["request_throughput"].(float64)*dur, 12) || !near(v["output_throughput"].(float64)*dur, totalOut) ||
		!near(v["total_token_throughput"].(float64)*dur, totalIn+totalOut) {
		t.Errorf("throughputs %v %v %v over %v s", v["request_throughput"], v["output_throughput"], v["total_token_throughput"], dur)
	}
	if p := v["max_concurrent_requests"].(float64); p < 1 || p > 4 {
		t.Errorf("max_concurrent_requests %v with 4 in flight at most", p)
	}
	if p := v["max_output_tokens_per_s"].(float64); p < 1 || p > float64(chunks) {
		t.Errorf("max_output_tokens_per_s %v of %d token chunks", p, chunks)
	}

	// Statistics in ms: std is the population's (np.std), percentiles
	// linear (np.percentile).
	for name, xs := range map[string][]float64{"ttft": ttfts, "tpot": tpots, "itl": allITL} {
		sorted := slices.Sorted(slices.Values(xs))
		var sum, ss float64
		for _, x := range xs {
			sum += x
		}
		mean := sum / float64(len(xs))
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		pop, sample := math.Sqrt(ss/float64(len(xs)))*1000, math.Sqrt(ss/float64(len(xs)-1))*1000
		if got := v["std_"+name+"_ms"].(float64); !near(got, pop) || near(got, sample) {
			t.Errorf("std_%s_ms %v; population std %v, sample %v", name, got, pop, sample)
		}
		if got := v["mean_"+name+"_ms"].(float64); !near(got, mean*1000) {
			t.Errorf("mean_%s_ms %v, want %v", name, got, mean*1000)
		}
		if got := v["median_"+name+"_ms"].(float64); !near(got, stats.Quantile(sorted, .5)*1000) {
			t.Errorf("median_%s_ms %v", name, got)
		}
		if got := v["p99_"+name+"_ms"].(float64); !near(got, stats.Quantile(sorted, .99)*1000) {
			t.Errorf("p99_%s_ms %v", name, got)
		}
	}
}

// Without --format-detailed the per-request lists vLLM writes only with
// --save-detailed are left out; an open loop has its rate as a float and
// no max_concurrency. The percentile flags choose the statistics.
func TestVLLMFormatOpenLoopNotDetailed(t *testing.T) {
	fixture, err := os.ReadFile(vllmFixture)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, k := range fieldKeys(readObject(t, fixture)) {
		if !slices.Contains(vllmDetailedKeys, k) {
			want = append(want, k)
		}
	}
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCLI(t, "bench", "-n", "6", "--rate", "50", "--max-tokens", "8", "--out", out, "--no-progress", "--no-store", "--format", "vllm")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.vllm.json"))
	if err != nil {
		t.Fatal(err)
	}
	got := readObject(t, data)
	if !slices.Equal(fieldKeys(got), want) {
		t.Fatalf("keys\n got %v\nwant %v", fieldKeys(got), want)
	}
	for _, f := range got {
		switch f.key {
		case "request_rate":
			if string(f.raw) != "50.0" {
				t.Errorf("request_rate %s, vLLM writes 50.0", f.raw)
			}
		case "max_concurrency", "request_goodput", "label":
			if string(f.raw) != "null" {
				t.Errorf("%s %s, want null", f.key, f.raw)
			}
		case "burstiness":
			if string(f.raw) != "1.0" {
				t.Errorf("burstiness %s, want 1.0 (Poisson)", f.raw)
			}
		}
	}

	code, stdout, stderr = runCLI(t, "bench", "-n", "4", "-c", "2", "--max-tokens", "4", "--out", out+"2", "--no-progress", "--no-store",
		"--format", "vllm", "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,99.9", "--label", "gpu=h100")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if data, err = os.ReadFile(filepath.Join(out+"2", "summary.vllm.json")); err != nil {
		t.Fatal(err)
	}
	keys := fieldKeys(readObject(t, data))
	statKeys := keys[slices.Index(keys, "rtfx")+1:]
	if w := []string{"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms",
		"mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p99.9_e2el_ms"}; !slices.Equal(statKeys, w) {
		t.Errorf("statistics keys %v, want %v", statKeys, w)
	}
	// --label pairs are vLLM's --metadata: top-level keys after the setup.
	if i := slices.Index(keys, "gpu"); i != slices.Index(keys, "num_prompts")+1 {
		t.Errorf("the label gpu=h100 is not where vLLM puts --metadata: %v", keys)
	}
}

func TestVLLMFormatUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--format-detailed"}, "needs --format vllm"},
		{[]string{"bench", "--save-detailed"}, "needs --format vllm"},
		{[]string{"bench", "--metric-percentiles", "90"}, "needs --format vllm"},
		{[]string{"bench", "--format", "vllm", "--percentile-metrics", "ttft,latency"}, "--percentile-metrics"},
		{[]string{"bench", "--format", "vllm", "--metric-percentiles", "101"}, "--metric-percentiles"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", tc.args, code, stderr, tc.want)
		}
	}
}

// The load ttft ran, as vLLM's traffic keys.
func TestVLLMTraffic(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		rate       float64 // 0: "inf"
		burstiness float64
		maxConc    int // 0: null
	}{
		{nil, 0, 1, 8},
		{[]string{"-c", "16"}, 0, 1, 16},
		{[]string{"--request-rate", "inf", "--max-concurrency", "3", "-n", "12"}, 0, 1, 3},
		{[]string{"--request-rate", "inf", "-n", "12"}, 0, 1, 0},
		{[]string{"--rate", "5"}, 5, 1, 0},
		{[]string{"--rate", "5", "--arrival", "gamma", "--burstiness", "0.5", "--max-concurrency", "4"}, 5, 0.5, 4},
		{[]string{"--rate", "5", "--arrival", "constant"}, 5, math.Inf(1), 0},
	} {
		var l loadOptions
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		addLoadFlags(fs, &l)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := l.validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		rate, b, mc := vllmTraffic(&l, nil, nil)
		if (rate == nil) != (tc.rate == 0) || rate != nil && *rate != tc.rate {
			t.Errorf("%v: request_rate %v, want %v (0: inf)", tc.args, rate, tc.rate)
		}
		if b != tc.burstiness || mc != tc.maxConc {
			t.Errorf("%v: burstiness %v, max_concurrency %d; want %v, %d", tc.args, b, mc, tc.burstiness, tc.maxConc)
		}
	}
}

// The per-second peaks as calculate_metrics computes them: token chunks
// bucketed by whole seconds from the first start, and concurrency over
// half-open intervals (a request ending as another starts does not
// overlap it); failed requests count in neither.
func TestVLLMPeaks(t *testing.T) {
	const t0 = 1024.0
	reqs := []vllmRequest{
		{ok: true, start: t0, ttft: 0.5, itl: []float64{0.25, 0.5}, latency: 1.25},                // tokens 0.5 0.75 | 1.25
		{ok: true, start: t0 + 1.25, ttft: 0.125, itl: []float64{0.125, 0.0625}, latency: 0.3125}, // | 1.375 1.5 1.5625
		{ok: true, start: t0 + 0.125, ttft: 0.125, itl: []float64{1.25}, latency: 1.375},          // 0.25 | 1.5
		{ok: false, start: t0 + 0.5, ttft: 0.1, itl: []float64{0.1, 0.1, 0.1, 0.1}},
	}
	tok, conc := vllmPeaks(reqs)
	if tok != 5 || conc != 2 {
		t.Errorf("peaks %v tokens/s, %d concurrent; want 5 and 2", tok, conc)
	}
	if tok, conc := vllmPeaks(reqs[3:]); tok != 0 || conc != 0 {
		t.Errorf("no successful request: %v, %d", tok, conc)
	}
}

// Numbers and strings are spelled as Python's json.dump spells them
// (outputs of json.dumps).
func TestVLLMPythonJSON(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", 0: "0.0", 0.1: "0.1", 1e-4: "0.0001", 1e-5: "1e-05", 1.5e-7: "1.5e-07", 1e16: "1e+16",
		1e15: "1000000000000000.0", 123456789.125: "123456789.125", 4e-06: "4e-06", 0.30000000000000004: "0.30000000000000004",
		1e100: "1e+100", math.Inf(1): "Infinity", -2.5: "-2.5",
	} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %s, Python writes %s", f, got, want)
		}
	}
	if got := pyFloat(math.Copysign(0, -1)); got != "-0.0" {
		t.Errorf("pyFloat(-0) = %s", got)
	}
	if got, want := string(appendPyString(nil, "é\n\"x😀\x7f<&\t\x01")), `"\u00e9\n\"x\ud83d\ude00\u007f<&\t\u0001"`; got != want {
		t.Errorf("string %s, Python writes %s", got, want)
	}
	var o pyObject
	o.set("a", 1)
	o.set("b", []float64{1, 0.5})
	o.set("c", nil)
	o.set("a", "x") // replaced where it was, as in a dict
	o.set("d", [][]float64{{}, {2}})
	o.del("c")
	if got, want := string(o.json()), `{"a": "x", "b": [1.0, 0.5], "d": [[], [2.0]]}`; got != want {
		t.Errorf("object %s, want %s", got, want)
	}
}

package cli

// --format vllm: DIR/summary.vllm.json as `vllm bench serve --save-result`
// writes its result file (vllm/benchmarks/serve.py: main_async's
// result_json merged with benchmark()'s result, the statistics of
// calculate_metrics), so that scripts and dashboards written for vLLM's file
// read ttft's runs unchanged: the same keys in the same order, the same
// units (latency statistics in ms, per-request values in seconds), the same
// definitions (population std as np.std, percentiles as np.percentile,
// per-second peaks), and numbers spelled as Python's json module spells
// them (1.0 for a float, "inf" for an unlimited request rate).

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// vllmFormatOptions are --format vllm's own flags, named as vLLM's.
type vllmFormatOptions struct {
	Detailed          bool
	PercentileMetrics string
	MetricPercentiles string

	metrics     []string
	percentiles []float64
}

// vllmMetrics are the statistics vLLM can report, in the order it writes
// them (process_one_metric's calls).
var vllmMetrics = []string{"ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"}

// vllmDetailedKeys are the per-request lists vLLM writes only with
// --save-detailed (the fields main_async deletes otherwise).
var vllmDetailedKeys = []string{"input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"}

func addVLLMFormatFlags(f *pflag.FlagSet, o *vllmFormatOptions) {
	f.BoolVar(&o.Detailed, "format-detailed", false, "with --format vllm: also write the per-request lists vLLM writes only with --save-detailed (input_lens, output_lens, start_times, ttfts, itls, generated_texts, errors; every response's text is kept in memory for it); --save-detailed works too")
	f.StringVar(&o.PercentileMetrics, "percentile-metrics", "ttft,tpot,itl", "with --format vllm: metrics given mean, median, std and percentiles, as vLLM's flag: ttft, tpot, itl, e2el, client_queue_time, e2el_including_client_queue")
	f.StringVar(&o.MetricPercentiles, "metric-percentiles", "99", "with --format vllm: comma-separated percentiles of those metrics, as vLLM's flag (e.g. 50,90,99)")
}

// validate parses the flags; they are refused without --format vllm, which
// alone reads them.
func (o *vllmFormatOptions) validate(fs *pflag.FlagSet, format string) error {
	if format != "vllm" && fs != nil {
		for _, name := range []string{"format-detailed", "percentile-metrics", "metric-percentiles"} {
			if fs.Changed(name) {
				return usageErr("--%s shapes the --format vllm file; it needs --format vllm", name)
			}
		}
	}
	o.metrics, o.percentiles = nil, nil
	for _, m := range strings.Split(o.PercentileMetrics, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(vllmMetrics, m) {
			return usageErr("--percentile-metrics: %q is not one of %s", m, strings.Join(vllmMetrics, ", "))
		}
		o.metrics = append(o.metrics, m)
	}
	for _, p := range strings.Split(o.MetricPercentiles, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(v >= 0 && v <= 100) {
			return usageErr("--metric-percentiles: %q is not a percentile between 0 and 100", p)
		}
		o.percentiles = append(o.percentiles, v)
	}
	return nil
}

// textKeeper keeps the generated texts of a run's measured requests by
// request index (--format-detailed).
type textKeeper struct {
	mu   sync.Mutex
	text map[int]string
}

func (k *textKeeper) keep(rec *record.Record, text string) {
	if rec.Warmup {
		return
	}
	k.mu.Lock()
	if k.text == nil {
		k.text = map[int]string{}
	}
	k.text[rec.Index] = text
	k.mu.Unlock()
}

// vllmBackend is vLLM's --backend for an API: its name for the request
// function speaking the same protocol ("openai" for /v1/completions, its
// default; vLLM has no Anthropic backend, so that one keeps ttft's name).
func vllmBackend(api string) string {
	switch wire.API(api) {
	case wire.OpenAIChat:
		return "openai-chat"
	case wire.OpenAICompletions:
		return "openai"
	}
	return api
}

// vllmTraffic is the file's request_rate (nil: "inf"), burstiness and
// max_concurrency (0: null) for the load ttft ran: a closed loop of N is
// vLLM's --request-rate inf --max-concurrency N; --arrival constant is its
// --burstiness inf; a trace's own timestamps leave the rate at inf.
func vllmTraffic(l *loadOptions, src workload.Source, sc *workload.Scenario) (rate *float64, burstiness float64, maxConc int) {
	shape := func(process string, b float64) float64 {
		switch process {
		case "gamma":
			if b > 0 {
				return b
			}
		case "constant":
			return math.Inf(1)
		}
		return 1
	}
	switch {
	case l.allAtOnce:
		if l.fs != nil && l.fs.Changed("max-concurrency") {
			maxConc = l.Concurrency
		}
		return nil, 1, maxConc
	case l.Rate > 0:
		r := l.Rate
		return &r, shape(l.Arrival, l.Burstiness), l.MaxConcurrency
	case workload.OwnsSchedule(src) && sc != nil && sc.Arrival.RatePerS > 0:
		r := sc.Arrival.RatePerS
		return &r, shape(sc.Arrival.Process, sc.Arrival.Burstiness), l.MaxConcurrency
	case workload.OwnsSchedule(src):
		return nil, 1, l.MaxConcurrency
	}
	return nil, 1, l.Concurrency
}

// vllmInput is what the file is made of.
type vllmInput struct {
	sum      record.Summary
	recs     []record.Record
	texts    map[int]string // by request index
	date     time.Time
	backend  string
	model    string
	tokenize string
	metadata map[string]string // the run's --label pairs, as vLLM's --metadata

	rate       *float64 // nil: inf
	burstiness float64
	maxConc    int  // 0: null
	closedLoop bool // queue times count from the run's start, as vLLM's "all at once"

	detailed    bool
	metrics     []string
	percentiles []float64
}

// vllmRequest is one request as vLLM's RequestFuncOutput holds it, in
// seconds.
type vllmRequest struct {
	ok                          bool
	inLen, outLen               int
	start, ttft, latency, queue float64
	itl                         []float64
	text, err                   string
}

// vllmRequests turns the measured records into vLLM's outputs, in request
// order. A failed request has vLLM's zero latency and output length, and
// keeps what it received before failing (TTFT, gaps).
func vllmRequests(in *vllmInput) []vllmRequest {
	var recs []*record.Record
	for i := range in.recs {
		if !in.recs[i].Warmup {
			recs = append(recs, &in.recs[i])
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Index < recs[j].Index })
	out := make([]vllmRequest, len(recs))
	for i, r := range recs {
		q := vllmRequest{ok: r.OK(), inLen: r.InputTokens(), ttft: r.TTFTMs / 1000, itl: make([]float64, len(r.ITLMs))}
		if !r.Sent.IsZero() {
			q.start = float64(r.Sent.UnixNano()) / 1e9
			if !r.FirstToken.IsZero() {
				q.ttft = r.FirstToken.Sub(r.Sent).Seconds() // no ms round trip
			}
		}
		for j, g := range r.ITLMs {
			q.itl[j] = g / 1000
		}
		if in.closedLoop {
			if !r.Sent.IsZero() && r.Sent.After(in.sum.Started) {
				q.queue = r.Sent.Sub(in.sum.Started).Seconds()
			}
		} else {
			q.queue = r.ScheduleLagMs / 1000
		}
		if q.ok {
			q.outLen = r.OutputTokens()
			// vLLM's latency ends at the last token chunk, not the
			// stream's end marker.
			q.latency = q.ttft
			for _, g := range q.itl {
				q.latency += g
			}
			q.text = in.texts[r.Index]
		} else {
			q.err = r.Error
			if q.err == "" {
				q.err = r.ErrorClass
			}
		}
		out[i] = q
	}
	return out
}

// vllmPeaks are calculate_metrics' max_output_tokens_per_s (the most token
// chunks received in one whole second counted from the first request's
// start) and max_concurrent_requests (the most requests in flight at once,
// over half-open [start, start+latency) intervals), both over the
// successful requests.
func vllmPeaks(reqs []vllmRequest) (tokensPerS float64, concurrent int) {
	var ok []vllmRequest
	for _, q := range reqs {
		if q.ok {
			ok = append(ok, q)
		}
	}
	if len(ok) == 0 {
		return 0, 0
	}
	minStart, maxEnd := ok[0].start, ok[0].start+ok[0].latency
	for _, q := range ok {
		minStart = min(minStart, q.start)
		maxEnd = max(maxEnd, q.start+q.latency)
	}
	buckets := make([]int, int(math.Ceil(maxEnd-minStart))+1)
	count := func(t float64) {
		if b := int(t - minStart); b >= 0 && b < len(buckets) {
			buckets[b]++
		}
	}
	type event struct {
		at    float64
		delta int
	}
	events := make([]event, 0, 2*len(ok))
	for _, q := range ok {
		t := q.start + q.ttft
		count(t)
		for _, g := range q.itl {
			t += g
			count(t)
		}
		events = append(events, event{q.start, 1}, event{q.start + q.latency, -1})
	}
	for _, n := range buckets {
		tokensPerS = max(tokensPerS, float64(n))
	}
	// An end at the same instant as a start comes first.
	sort.Slice(events, func(i, j int) bool {
		if events[i].at != events[j].at {
			return events[i].at < events[j].at
		}
		return events[i].delta < events[j].delta
	})
	cur := 0
	for _, e := range events {
		cur += e.delta
		concurrent = max(concurrent, cur)
	}
	return tokensPerS, concurrent
}

// vllmStat is one metric's statistics as vLLM computes them in seconds and
// reports them in ms: np.mean, np.median, np.std (population) and
// np.percentile (linear), of [0] when there are no values.
type vllmStat struct {
	mean, median, std float64
	pcts              []float64
}

func describeVLLM(xs []float64, percentiles []float64) vllmStat {
	if len(xs) == 0 {
		xs = []float64{0}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	var ss float64
	for _, x := range s {
		ss += (x - mean) * (x - mean)
	}
	st := vllmStat{mean: mean * 1000, median: stats.Quantile(s, 0.5) * 1000, std: math.Sqrt(ss/float64(len(s))) * 1000}
	for _, p := range percentiles {
		st.pcts = append(st.pcts, stats.Quantile(s, p/100)*1000)
	}
	return st
}

// vllmResult builds summary.vllm.json.
func vllmResult(in *vllmInput) []byte {
	reqs := vllmRequests(in)
	var (
		completed, failed, totalIn, totalOut int
		ttfts, tpots, itls, e2els, queues    []float64
		inputLens, outputLens                = make([]int, len(reqs)), make([]int, len(reqs))
		ttftList, latencies, starts, queue   = make([]float64, len(reqs)), make([]float64, len(reqs)), make([]float64, len(reqs)), make([]float64, len(reqs))
		itlList                              = make([][]float64, len(reqs))
		texts, errs                          = make([]string, len(reqs)), make([]string, len(reqs))
	)
	for i, q := range reqs {
		inputLens[i], outputLens[i], ttftList[i], itlList[i] = q.inLen, q.outLen, q.ttft, q.itl
		latencies[i], starts[i], queue[i], texts[i], errs[i] = q.latency, q.start, q.queue, q.text, q.err
		if !q.ok {
			failed++
			continue
		}
		completed++
		totalIn += q.inLen
		totalOut += q.outLen
		if q.outLen > 1 {
			tpots = append(tpots, (q.latency-q.ttft)/float64(q.outLen-1))
		}
		ttfts = append(ttfts, q.ttft)
		itls = append(itls, q.itl...)
		e2els = append(e2els, q.latency)
		queues = append(queues, q.queue)
	}
	dur := in.sum.DurationS
	perS := func(n int) float64 {
		if dur <= 0 {
			return 0
		}
		return float64(n) / dur
	}

	var o pyObject
	o.set("date", in.date.Local().Format("20060102-150405"))
	o.set("endpoint_type", in.backend) // vLLM: "for backward compatibility"
	o.set("backend", in.backend)
	o.set("label", nil)
	o.set("model_id", in.model)
	o.set("tokenizer_id", in.tokenize)
	o.set("num_prompts", len(reqs))
	keys := make([]string, 0, len(in.metadata))
	for k := range in.metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o.set(k, in.metadata[k])
	}
	if in.rate == nil {
		o.set("request_rate", "inf")
	} else {
		o.set("request_rate", *in.rate)
	}
	o.set("burstiness", in.burstiness)
	if in.maxConc > 0 {
		o.set("max_concurrency", in.maxConc)
	} else {
		o.set("max_concurrency", nil)
	}
	o.set("duration", dur)
	o.set("completed", completed)
	o.set("failed", failed)
	o.set("total_input_tokens", totalIn)
	o.set("total_output_tokens", totalOut)
	o.set("request_throughput", perS(completed))
	if g := in.sum.Goodput; g != nil {
		o.set("request_goodput", g.RequestsPerS)
	} else {
		o.set("request_goodput", nil)
	}
	o.set("output_throughput", perS(totalOut))
	o.set("total_token_throughput", perS(totalIn+totalOut))
	o.set("input_lens", inputLens)
	o.set("output_lens", outputLens)
	o.set("ttfts", ttftList)
	o.set("itls", itlList)
	o.set("latencies", latencies)
	o.set("start_times", starts)
	o.set("queue_times", queue)
	o.set("generated_texts", texts)
	o.set("errors", errs)
	peakTok, peakConc := vllmPeaks(reqs)
	o.set("max_output_tokens_per_s", peakTok)
	o.set("max_concurrent_requests", peakConc)
	o.set("rtfx", 0.0) // audio only
	values := map[string][]float64{"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
	if in.maxConc > 0 {
		// vLLM reports queueing only where --max-concurrency made some.
		values["client_queue_time"] = queues
		if in.rate != nil {
			withQueue := make([]float64, len(e2els))
			for i := range e2els {
				withQueue[i] = e2els[i] + queues[i]
			}
			values["e2el_including_client_queue"] = withQueue
		}
	}
	for _, m := range vllmMetrics {
		xs, ok := values[m]
		if !ok || !slices.Contains(in.metrics, m) {
			continue
		}
		st := describeVLLM(xs, in.percentiles)
		o.set("mean_"+m+"_ms", st.mean)
		o.set("median_"+m+"_ms", st.median)
		o.set("std_"+m+"_ms", st.std)
		for i, p := range in.percentiles {
			o.set("p"+percentileWord(p)+"_"+m+"_ms", st.pcts[i])
		}
	}
	if !in.detailed {
		for _, k := range vllmDetailedKeys {
			o.del(k)
		}
	}
	return append(o.json(), '\n')
}

// percentileWord names a percentile in a key as vLLM does: 99 → "99",
// 99.9 → "99.9".
func percentileWord(p float64) string {
	if p == math.Trunc(p) {
		return strconv.Itoa(int(p))
	}
	return pyFloat(p)
}

// pyObject is a JSON object that keeps its keys in insertion order (a
// Python dict) and writes its values as json.dump does.
type pyObject struct {
	keys []string
	vals map[string]any
}

// set adds k, or replaces its value where it already is.
func (o *pyObject) set(k string, v any) {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *pyObject) del(k string) {
	if _, ok := o.vals[k]; ok {
		delete(o.vals, k)
		o.keys = slices.DeleteFunc(o.keys, func(s string) bool { return s == k })
	}
}

// json is the object on one line, with json.dump's default separators.
func (o *pyObject) json() []byte {
	b := []byte{'{'}
	for i, k := range o.keys {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPyString(b, k)
		b = append(b, ": "...)
		b = appendPy(b, o.vals[k])
	}
	return append(b, '}')
}

func appendPy(b []byte, v any) []byte {
	list := func(n int, each func(b []byte, i int) []byte) []byte {
		b = append(b, '[')
		for i := range n {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = each(b, i)
		}
		return append(b, ']')
	}
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return appendPyString(b, v)
	case int:
		return strconv.AppendInt(b, int64(v), 10)
	case float64:
		return append(b, pyFloat(v)...)
	case []int:
		return list(len(v), func(b []byte, i int) []byte { return strconv.AppendInt(b, int64(v[i]), 10) })
	case []float64:
		return list(len(v), func(b []byte, i int) []byte { return append(b, pyFloat(v[i])...) })
	case [][]float64:
		return list(len(v), func(b []byte, i int) []byte { return appendPy(b, v[i]) })
	case []string:
		return list(len(v), func(b []byte, i int) []byte { return appendPyString(b, v[i]) })
	}
	panic("pyObject: unsupported value type")
}

// pyFloat spells f as Python's float repr, which json.dump writes: the
// shortest digits that read back as f, a ".0" on whole numbers, exponent
// notation below 1e-4 and from 1e16, and Infinity/NaN as Python writes
// them (json.dump's allow_nan default).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f != 0 {
		if e := math.Floor(math.Log10(math.Abs(f))); e < -4 || e >= 16 {
			// Log10 can be off by one at powers of ten; the shortest
			// 'e' form knows the true exponent.
			s := strconv.FormatFloat(f, 'e', -1, 64)
			if exp, _ := strconv.Atoi(s[strings.IndexByte(s, 'e')+1:]); exp < -4 || exp >= 16 {
				return s
			}
		}
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// appendPyString writes s as json.dump does by default (ensure_ascii):
// everything outside printable ASCII escaped, as \uXXXX (surrogate pairs
// above the BMP; invalid UTF-8 as \ufffd).
func appendPyString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u4 := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r >= 0x20 && r < 0x7f:
			b = append(b, byte(r))
		case r > 0xffff:
			r -= 0x10000
			b = u4(b, 0xd800+(r>>10))
			b = u4(b, 0xdc00+(r&0x3ff))
		default:
			b = u4(b, r)
		}
	}
	return append(b, '"')
}

// keepText is the runner's Text hook: the responses are kept only for
// --format vllm --format-detailed.
func (b *benchRun) keepText() func(*record.Record, string) {
	if b.o.Format != "vllm" || !b.o.vllm.Detailed {
		return nil
	}
	return b.texts.keep
}

// vllmResult is the run's summary.vllm.json.
func (b *benchRun) vllmResult(sum record.Summary, recs []record.Record) []byte {
	o := b.o
	rate, burstiness, maxConc := vllmTraffic(&o.load, b.src, b.scenario)
	date := b.man.Ended
	if date.IsZero() {
		date = time.Now()
	}
	return vllmResult(&vllmInput{
		sum: sum, recs: recs, texts: b.texts.text, date: date,
		backend: vllmBackend(string(b.api)), model: b.tgt.model, tokenize: o.work.Tokenizer,
		metadata: parseLabels(o.Labels),
		rate:     rate, burstiness: burstiness, maxConc: maxConc, closedLoop: !o.load.openLoop(b.src),
		detailed: o.vllm.Detailed, metrics: o.vllm.metrics, percentiles: o.vllm.percentiles,
	})
}

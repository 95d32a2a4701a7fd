package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// EngineProfile names the metrics one engine family exposes for the parts
// of TTFT. Empty names mean the engine has no such metric.
type EngineProfile struct {
	Engine string
	// Histograms (seconds): server-side TTFT, queueing, prefill.
	TTFT, Queue, Prefill string
	// PrefillLabel restricts the prefill histogram to series with this
	// label=value (TGI's batch histograms carry method="prefill|decode").
	PrefillLabel [2]string
	// PrefillPerBatch says the prefill histogram times batches, not
	// requests, so its mean is per forward pass (reported with a caveat).
	PrefillPerBatch bool
	// Counters, the first name present wins (engines renamed them).
	PrefixHits, PrefixQueries, Preemptions []string
	// ModelLabel is the label that carries the model name.
	ModelLabel string
}

// Profiles are the engines whose metric names are known. The simulator
// exposes vLLM's names, so it is covered by the first.
//
//   - vLLM (v1 engine): vllm:time_to_first_token_seconds (arrival → first
//     token), vllm:request_queue_time_seconds (waiting), and
//     vllm:request_prefill_time_seconds (scheduled → first token);
//     prefix-cache and preemption counters (older names with gpu_ prefix).
//   - SGLang: sglang:time_to_first_token_seconds, sglang:queue_time_seconds;
//     no per-request prefill histogram.
//   - TGI: tgi_request_queue_duration per request and
//     tgi_batch_forward_duration{method="prefill"} per batch; no TTFT.
var Profiles = []EngineProfile{
	{
		Engine: "vllm", ModelLabel: "model_name",
		TTFT: "vllm:time_to_first_token_seconds", Queue: "vllm:request_queue_time_seconds", Prefill: "vllm:request_prefill_time_seconds",
		PrefixHits:    []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"},
		PrefixQueries: []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"},
		Preemptions:   []string{"vllm:num_preemptions_total"},
	},
	{
		Engine: "sglang", ModelLabel: "model_name",
		TTFT: "sglang:time_to_first_token_seconds", Queue: "sglang:queue_time_seconds",
		PrefixHits:    []string{"sglang:cache_hit_tokens_total"},
		PrefixQueries: []string{"sglang:prompt_tokens_total"},
		Preemptions:   []string{"sglang:num_retracted_reqs_total"},
	},
	{
		Engine: "tgi",
		Queue:  "tgi_request_queue_duration", Prefill: "tgi_batch_forward_duration",
		PrefillLabel: [2]string{"method", "prefill"}, PrefillPerBatch: true,
	},
}

// Snapshot is one scrape reduced to what the decomposition needs: per
// family, histogram sums, counts and merged cumulative buckets, or counter
// and gauge values, each summed over the series that pass the filter.
type Snapshot struct {
	At       time.Time
	Families map[string]*FamilyTotal
}

// FamilyTotal is a family summed over its series.
type FamilyTotal struct {
	Sum, Count float64 // histograms: _sum and _count; counters/gauges: Sum holds the value
	Buckets    map[float64]float64
}

// ParseSnapshot reads a Prometheus exposition (text, OpenMetrics or
// protobuf, per format; the zero Format means text) and sums it. keep, when
// not nil, chooses which series of a family count (label filter).
func ParseSnapshot(r io.Reader, format expfmt.Format, keep func(family string, m *dto.Metric) bool) (*Snapshot, error) {
	if format == "" {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(r, format)
	snap := &Snapshot{Families: map[string]*FamilyTotal{}}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		name := mf.GetName()
		ft := &FamilyTotal{}
		for _, m := range mf.GetMetric() {
			if keep != nil && !keep(name, m) {
				continue
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				ft.Sum += h.GetSampleSum()
				ft.Count += float64(h.GetSampleCount())
				if len(h.GetBucket()) > 0 && ft.Buckets == nil {
					ft.Buckets = map[float64]float64{}
				}
				for _, b := range h.GetBucket() {
					ft.Buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			case m.GetCounter() != nil:
				ft.Sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				ft.Sum += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				ft.Sum += m.GetUntyped().GetValue()
			case m.GetSummary() != nil:
				ft.Sum += m.GetSummary().GetSampleSum()
				ft.Count += float64(m.GetSummary().GetSampleCount())
			}
		}
		snap.Families[name] = ft
		// Counters appear as "x_total" in some clients' text and as "x" in
		// others' TYPE lines; index both spellings.
		if mf.GetType() == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
			snap.Families[name+"_total"] = ft
		}
	}
	return snap, nil
}

// delta accumulates a family's increase across consecutive snapshots,
// treating any decrease as a counter reset (engine restart).
func addDelta(acc *FamilyTotal, prev, cur *FamilyTotal) {
	if cur == nil {
		return
	}
	if prev == nil {
		prev = &FamilyTotal{}
	}
	reset := cur.Count < prev.Count || (cur.Count == 0 && prev.Count == 0 && cur.Sum < prev.Sum)
	base := prev
	if reset {
		base = &FamilyTotal{}
	}
	acc.Sum += cur.Sum - base.Sum
	acc.Count += cur.Count - base.Count
	for le, v := range cur.Buckets {
		if acc.Buckets == nil {
			acc.Buckets = map[float64]float64{}
		}
		acc.Buckets[le] += v - base.Buckets[le]
	}
}

// Scraper scrapes an engine's /metrics during a run and turns the deltas
// into a TTFT decomposition. It is also a bench.Observer: Done accumulates
// the client-side TTFT of every request that got a first token (warm-up
// included, because the server counts those too).
type Scraper struct {
	url      string
	client   *http.Client
	interval time.Duration
	model    string

	mu        sync.Mutex
	prev      *Snapshot
	acc       map[string]*FamilyTotal
	scrapes   int
	failures  []string
	first     time.Time
	last      time.Time
	clientSum float64
	clientN   int
	timingSum map[string]float64
	timingN   map[string]int

	stopLoop context.CancelFunc
	loopDone chan struct{}
}

// MetricsURLFor derives the default metrics URL from a target base URL:
// the same scheme and host, path /metrics (engines serve it at the root
// even when the API lives under /v1).
func MetricsURLFor(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("deriving the metrics URL from target %q: want http(s)://host[:port][/path]", target)
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/metrics"}).String(), nil
}

// StartScraper scrapes metricsURL once now (an error means the endpoint is
// unusable and no scraper is returned), then every interval until Stop.
// model, when set, restricts series carrying a model label to that model.
func StartScraper(ctx context.Context, metricsURL string, interval time.Duration, model string, client *http.Client) (*Scraper, error) {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	s := &Scraper{url: metricsURL, client: client, interval: interval, model: model,
		acc: map[string]*FamilyTotal{}, timingSum: map[string]float64{}, timingN: map[string]int{}}
	snap, err := s.fetch(ctx)
	if err != nil {
		return nil, err
	}
	s.prev, s.first, s.last, s.scrapes = snap, snap.At, snap.At, 1
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopLoop, s.loopDone = cancel, make(chan struct{})
	go s.loop(loopCtx)
	return s, nil
}

func (s *Scraper) loop(ctx context.Context) {
	defer close(s.loopDone)
	if s.interval <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.scrapeOnce(ctx)
		}
	}
}

// scrapeOnce fetches and folds one snapshot in; failures are remembered
// (reported at Stop) rather than fatal, since the final delta survives a
// missed intermediate scrape.
func (s *Scraper) scrapeOnce(ctx context.Context) {
	snap, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && len(s.failures) < 5 {
			s.failures = append(s.failures, err.Error())
		}
		return
	}
	for name, cur := range snap.Families {
		a := s.acc[name]
		if a == nil {
			a = &FamilyTotal{}
			s.acc[name] = a
		}
		addDelta(a, s.prev.Families[name], cur)
	}
	s.prev, s.last = snap, snap.At
	s.scrapes++
}

func (s *Scraper) fetch(ctx context.Context) (*Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", s.url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: HTTP %s", s.url, resp.Status)
	}
	snap, err := ParseSnapshot(io.LimitReader(resp.Body, 64<<20), expfmt.ResponseFormat(resp.Header), s.keep)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics from %s: %w", s.url, err)
	}
	snap.At = time.Now()
	return snap, nil
}

// keep filters series by model (when one was given and the series carries
// a model label) and TGI's prefill method label.
func (s *Scraper) keep(family string, m *dto.Metric) bool {
	for _, p := range Profiles {
		if family == p.Prefill && p.PrefillLabel[0] != "" && labelValue(m, p.PrefillLabel[0]) != p.PrefillLabel[1] {
			return false
		}
	}
	if s.model == "" {
		return true
	}
	for _, l := range []string{"model_name", "model"} {
		if v := labelValue(m, l); v != "" && v != s.model {
			return false
		}
	}
	return true
}

func labelValue(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// Start implements bench.Observer.
func (s *Scraper) Start(ctx context.Context, _ *workload.Request, _ *record.Record) context.Context {
	return ctx
}

// Done implements bench.Observer.
func (s *Scraper) Done(_ context.Context, rec *record.Record) {
	if rec.FirstToken.IsZero() && len(rec.ServerTimings) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !rec.FirstToken.IsZero() && !rec.Sent.IsZero() {
		s.clientSum += rec.FirstToken.Sub(rec.Sent).Seconds()
		s.clientN++
	}
	for k, v := range rec.ServerTimings {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s.timingSum[k] += v
			s.timingN[k]++
		}
	}
}

// Stop takes the final scrape, stops the periodic loop and returns the
// decomposition.
func (s *Scraper) Stop(ctx context.Context) Decomposition {
	s.stopLoop()
	<-s.loopDone
	s.scrapeOnce(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	d := decompose(s.acc, s.clientSum, s.clientN)
	d.URL, d.Scrapes, d.Failures, d.Window = s.url, s.scrapes, slices.Clone(s.failures), s.last.Sub(s.first)
	for k, n := range s.timingN {
		if d.ServerTimings == nil {
			d.ServerTimings = map[string]float64{}
		}
		d.ServerTimings[k] = s.timingSum[k] / float64(n)
		d.ServerTimingsN = max(d.ServerTimingsN, n)
	}
	return d
}

// Decomposition is how the mean TTFT of a run splits, from the server's
// histogram deltas and the client's own measurements. Durations are mean
// seconds; NaN means the engine does not expose that part.
type Decomposition struct {
	URL      string
	Engine   string // profile matched, "" when none
	Scrapes  int
	Failures []string
	Window   time.Duration

	ServerRequests  float64 // requests the server's TTFT (or queue) histogram saw
	ServerTTFT      float64
	ServerTTFTP50   float64
	ServerTTFTP95   float64
	Queue, Prefill  float64
	PrefillPerBatch bool

	ClientTTFT float64
	ClientN    int

	PrefixHits, PrefixQueries, Preemptions float64

	// ServerTimings are per-request timings engines returned in responses
	// (record.ServerTimings), mean per key in ms, over at most ServerTimingsN requests.
	ServerTimings  map[string]float64
	ServerTimingsN int
}

func decompose(acc map[string]*FamilyTotal, clientSum float64, clientN int) Decomposition {
	nan := math.NaN()
	d := Decomposition{ServerTTFT: nan, ServerTTFTP50: nan, ServerTTFTP95: nan, Queue: nan, Prefill: nan,
		ClientTTFT: nan, PrefixHits: nan, PrefixQueries: nan, Preemptions: nan, ClientN: clientN}
	if clientN > 0 {
		d.ClientTTFT = clientSum / float64(clientN)
	}
	for _, p := range Profiles {
		present := func(n string) *FamilyTotal {
			if n == "" {
				return nil
			}
			return acc[n]
		}
		ttft, queue, prefill := present(p.TTFT), present(p.Queue), present(p.Prefill)
		if ttft == nil && queue == nil && prefill == nil {
			continue
		}
		d.Engine = p.Engine
		mean := func(f *FamilyTotal) float64 {
			if f == nil || f.Count <= 0 {
				return nan
			}
			return f.Sum / f.Count
		}
		d.ServerTTFT, d.Queue, d.Prefill = mean(ttft), mean(queue), mean(prefill)
		d.PrefillPerBatch = p.PrefillPerBatch
		switch {
		case ttft != nil:
			d.ServerRequests = ttft.Count
			d.ServerTTFTP50 = BucketQuantile(0.5, ttft.Buckets)
			d.ServerTTFTP95 = BucketQuantile(0.95, ttft.Buckets)
		case queue != nil:
			d.ServerRequests = queue.Count
		}
		counter := func(names []string) float64 {
			for _, n := range names {
				if f := acc[n]; f != nil {
					return f.Sum
				}
			}
			return nan
		}
		d.PrefixHits, d.PrefixQueries, d.Preemptions = counter(p.PrefixHits), counter(p.PrefixQueries), counter(p.Preemptions)
		break
	}
	return d
}

// BucketQuantile estimates the q-quantile from cumulative bucket counts by
// linear interpolation inside the bucket, as PromQL's histogram_quantile
// does (the +Inf bucket yields the highest finite bound). NaN when empty.
func BucketQuantile(q float64, buckets map[float64]float64) float64 {
	if len(buckets) == 0 {
		return math.NaN()
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := buckets[les[len(les)-1]]
	if !math.IsInf(les[len(les)-1], 1) || total <= 0 {
		return math.NaN()
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, le := range les {
		c := buckets[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if c == prevCount {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevCount)/(c-prevCount)
		}
		prevLE, prevCount = le, c
	}
	return prevLE
}

// Lines renders the decomposition for the run's summary, one finding a line.
func (d Decomposition) Lines() []string {
	var out []string
	ms := func(s float64) string { return fmt.Sprintf("%.1f ms", s*1e3) }
	if d.Engine == "" {
		out = append(out, fmt.Sprintf("server metrics (%s): no known TTFT metrics (vLLM, SGLang, TGI names) changed during the run", d.URL))
	} else {
		out = append(out, fmt.Sprintf("server metrics (%s, %s names, %d scrapes over %s): %.0f requests seen by the server, %d by the client",
			d.URL, d.Engine, d.Scrapes, d.Window.Round(time.Millisecond), d.ServerRequests, d.ClientN))
		parts := []string{}
		rest := d.ClientTTFT
		if !math.IsNaN(d.Queue) {
			parts = append(parts, "queue "+ms(d.Queue))
			rest -= d.Queue
		}
		if !math.IsNaN(d.Prefill) {
			label := "prefill "
			if d.PrefillPerBatch {
				label = "prefill (per batch) "
			}
			parts = append(parts, label+ms(d.Prefill))
			rest -= d.Prefill
		}
		if !math.IsNaN(d.ServerTTFT) {
			other := d.ServerTTFT
			if !math.IsNaN(d.Queue) {
				other -= d.Queue
			}
			if !math.IsNaN(d.Prefill) {
				other -= d.Prefill
			}
			if !math.IsNaN(d.Queue) || !math.IsNaN(d.Prefill) {
				parts = append(parts, "other server "+ms(other))
			}
			rest = d.ClientTTFT - d.ServerTTFT
		}
		if !math.IsNaN(d.ClientTTFT) {
			parts = append(parts, "network+client "+ms(rest))
			out = append(out, fmt.Sprintf("mean TTFT %s (client) = %s", ms(d.ClientTTFT), strings.Join(parts, " + ")))
		} else if len(parts) > 0 {
			out = append(out, "mean server-side parts: "+strings.Join(parts, " + "))
		}
		if !math.IsNaN(d.ServerTTFT) {
			out = append(out, fmt.Sprintf("server TTFT mean %s, p50 ≈ %s, p95 ≈ %s (from histogram buckets)",
				ms(d.ServerTTFT), ms(d.ServerTTFTP50), ms(d.ServerTTFTP95)))
		}
		var cache []string
		if !math.IsNaN(d.PrefixHits) && !math.IsNaN(d.PrefixQueries) && d.PrefixQueries > 0 {
			cache = append(cache, fmt.Sprintf("prefix cache %.0f/%.0f tokens hit (%.1f%%)", d.PrefixHits, d.PrefixQueries, 100*d.PrefixHits/d.PrefixQueries))
		}
		if !math.IsNaN(d.Preemptions) {
			cache = append(cache, fmt.Sprintf("preemptions %.0f", d.Preemptions))
		}
		if len(cache) > 0 {
			out = append(out, strings.Join(cache, "; "))
		}
	}
	if len(d.ServerTimings) > 0 {
		keys := make([]string, 0, len(d.ServerTimings))
		for k := range d.ServerTimings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.1f", k, d.ServerTimings[k])
		}
		out = append(out, fmt.Sprintf("per-request server timings (mean ms over ≤%d responses): %s", d.ServerTimingsN, strings.Join(parts, ", ")))
	}
	for _, f := range d.Failures {
		out = append(out, "warning: "+f)
	}
	return out
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/wire"
)

// healthLoop runs active health checks (and vLLM metric scrapes) for every
// backend each interval, starting immediately so that a backend dead at
// start is marked down before most traffic reaches it.
func (g *Gateway) healthLoop() {
	defer g.wg.Done()
	fails := map[string]int{}
	for {
		st := g.st.Load()
		hc := st.cfg.Health
		if !hc.Disabled {
			g.checkAll(st, fails)
		}
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(hc.Interval.Std()):
		}
	}
}

func (g *Gateway) checkAll(st *state, fails map[string]int) {
	hc := st.cfg.Health
	type result struct {
		name string
		err  error
	}
	var wg sync.WaitGroup
	res := make(chan result, len(st.ups))
	for name, u := range st.ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(g.ctx, hc.Timeout.Std())
			defer cancel()
			body, err := g.probe(ctx, u, hc.Path)
			if len(u.cfg.Models) == 0 {
				// A backend configured without a model list serves whatever
				// it says it serves: learn that for /v1/models.
				if err == nil && hc.Path == modelsPath {
					u.learnModels(body)
				} else if err == nil && u.models.Load() == nil {
					if b, merr := g.probe(ctx, u, modelsPath); merr == nil {
						u.learnModels(b)
					}
				}
			}
			if err == nil && u.cfg.MetricsURL != "" {
				if es, serr := g.scrape(ctx, u.cfg.MetricsURL); serr == nil {
					u.sb.SetEngineStats(es)
				} else {
					g.log.Warn("scraping backend metrics", "backend", name, "error", serr.Error())
				}
			}
			res <- result{name, err}
		}()
	}
	wg.Wait()
	close(res)
	for r := range res {
		u := st.ups[r.name]
		if r.err == nil {
			if !u.sb.Healthy() {
				g.log.Info("backend up", "backend", r.name)
				// Back up, most likely restarted: connections pooled
				// before are to the old process.
				g.dropIdle(u)
			}
			fails[r.name] = 0
			u.sb.SetHealthy(true)
			continue
		}
		fails[r.name]++
		if fails[r.name] >= hc.Failures && u.sb.Healthy() {
			g.log.Warn("backend down", "backend", r.name, "error", r.err.Error())
			u.sb.SetHealthy(false)
			g.dropIdle(u)
		}
	}
}

// dropIdle closes the gateway's idle pooled connections to u (plain-http
// backends; http.Transport notices closed idle connections by itself).
func (g *Gateway) dropIdle(u *upstream) {
	if g.h1 == nil {
		return
	}
	if pu, err := url.Parse(u.cfg.URL); err == nil && pu.Scheme == "http" {
		g.h1.DropIdle(pu.Host)
	}
}

const modelsPath = "/v1/models"

// probe GETs path on the backend; it fails on transport errors and 5xx and
// returns up to 1 MiB of the body of a 2xx answer.
func (g *Gateway) probe(ctx context.Context, u *upstream, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.cfg.URL+path, nil)
	if err != nil {
		return nil, err
	}
	g.setBackendAuth(req.Header, u)
	if u.cfg.API == wire.Anthropic.Provider() && path == modelsPath {
		req.Header.Set("Anthropic-Version", wire.AnthropicVersion)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 500 {
		return nil, fmt.Errorf("health check %s: status %d", path, resp.StatusCode)
	}
	if resp.StatusCode >= 300 {
		body = nil
	}
	return body, nil
}

// learnModels keeps the model ids of a /v1/models answer (OpenAI, vLLM,
// Ollama and Anthropic all answer {"data":[{"id":...}]}); an answer of
// another shape leaves what was learnt before.
func (u *upstream) learnModels(body []byte) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || list.Data == nil {
		return
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	u.models.Store(&ids)
}

// scrape reads a backend engine's Prometheus text endpoint
// (parseEngineStats says what it keeps).
func (g *Gateway) scrape(ctx context.Context, url string) (sched.EngineStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sched.EngineStats{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return sched.EngineStats{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sched.EngineStats{}, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return parseEngineStats(io.LimitReader(resp.Body, 8<<20))
}

// parseEngineMetrics reads the waiting-requests and KV-usage gauges (0
// when not published).
func parseEngineMetrics(r io.Reader) (waiting, kv float64, err error) {
	es, err := parseEngineStats(r)
	if err != nil {
		return 0, 0, err
	}
	return zeroNaN(es.Waiting), zeroNaN(es.KVUsage), nil
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// Prefix-cache counters by engine, the first family present wins (vLLM
// renamed gpu_prefix_cache_* to prefix_cache_* in v0.10; an exposition
// may name a counter with or without _total). Only the local cache's:
// vLLM's external_prefix_cache_* count a KV connector's.
var (
	prefixQueryNames = []string{"vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"}
	prefixHitNames   = []string{"vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"}
)

// parseEngineStats reads from a Prometheus text exposition, each summed
// over label sets (e.g. several models on one engine): waiting requests
// and KV usage (vLLM's num_requests_waiting, kv_cache_usage_perc or
// gpu_cache_usage_perc, matched by suffix), the KV capacity in tokens
// (vLLM's cache_config_info, whose labels num_gpu_blocks × block_size
// carry it; SGLang's max_total_num_tokens), vLLM's prefix-cache counters
// and SGLang's cache_hit_rate gauge. What is not published is NaN.
func parseEngineStats(r io.Reader) (sched.EngineStats, error) {
	es := sched.UnknownEngineStats()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return es, fmt.Errorf("parsing engine metrics: %w", err)
	}
	sum := func(f *dto.MetricFamily) float64 {
		t := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.Gauge != nil:
				t += m.Gauge.GetValue()
			case m.Counter != nil:
				t += m.Counter.GetValue()
			case m.Untyped != nil:
				t += m.Untyped.GetValue()
			}
		}
		return t
	}
	family := func(names []string) *dto.MetricFamily {
		for _, n := range names {
			for _, k := range []string{n + "_total", n} {
				if f := fams[k]; f != nil {
					return f
				}
			}
		}
		return nil
	}
	for name, f := range fams {
		switch {
		case strings.HasSuffix(name, "num_requests_waiting"):
			es.Waiting = sum(f)
		case strings.HasSuffix(name, "kv_cache_usage_perc"), strings.HasSuffix(name, "gpu_cache_usage_perc"):
			es.KVUsage = sum(f)
		}
	}
	if f := family(prefixQueryNames); f != nil {
		if h := family(prefixHitNames); h != nil {
			es.PrefixQueries, es.PrefixHits = sum(f), sum(h)
		}
	}
	if f := fams["vllm:cache_config_info"]; f != nil {
		es.CacheTokens = cacheConfigTokens(f)
	} else if f := fams["sglang:max_total_num_tokens"]; f != nil {
		es.CacheTokens = sum(f)
	}
	if f := fams["sglang:cache_hit_rate"]; f != nil && len(f.GetMetric()) > 0 {
		// One rate per label set: their mean (a sum of rates means nothing).
		es.HitRate = sum(f) / float64(len(f.GetMetric()))
	}
	return es, nil
}

// cacheConfigTokens is num_gpu_blocks × block_size summed over
// cache_config_info's series, NaN when no series carries both as numbers
// (vLLM writes "None" before the KV cache is profiled).
func cacheConfigTokens(f *dto.MetricFamily) float64 {
	t, ok := 0.0, false
	for _, m := range f.GetMetric() {
		var blocks, size float64
		var hasB, hasS bool
		for _, l := range m.GetLabel() {
			v, err := strconv.ParseFloat(l.GetValue(), 64)
			if err != nil || v <= 0 {
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

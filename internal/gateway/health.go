package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/enginemetrics"
	"github.com/ttft-dev/ttft/internal/wire"
)

// healthLoop runs active health checks (and engine metric scrapes) for every
// backend each interval, starting immediately so that a backend dead at
// start is marked down before most traffic reaches it.
func (g *Gateway) healthLoop() {
	defer g.wg.Done()
	fails := map[string]int{}
	first := true
	for {
		st := g.st.Load()
		hc := st.cfg.Health
		if !hc.Disabled {
			g.checkAll(st, fails)
		}
		if first {
			close(g.checked)
			first = false
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
				if es, serr := enginemetrics.Scrape(ctx, g.client, u.cfg.MetricsURL); serr == nil {
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
			u.sb.HealthCheckPassed(time.Now())
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

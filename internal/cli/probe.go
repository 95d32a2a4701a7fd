package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// probeTarget sends one short request before a run, as vLLM's benchmark
// does, so that a wrong --model, key, path or body field is reported once,
// with the server's own message, instead of failing every request of a
// stored run. Only answers that no retry can change stop the run: 4xx other
// than 408 and 429. A busy (429, 5xx) or slow server is left to the run,
// which records what happens.
func probeTarget(ctx context.Context, client *http.Client, api wire.API, base string, reqOpt wire.RequestOptions, runID string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: "Hi"}}, Prompt: "Hi", PromptTokens: 1, MaxTokens: 1}
	hr, err := wire.NewRequest(ctx, api, base, req, &reqOpt)
	if err != nil {
		return usageErr("building the check request: %v", err)
	}
	hr.Header.Set("X-Request-Id", runID+"-probe")
	resp, err := client.Do(hr)
	if err != nil {
		return nil // unreachable targets were refused already; the run records the rest
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if s := resp.StatusCode; s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests {
		return usageErr("the target refused a one-token check request (%s %s, model %q): HTTP %d: %s; nothing was run (--no-probe skips this check)",
			hr.Method, hr.URL.Redacted(), reqOpt.Model, s, strings.Join(strings.Fields(string(body)), " "))
	}
	return nil
}

// probeTimeout bounds the check request: the run's first-token limit, at
// most a minute, as a cold engine may load a model first.
func probeTimeout(ttft time.Duration) time.Duration {
	if ttft <= 0 || ttft > time.Minute {
		return time.Minute
	}
	return ttft
}

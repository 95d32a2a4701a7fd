package cli

// Bench's observability flags: a live Prometheus endpoint with the client
// side of the run (--metrics-addr), OpenTelemetry spans per request when the
// standard OTEL_EXPORTER_OTLP_* variables are set, and the server-side TTFT
// decomposition scraped from the target's own /metrics (--scrape-metrics).

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/telemetry"
)

// scrapeFromTarget is --scrape-metrics given without a value.
const scrapeFromTarget = "target"

type observeOptions struct {
	metricsAddr    string
	metricsLinger  time.Duration
	scrapeURL      string
	scrapeInterval time.Duration
	scrapeModel    string
	traceSLO       time.Duration
}

func addObserveFlags(fs *pflag.FlagSet, o *observeOptions) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", "",
		"serve the run's live client-side metrics (ttft_bench_*) for Prometheus at HOST:PORT/metrics, e.g. 127.0.0.1:9464 (classic histograms; TTFT_NATIVE_HISTOGRAMS=1 adds native ones)")
	fs.DurationVar(&o.metricsLinger, "metrics-linger", 0,
		"keep the --metrics-addr endpoint up this long after the run so the final values get scraped")
	fs.StringVar(&o.scrapeURL, "scrape-metrics", "",
		"scrape the engine's Prometheus metrics (vLLM, SGLang, TGI names) during the run and report how TTFT splits into queue, prefill and network+client; alone, the target's /metrics; or --scrape-metrics=URL")
	fs.Lookup("scrape-metrics").NoOptDefVal = scrapeFromTarget
	fs.DurationVar(&o.scrapeInterval, "scrape-interval", 5*time.Second,
		"how often --scrape-metrics scrapes during the run (survives engine restarts; 0 = only before and after)")
	fs.StringVar(&o.scrapeModel, "scrape-model", "",
		"count only the engine's series for this model (its model_name label); default all models")
	fs.DurationVar(&o.traceSLO, "trace-slo-ttft", 0,
		"mark request spans whose TTFT exceeds this with ttft.slo.violated=true (tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set)")
}

// start builds the observers for a run against target; stop is called after
// the run with the run's context still alive, and may add to the summary's
// warnings or print a report to env.Stdout.
func (o *observeOptions) start(ctx context.Context, env *Env, target string) (obs []bench.Observer, stop func(ctx context.Context) []string, err error) {
	var stops []func(context.Context) []string
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i](context.WithoutCancel(ctx))
		}
	}
	if o.scrapeInterval < 0 || o.metricsLinger < 0 || o.traceSLO < 0 {
		return nil, nil, usageErr("--scrape-interval, --metrics-linger and --trace-slo-ttft must not be negative")
	}

	// Tracing first: a bad OTEL_* variable is a usage error before anything listens.
	tcfg, err := telemetry.TracingConfigFromEnv(env.getenv, "ttft-bench")
	if err != nil {
		return nil, nil, usageErr("tracing: %v", err)
	}
	if tcfg.Enabled {
		tp, shutdown, err := telemetry.SetupTracing(ctx, env.getenv, "ttft-bench")
		if err != nil {
			return nil, nil, usageErr("tracing: %v", err)
		}
		obs = append(obs, telemetry.NewTraceObserver(tp, "", "", target, o.traceSLO))
		stops = append(stops, func(ctx context.Context) []string {
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				return []string{"warning: " + err.Error()}
			}
			return nil
		})
		fmt.Fprintf(env.Stderr, "tracing: exporting spans to %s as service %q\n", tcfg.Endpoint, tcfg.ServiceName)
	}
	// GenAI metrics over OTLP (gen_ai.client.*), on the same variables.
	if gm, flush, ep, err := telemetry.StartClientMetrics(ctx, env.getenv, "ttft-bench", target); err != nil {
		cleanup()
		return nil, nil, usageErr("metrics: %v", err)
	} else if gm != nil {
		obs = append(obs, gm)
		stops = append(stops, func(ctx context.Context) []string {
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if err := flush(sctx); err != nil {
				return []string{"warning: " + err.Error()}
			}
			return nil
		})
		fmt.Fprintf(env.Stderr, "metrics: exporting gen_ai.client.* metrics to %s\n", ep)
	}

	if o.metricsAddr != "" {
		m := telemetry.NewBenchMetrics(prometheus.Labels{"target": target})
		srv, err := telemetry.ServeMetrics(o.metricsAddr, m.Registry())
		if err != nil {
			cleanup()
			return nil, nil, usageErr("--metrics-addr: %v", err)
		}
		obs = append(obs, m)
		linger := o.metricsLinger
		stops = append(stops, func(ctx context.Context) []string {
			if linger > 0 {
				select {
				case <-time.After(linger):
				case <-ctx.Done():
				}
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return []string{"warning: " + err.Error()}
			}
			return nil
		})
		fmt.Fprintf(env.Stderr, "metrics: serving live client-side metrics at http://%s/metrics\n", srv.Addr())
	}

	if o.scrapeURL != "" {
		u := o.scrapeURL
		if u == scrapeFromTarget {
			if u, err = telemetry.MetricsURLFor(target); err != nil {
				cleanup()
				return nil, nil, usageErr("--scrape-metrics: %v", err)
			}
		}
		sc, err := telemetry.StartScraper(ctx, u, o.scrapeInterval, o.scrapeModel, &http.Client{Timeout: 10 * time.Second})
		if err != nil {
			cleanup()
			return nil, nil, usageErr("--scrape-metrics: %v (pass the engine's metrics URL explicitly, e.g. --scrape-metrics=http://HOST:PORT/metrics)", err)
		}
		obs = append(obs, sc)
		stops = append(stops, func(ctx context.Context) []string {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			return sc.Stop(sctx).Lines()
		})
	}

	stop = func(ctx context.Context) []string {
		var lines []string
		// Scrape last-registered first: the decomposition wants the engine's
		// final counters before anything lingers.
		for i := len(stops) - 1; i >= 0; i-- {
			lines = append(lines, stops[i](ctx)...)
		}
		return lines
	}
	return obs, stop, nil
}

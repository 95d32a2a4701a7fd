// Package nativehist decides whether ttft's Prometheus histograms (bench's
// ttft_bench_*, the gateway's ttft_gateway_*, the simulator's vllm:*) are
// also exposed as native (sparse) histograms. They are not by default:
// a Prometheus server scraping with native histograms on
// (--enable-feature=native-histograms) stores only the native form of a
// histogram that has one, dropping its _bucket/_count/_sum series, unless
// the scrape config keeps them (scrape_classic_histograms, Prometheus
// 2.45–2.x; always_scrape_classic_histograms, 3.x; no such option in 2.42).
// The shipped rules and dashboards read the classic series, as real vLLM
// exports only those, so classic-only exposition keeps them working on any
// server. TTFT_NATIVE_HISTOGRAMS=1 opts in (docs/observability.md).
//
// It depends on nothing but the Prometheus client library, so the gateway
// and the simulator can use it without pulling in package telemetry.
package nativehist

import (
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Env is the environment variable that opts ttft's exporters into native
// histograms: any value strconv.ParseBool reads as true (1, true, …).
const Env = "TTFT_NATIVE_HISTOGRAMS"

// Settings of the native histograms when enabled: a 1.1 growth factor (≈5%
// relative error on any quantile) capped at 160 buckets, reset at most
// hourly when the cap is hit.
const (
	BucketFactor     = 1.1
	MaxBucketNumber  = 160
	MinResetDuration = time.Hour
)

// Enabled reports whether $TTFT_NATIVE_HISTOGRAMS opts in. It is read each
// time, when a histogram is built.
func Enabled() bool {
	on, err := strconv.ParseBool(os.Getenv(Env))
	return err == nil && on
}

// Opts returns o with the native histogram settings added when Enabled;
// otherwise o unchanged (classic buckets only).
func Opts(o prometheus.HistogramOpts) prometheus.HistogramOpts { return With(o, Enabled()) }

// With returns o with the native histogram settings added when native is
// true; otherwise o unchanged.
func With(o prometheus.HistogramOpts, native bool) prometheus.HistogramOpts {
	if native {
		o.NativeHistogramBucketFactor = BucketFactor
		o.NativeHistogramMaxBucketNumber = MaxBucketNumber
		o.NativeHistogramMinResetDuration = MinResetDuration
	}
	return o
}

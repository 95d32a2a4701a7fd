// Package integration tests ttft's observability against the real
// components users run: a Prometheus server (Debian package) scraping the
// simulator, the gateway and a live bench run, and Jaeger v2 receiving
// OTLP traces from bench and the gateway. The tests start every process
// themselves on loopback ports in temp dirs; locally they skip with a clear
// message when a binary is absent, and under CI (TTFT_REQUIRE_INTEGRATION=1)
// they fail instead. Binaries: prometheus (or $TTFT_PROMETHEUS) from
// .ci/install-prometheus.sh, jaeger (or $TTFT_JAEGER) from .ci/install-jaeger.sh.
package integration

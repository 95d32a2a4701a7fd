// Package enginetest runs ttft against a real inference engine: Ollama
// (llama.cpp on CPU) serving a tiny random-weight model that gguf synthesizes,
// so no weights are downloaded. It holds the harness (start `ollama serve` on
// a loopback port in temp dirs, create a model) and the integration tests:
// bench against the OpenAI-compatible API reconciled with Ollama's native
// timings and token counts, the gateway routing between two engines, and
// prompt caching visible in TTFT.
//
// The tests skip with a clear message when the ollama binary is absent
// (install: go install github.com/ollama/ollama@v0.6.5, or .ci/install-ollama.sh),
// and fail instead under CI (TTFT_REQUIRE_INTEGRATION=1 or CI=true).
package enginetest

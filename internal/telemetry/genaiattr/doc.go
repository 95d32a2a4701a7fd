// Package genaiattr holds the span attribute keys and event names that
// ttft's traces use: the OpenTelemetry GenAI semantic conventions plus
// ttft's own namespaced keys. It is a leaf, so the gateway and the
// telemetry package share one spelling without the gateway importing the
// workload and tokenizer code telemetry depends on.
package genaiattr

// Package epp serves ttft's scheduler (package sched) as an Endpoint
// Picker (EPP) for Envoy-based gateways: an Envoy ext_proc v3 gRPC server
// speaking the Gateway API Inference Extension's Endpoint Picker protocol
// (docs/proposals/004-endpoint-picker-protocol, protocol v1.0.0).
//
// One ext_proc stream is one HTTP request. With request and response
// bodies in FULL_DUPLEX_STREAMED mode Envoy sends, in this order, the
// request headers, the request body in chunks (the last with
// end_of_stream, or followed by trailers), then the response headers and
// the response body in chunks. The picker holds its answer to the request
// headers until the body is complete, because the body says which model
// and prompt the request is for; it then parses the OpenAI or Anthropic
// JSON body (model, prompt text for the prefix index, max_tokens), takes
// the SLO from the same headers the ttft gateway reads (x-ttft-slo-ms,
// x-slo-class), runs sched.Scheduler.Pick, and answers with the request
// headers' response — the chosen ip:port in header
// x-gateway-destination-endpoint and in dynamic metadata envoy.lb — then
// streams the body back unchanged (a full-duplex processor owns the body
// it was sent). The time from the body's end to that header mutation
// being sent is the picker's decision overhead, observed per request.
//
// The response side feeds the predictors as the gateway's proxy does: the
// response headers carry the status and (metadata envoy.lb,
// x-gateway-destination-endpoint-served) the endpoint that really served
// the request; the first token event in the response chunks is the
// ticket's FirstToken, the end of the stream its End. Every chunk is
// echoed before it is scanned, so the bookkeeping is not in the client's
// time to first token.
//
// Endpoints come from a static list (SetEndpoints) and are scraped for
// the engine gauges the reference picker reads (vLLM's
// num_requests_waiting, num_requests_running and kv_cache_usage_perc, or
// their SGLang and TensorRT-LLM equivalents). An endpoint whose metrics
// cannot be read, or that is draining (SetDraining), is not picked.
//
// The gRPC health service answers for "liveness", "readiness" and the
// ext_proc service name, as the protocol asks: ready once the endpoints
// have been scraped once.
package epp

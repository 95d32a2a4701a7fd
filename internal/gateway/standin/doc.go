// Package standin is a stand-in LLM backend for evaluating routing: an
// OpenAI-compatible streaming HTTP server (chat completions, /v1/models,
// /health, vLLM-named /metrics) with a latency model of its own, written
// independently of the simulator (internal/sim) so that the gateway's
// scheduler is never judged only against the model it was tuned on.
//
// The model is deliberately simple and explicit: a block-LRU prefix cache
// over the prompt's characters (block size and capacity set per server),
// N slots served first-in first-out, a fixed overhead plus a prefill cost
// per uncached kilo-character, a decode cost per output token, a speed
// factor, and an optional drift (all costs multiplied from a given time
// on). A request holds its slot from prefill to its last token, so long
// answers and queues both show in time to first token. Two options break
// the slots' independence and the fleet's nearness: prefills that share
// one processor (n prefilling at once each run at 1/n speed, as prefills
// batched into one GPU's steps do) and a network round trip in front of
// the server (a replica in another zone). Two more make it fail as
// engines do: an outage (requests in flight cut, connections refused,
// then back as a restarted engine with an empty cache and counters from
// zero; or a replica that comes up late) and a share of requests refused
// with 503.
//
// Each request that gets its first token is recorded (Server.Served): its
// X-Request-Id, its wait for a slot and its TTFT as the server paid it, so
// that an evaluation can judge routing by what the backends experienced,
// apart from the cost of whatever proxy stood in front.
package standin

// Package sim is a vLLM-like serving-engine simulator. One engine model —
// continuous batching under a token budget, chunked prefill, a paged KV
// cache with hashed-block prefix caching and LRU eviction, preemption by
// recompute, and a roofline step-time model with calibrated overheads — runs
// on two clocks: a virtual clock (discrete events, as fast as the CPU allows)
// for offline runs (Run, RunFleet) and capacity planning (Plan), and the
// wall clock behind the live OpenAI-compatible server of package
// internal/sim/serve, which emits each token at its simulated time.
//
// The package has no HTTP in it (it does not import net/http): Engine is
// driven step by step by whoever owns it, on one goroutine. A driver
// resolves a Config into a Deployment, makes sequences (NewSeq, Engine.NewSeq),
// adds them when they reach the engine (Engine.Add), calls Engine.Step and
// delivers the step's Emits at its End. What the live server needs beyond
// that is small: the output words every driver streams (OutputWord,
// OutputText), a tokenizer's IDs for them (OutputTokens), re-basing a chat
// prompt's output blocks for the prefix cache (Seq.ChainOutput), and the
// model-name match of the catalog (SameModelName). The scheduler, the KV
// cache and its invariants stay private.
//
// Catalogs of models, accelerators and engine profiles are embedded YAML
// (catalog/*.yaml) and can be extended by user YAML or a HuggingFace
// config.json.
package sim

// Package sim is a vLLM-like serving-engine simulator. One engine model —
// continuous batching under a token budget, chunked prefill, a paged KV
// cache with hashed-block prefix caching and LRU eviction, preemption by
// recompute, and a roofline step-time model with calibrated overheads — runs
// on two clocks: a virtual clock (discrete events, as fast as the CPU allows)
// for offline runs and capacity planning, and the wall clock behind a live
// OpenAI-compatible HTTP server that emits each token at its simulated time.
//
// Catalogs of models, accelerators and engine profiles are embedded YAML
// (catalog/*.yaml) and can be extended by user YAML or a HuggingFace
// config.json.
package sim

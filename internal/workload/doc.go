// Package workload generates what a run sends: exact-length prompts under an
// embedded tokenizer, scenarios with SLOs, multi-turn sessions, shared-prefix
// groups, dataset and trace replay, and arrival processes. It knows nothing of
// HTTP; the bench runner and the simulator both consume its Source.
package workload

// Package record defines the one per-request record and the run summary
// that every source (live bench, offline simulator, gateway) produces and
// every sink (JSONL files, store, report, metrics) consumes, so measured and
// simulated runs compare field by field.
package record

// Package store keeps runs — manifest, summary and per-request records — in
// an embedded SQLite database by default or in PostgreSQL for teams, behind
// one interface. Schema changes are versioned migrations; every write is one
// transaction, so a failed import or save leaves what was stored untouched.
// The JSONL/JSON run directory (requests.jsonl, summary.json, manifest.json)
// stays the portable format: Import and Export move runs between the two.
package store

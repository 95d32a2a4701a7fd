// Package analysis is the library behind `ttft fit`, `ttft fit efficiency`,
// `ttft pareto` and `ttft rdd` (the source article's §2.4 latency model,
// §2.2 hardware efficiency, §4.4 cost/latency front and §4.1 threshold
// effect): it reads what the analyses need from run directories, stored
// runs and CSV files, picks a latency statistic out of a summary, prices
// runs, calls the maths in internal/stats, and shapes the results for JSON
// and the Pareto plot (drawn by internal/report).
//
// The CLI (internal/cli) turns flags into the request types here, makes one
// call, and prints the result; nothing here knows about flags, exit codes
// or terminals. Stored runs are read through the Store interface, so the
// package does not open databases itself.
package analysis

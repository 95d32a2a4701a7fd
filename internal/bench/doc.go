// Package bench is the load generator: it takes requests from a
// workload.Source, schedules them (closed loop by concurrency, or open loop by
// an arrival process with intended send times), sends them through the wire
// package over pooled keep-alive connections, and emits one record.Record per
// request to its sinks as soon as the request ends.
package bench

// Package stats turns samples into decisions: percentiles and summaries with
// bootstrap confidence intervals, sketches for data that does not fit in
// memory, comparison tests, curve fits, Pareto fronts and regression
// discontinuity. It does no I/O.
package stats

// Package sweep runs a benchmark (live or simulated) once per point of a
// parameter grid and reduces the points together: a table and a curve, the
// batch × context deviation from a linear prediction, saturation detection,
// and the bisection search for the highest load that still meets a
// scenario's SLOs. It knows nothing of HTTP or the CLI: one point is a
// callback returning the run's summary.
package sweep

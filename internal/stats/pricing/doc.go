// Package pricing holds the price list `ttft pareto` turns measured
// throughput into cost with: USD per GPU-hour for self-hosted
// configurations and USD per million input/output tokens for hosted APIs.
package pricing

// Package yamlerr turns gopkg.in/yaml.v3 decoding errors into the one-line
// "file:line: what" messages ttft gives for every bad input: yaml.v3
// reports several problems over several lines, with Go type names
// ("field x not found in type sim.Model") that mean nothing to a user.
package yamlerr

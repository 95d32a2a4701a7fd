package cli

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/ttft-dev/ttft/internal/workload"
)

// loadLabels describe the load a run offers, as labels of its manifest (and
// so of its stored run): every description of the run (runs list and show,
// compare, report) states it, analyses key on it, and "ttft runs list
// --label concurrency=8" finds it. Labels the user gives win.
func loadLabels(l *loadOptions, w *workloadOptions, src workload.Source, sc *workload.Scenario) map[string]string {
	m := map[string]string{}
	switch {
	case l.Rate > 0:
		m["loop"], m["rate"], m["arrival"] = "open", strconv.FormatFloat(l.Rate, 'g', -1, 64), l.Arrival
	case workload.OwnsSchedule(src) && sc != nil && sc.Arrival.RatePerS > 0:
		proc := sc.Arrival.Process
		if proc == "" {
			proc = "poisson"
		}
		m["loop"], m["rate"], m["arrival"] = "open", strconv.FormatFloat(sc.Arrival.RatePerS, 'g', -1, 64), proc
	case workload.OwnsSchedule(src):
		m["loop"], m["arrival"] = "open", "trace"
	default:
		m["loop"], m["concurrency"] = "closed", strconv.Itoa(l.Concurrency)
	}
	if m["loop"] == "open" && l.MaxConcurrency > 0 {
		m["max_concurrency"] = strconv.Itoa(l.MaxConcurrency)
	}
	switch {
	case w.Dataset != "":
		m["workload"] = "dataset " + filepath.Base(w.Dataset)
	case sc != nil:
		m["workload"] = "scenario " + sc.Name
	default:
		m["prompt_tokens"], m["max_tokens"] = strconv.Itoa(w.PromptTokens), strconv.Itoa(w.MaxTokens)
		shape := fmt.Sprintf("%d-token prompts, ≤%d output tokens", w.PromptTokens, w.MaxTokens)
		if w.IgnoreEOS {
			shape = fmt.Sprintf("%d-token prompts, %d output tokens", w.PromptTokens, w.MaxTokens)
		}
		switch {
		case w.Sessions > 0:
			shape = fmt.Sprintf("%d sessions × %d turns of %s", w.Sessions, w.Turns, shape)
		case w.PrefixGroups > 0:
			shape = fmt.Sprintf("%s after one of %d shared %d-token prefixes", shape, w.PrefixGroups, w.PrefixTokens)
		case w.SamePrompt:
			shape += ", one identical prompt"
		}
		m["workload"] = shape
	}
	return m
}

// withLoad merges the load labels under the user's.
func withLoad(load, user map[string]string) map[string]string {
	out := make(map[string]string, len(load)+len(user))
	for k, v := range load {
		out[k] = v
	}
	for k, v := range user {
		out[k] = v
	}
	return out
}

package report

import (
	"fmt"
	"strings"
)

// LoadText describes the load a run offered from its parameters (labels
// and flags, see Run.Labels): the loop and its concurrency or rate, then
// the workload. Empty when the run does not say (runs made before ttft
// recorded it, with default flags).
func LoadText(p map[string]string) string {
	var loop string
	switch {
	case p["loop"] == "open" || p["loop"] == "" && p["rate"] != "":
		switch {
		case p["rate"] != "":
			arr := p["arrival"]
			if arr == "" {
				arr = "poisson"
			}
			loop = fmt.Sprintf("open loop, %s req/s %s", p["rate"], arr)
		default:
			loop = "open loop on the trace's timestamps"
		}
		if c := p["max_concurrency"]; c != "" {
			loop += fmt.Sprintf(" (≤%s in flight)", c)
		}
	case p["concurrency"] != "":
		loop = "closed loop, concurrency " + p["concurrency"]
	}
	work := p["workload"]
	if work == "" && p["prompt_tokens"] != "" && p["max_tokens"] != "" {
		work = fmt.Sprintf("%s-token prompts, ≤%s output tokens", p["prompt_tokens"], p["max_tokens"])
	}
	var parts []string
	for _, s := range []string{loop, work} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ")
}

// workloadKey is what a run sends, apart from how much of it: runs that
// share it and their target differ in load alone.
func workloadKey(p map[string]string) string {
	if w := p["workload"]; w != "" {
		return w
	}
	return p["prompt_tokens"] + "/" + p["max_tokens"] + "/" + p["scenario"] + "/" + p["dataset"]
}

// loadNotes warn when compared runs offered different loads: their
// difference is then not the servers' alone.
func loadNotes(runs []Run) []string {
	if len(runs) < 2 {
		return nil
	}
	base := LoadText(runs[0].Labels)
	var notes []string
	for _, r := range runs[1:] {
		if l := LoadText(r.Labels); base != "" && l != "" && l != base {
			notes = append(notes, fmt.Sprintf("the loads differ: %s had %s, %s had %s; the difference is not the servers' alone", runs[0].Name, base, r.Name, l))
		}
	}
	return notes
}

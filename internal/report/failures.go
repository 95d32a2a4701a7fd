package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
)

// ErrorClass is one class of failed requests in a run: how many, and the
// first failed request's message.
type ErrorClass struct {
	Class string `json:"class"`
	Count int    `json:"count"`
	First string `json:"first_error,omitempty"`
}

// Failures is what failed in one run: every report and comparison shows
// it before the run's latencies, which describe completed requests only.
type Failures struct {
	Run string `json:"run"`
	// Index is the run's position in the report.
	Index     int          `json:"index"`
	Total     int          `json:"total"`
	Completed int          `json:"completed"`
	Failed    int          `json:"failed"`
	Classes   []ErrorClass `json:"classes,omitempty"`
}

// NoneCompleted reports a run that has requests but no completed one: it
// has no latency at all.
func (f Failures) NoneCompleted() bool { return f.Total > 0 && f.Completed == 0 }

// Share is the failed share as text: "87%", "0.4%".
func (f Failures) Share() string { return share(f.Failed, f.Total) }

func share(n, of int) string {
	if of == 0 {
		return "-"
	}
	p := 100 * float64(n) / float64(of)
	if p < 1 && n > 0 {
		return fmt.Sprintf("%.1f%%", p)
	}
	return fmt.Sprintf("%.0f%%", p)
}

// failuresOf reads a run's failures from its summary (counts by class and
// each class's first message), or from its records when the summary does
// not have them.
func failuresOf(i int, r Run) Failures {
	q := r.Summary.Requests
	f := Failures{Run: r.Name, Index: i, Total: q.Total, Completed: q.Completed, Failed: q.Failed}
	errs, first := q.Errors, q.FirstErrors
	if (f.Total == 0 || (f.Failed > 0 && len(errs) == 0)) && len(r.Records) > 0 {
		f = Failures{Run: r.Name, Index: i}
		errs, first = map[string]int{}, map[string]string{}
		for j := range r.Records {
			rec := &r.Records[j]
			if rec.Warmup {
				continue
			}
			f.Total++
			if rec.OK() {
				f.Completed++
				continue
			}
			f.Failed++
			errs[rec.ErrorClass]++
			if _, seen := first[rec.ErrorClass]; !seen && rec.Error != "" {
				first[rec.ErrorClass] = rec.Error
			}
		}
	}
	for c, n := range errs {
		f.Classes = append(f.Classes, ErrorClass{Class: c, Count: n, First: first[c]})
	}
	sort.Slice(f.Classes, func(a, b int) bool {
		if f.Classes[a].Count != f.Classes[b].Count {
			return f.Classes[a].Count > f.Classes[b].Count
		}
		return f.Classes[a].Class < f.Classes[b].Class
	})
	return f
}

// measured counts a run's measured (non-warm-up) records and the failed
// ones among them.
func measured(recs []record.Record) (total, failed int) {
	for i := range recs {
		if recs[i].Warmup {
			continue
		}
		total++
		if !recs[i].OK() {
			failed++
		}
	}
	return total, failed
}

// covPart is one run's share of a chart: inc of its total measured
// requests are in it, failed failed, the rest have no value.
type covPart struct {
	name               string
	inc, total, failed int
}

// coverageText words the parts of the runs a chart leaves requests of out:
// full, per run, for the caption ("13 of 100 requests; 87 failed and are
// not in this chart", prefixed with the run's name when the chart has
// several runs), and short, totalled over runs, for the drawing. gaps words
// it for a chart of inter-token gaps; noValue names what requests that
// neither failed nor show lack; where is "this chart" or "its points".
func coverageText(parts []covPart, multi, gaps bool, noValue, where string) (full, short string) {
	one := func(p covPart, name string) string {
		s := fmt.Sprintf("%d of %d requests", p.inc, p.total)
		if gaps {
			s = "gaps of " + s
		}
		if p.failed > 0 {
			s += fmt.Sprintf("; %d failed and are not in %s", p.failed, where)
		}
		if other := p.total - p.inc - p.failed; other > 0 {
			s += fmt.Sprintf("; %d more have no %s", other, noValue)
		}
		if name != "" {
			s = name + ": " + s
		}
		return s
	}
	var texts []string
	var sum covPart
	for _, p := range parts {
		name := ""
		if multi {
			name = p.name
		}
		texts = append(texts, one(p, name))
		sum.inc, sum.total, sum.failed = sum.inc+p.inc, sum.total+p.total, sum.failed+p.failed
	}
	full = strings.Join(texts, ". ")
	short = full
	if len(parts) > 1 {
		short = one(sum, "") + fmt.Sprintf(" (%d runs)", len(parts))
	}
	return full, short
}

// coverage is coverageText for a chart of per-request values:
// included[i] is how many of run i's measured requests the chart shows.
func coverage(runs []Run, included []int, gaps bool, noValue string) (full, short string) {
	withRecs := 0
	for _, r := range runs {
		if len(r.Records) > 0 {
			withRecs++
		}
	}
	var parts []covPart
	for i, r := range runs {
		if len(r.Records) == 0 {
			continue
		}
		total, failed := measured(r.Records)
		if included[i] >= total {
			continue
		}
		parts = append(parts, covPart{r.Name, included[i], total, failed})
	}
	return coverageText(parts, withRecs > 1, gaps, noValue, "this chart")
}

// summaryCoverage is coverage for charts drawn from summaries (one point
// per run): the runs whose statistics leave failed requests out.
func summaryCoverage(runs []Run) (full, short string) {
	var parts []covPart
	for _, r := range runs {
		q := r.Summary.Requests
		if q.Failed == 0 {
			continue
		}
		parts = append(parts, covPart{r.Name, q.Completed, q.Total, q.Failed})
	}
	return coverageText(parts, len(runs) > 1, false, "value", "its points")
}

package report

import (
	"fmt"
	"html/template"
	"io"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// Options tunes a report.
type Options struct {
	Title     string
	Generated time.Time // shown in the header; zero hides it
	Charts    ChartOptions
	Compare   CompareOptions
}

// Report is everything a report shows, computed once and then written as
// HTML, PNG or JSON.
type Report struct {
	Title      string
	Generated  time.Time
	Runs       []Run
	Comparison Comparison
	Charts     []Chart
}

// Build computes a report's tables and chart data.
func Build(runs []Run, opt Options) *Report {
	title := opt.Title
	if title == "" {
		title = "ttft report"
	}
	return &Report{
		Title: title, Generated: opt.Generated, Runs: runs,
		Comparison: Compare(runs, opt.Compare),
		Charts:     Charts(runs, opt.Charts),
	}
}

type sloRow struct {
	Run string
	record.SLOVerdict
	// NoData: the run has no value of the SLO's metric (no completed
	// request); the verdict's zero value and margin are not figures.
	NoData bool
}

// NoCI: the verdict carries no interval (a zero one around a value that
// is not zero).
func (s sloRow) NoCI() bool { return s.CI95 == [2]float64{} && s.ValueMs != 0 }

// metricCount is how many values a summary has of an SLO metric.
func metricCount(s *record.Summary, metric string) int {
	switch metric {
	case "ttft":
		return s.JudgedTTFT().Count
	case "itl":
		return s.ITL.Count
	case "tpot":
		return s.TPOT.Count
	case "e2e":
		return s.E2E.Count
	}
	return -1 // unknown metric: take the verdict as it is
}

type htmlChart struct {
	Chart
	SVG template.HTML
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"num": num, "pct": pct, "pval": pval, "stat": statName, "test": testName, "rate": rate,
	"ci":     ciText,
	"signed": signed,
	"date":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="ttft report">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { padding: 0.3em 0.7em; border-bottom: 1px solid #e5e5e5; text-align: right; }
th:first-child, td:first-child, td.l, th.l { text-align: left; }
td:not(.l) { white-space: nowrap; }
th { background: #f5f5f5; }
.pass { color: #067d3a; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.verdict { margin: 0.3em 0; } .note { color: #666; font-size: 0.9em; }
section.errors { border-left: 4px solid #b00020; background: #fdf3f4; padding: 0.2em 1em 0.6em; margin: 1em 0; }
section.errors h3 { margin: 0.5em 0; } section.errors code { white-space: pre-wrap; word-break: break-word; font-size: 0.95em; }
figcaption .excluded { color: #b00020; }
figure { margin: 1.5em 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if not .Generated.IsZero}}<p class="note">Generated {{date .Generated}} by ttft. Self-contained: charts are inline SVG; nothing is fetched.</p>{{end}}
{{with .Failures}}
<h2 id="failures">Failed requests</h2>
<p class="note">Latency statistics and charts describe completed requests only; these are the ones that are not in them.</p>
{{range .}}<section class="errors" id="errors-{{.Index}}">
<h3 class="fail">{{.Run}}: {{.Failed}} of {{.Total}} requests failed ({{.Share}}){{if .NoneCompleted}}: no request completed{{end}}</h3>
{{if .NoneCompleted}}<p>No request of {{.Run}} completed, so it has no latency: its statistics are shown as “-”, and it is in no latency chart.</p>
{{end}}{{with .Classes}}<table class="errors">
<tr><th>error class</th><th>requests</th><th class="l">first error message</th></tr>
{{range .}}<tr><td>{{.Class}}</td><td>{{.Count}}</td><td class="l">{{if .First}}<code>{{.First}}</code>{{else}}-{{end}}</td></tr>
{{end}}</table>{{end}}
</section>
{{end}}{{end}}

<h2>Summary</h2>
<table id="summary">
<tr><th>run</th><th>source</th><th>target / model</th><th>load</th><th>requests</th><th>failed</th><th>mean TTFT ms</th><th>std ms</th><th>P50 ms</th><th>P95 ms</th><th>P99 ms</th><th>ITL ms</th><th>req/s</th><th>out tok/s</th></tr>
{{range .Comparison.Rows}}<tr><td>{{.Name}}</td><td class="l">{{.Source}}</td><td class="l">{{.Target}}</td><td class="l">{{if .Load}}{{.Load}}{{else}}-{{end}}</td><td>{{.Requests}}</td><td{{if .Failed}} class="fail"{{end}}>{{.FailedCell}}</td><td>{{num .MeanTTFT}}</td><td>{{num .StdTTFT}}</td><td>{{num .P50TTFT}}</td><td>{{num .P95TTFT}}</td><td>{{num .P99TTFT}}</td><td>{{num .MeanITL}}</td><td>{{rate .RequestsPS}}</td><td>{{rate .OutTokensPS}}</td></tr>
{{end}}</table>
{{if .Failures}}<p class="note">Latencies (TTFT, ITL) are of completed requests; “-”: no completed request.</p>{{end}}

{{with .Comparison.Diffs}}
<h2>Differences</h2>
<p class="note">Each run against the first. A statistic (mean, P95, P99): B − A with its bootstrap 95% confidence interval and bootstrap p-value (significant when the interval excludes 0). A distribution: a two-sided Mann–Whitney U test of the whole distributions, once per metric. Each verdict follows from its own row.</p>
<table id="diffs">
<tr><th>run</th><th>compared</th><th>A ms</th><th>B ms</th><th>B − A ms</th><th>95% CI ms</th><th>change</th><th>p</th><th>test</th></tr>
{{range .}}{{if .Error}}<tr><td>{{.Run}}</td><td>{{.Metric}} {{stat .Comparison.Stat}}</td><td colspan="6" class="l">{{.Error}}</td><td>{{test .Comparison.Method}}</td></tr>
{{else}}<tr><td>{{.Run}}</td><td>{{.Metric}} {{stat .Comparison.Stat}}</td><td>{{num .Comparison.A}}</td><td>{{num .Comparison.B}}</td><td>{{signed .Comparison.Diff}}</td><td>{{ci .Comparison.CI95}}</td><td>{{pct .Comparison.RelDiff}}</td><td>{{pval .Comparison.PValue}}</td><td>{{test .Comparison.Method}}</td></tr>
{{end}}{{end}}</table>
{{range .}}<p class="verdict">{{.Verdict}}</p>
{{end}}{{end}}
{{range .Comparison.Notes}}<p class="note">{{.}}</p>
{{end}}

{{with .SLO}}
<h2>SLO verdicts</h2>
<table id="slo">
<tr><th>run</th><th>objective</th><th>limit ms</th><th>value ms</th><th>95% CI ms</th><th>margin ms</th><th>verdict</th></tr>
{{range .}}<tr><td>{{.Run}}</td><td class="l">{{.Name}}</td><td>{{num .LimitMs}}</td>{{if .NoData}}<td colspan="3" class="l">no completed request</td>{{else}}<td>{{num .ValueMs}}</td><td>{{if .NoCI}}-{{else}}{{num (index .CI95 0)}} – {{num (index .CI95 1)}}{{end}}</td><td>{{num .MarginMs}}</td>{{end}}<td>{{if .Pass}}<span class="pass">pass</span>{{else}}<span class="fail">FAIL</span>{{end}}</td></tr>
{{end}}</table>
{{end}}

{{with .Warnings}}<h2>Warnings</h2>
{{range .}}<p class="note">{{.}}</p>
{{end}}{{end}}

<h2>Charts</h2>
{{range .NoLatency}}<p class="note fail">{{.}}</p>
{{end}}{{range .Charts}}<figure id="fig-{{.ID}}">
{{.SVG}}
<figcaption>{{.Title}}{{if .Note}} — {{.Note}}{{end}}{{if .Coverage}}<br><span class="excluded">{{.Coverage}}</span>{{end}}</figcaption>
</figure>
{{else}}<p class="note">{{.NoChart}}</p>
{{end}}
</body>
</html>
`))

// WriteHTML writes the report as one self-contained HTML page.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		*Report
		Failures  []Failures
		SLO       []sloRow
		Warnings  []string
		Charts    []htmlChart
		NoLatency []string
		NoChart   string
	}{Report: r, Failures: r.Comparison.Failures}
	withRecords := false
	for i := range r.Runs {
		run := &r.Runs[i]
		for _, v := range run.Summary.SLO {
			data.SLO = append(data.SLO, sloRow{Run: run.Name, SLOVerdict: v, NoData: metricCount(&run.Summary, v.Metric) == 0})
		}
		if len(run.Records) > 0 {
			withRecords = true
			if f := failuresOf(i, *run); f.NoneCompleted() {
				data.NoLatency = append(data.NoLatency, fmt.Sprintf("%s: no request completed (%d of %d failed), so it is in no latency chart.", run.Name, f.Failed, f.Total))
			}
		}
		for _, wn := range run.Summary.Warnings {
			data.Warnings = append(data.Warnings, run.Name+": "+wn)
		}
	}
	data.NoChart = "No chart: the runs have no per-request records."
	if withRecords {
		data.NoChart = "No chart: no request completed."
	}
	for i := range r.Charts {
		// SVG escapes every string it embeds, so it is safe as HTML.
		data.Charts = append(data.Charts, htmlChart{Chart: r.Charts[i], SVG: template.HTML(SVG(&r.Charts[i]))})
	}
	if err := page.Execute(w, data); err != nil {
		return fmt.Errorf("rendering the HTML report: %w", err)
	}
	return nil
}

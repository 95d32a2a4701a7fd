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
}

type htmlChart struct {
	Chart
	SVG template.HTML
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"num": num, "pct": pct, "pval": pval, "stat": statName,
	"ci":     func(c [2]float64) string { return fmt.Sprintf("%+.1f … %+.1f", c[0], c[1]) },
	"signed": func(v float64) string { return fmt.Sprintf("%+.1f", v) },
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
th:first-child, td:first-child, td.l { text-align: left; }
th { background: #f5f5f5; }
.pass { color: #067d3a; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.verdict { margin: 0.3em 0; } .note { color: #666; font-size: 0.9em; }
figure { margin: 1.5em 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{if not .Generated.IsZero}}<p class="note">Generated {{date .Generated}} by ttft. Self-contained: charts are inline SVG; nothing is fetched.</p>{{end}}

<h2>Summary</h2>
<table id="summary">
<tr><th>run</th><th>source</th><th>target / model</th><th>requests</th><th>failed</th><th>mean TTFT ms</th><th>std ms</th><th>P50 ms</th><th>P95 ms</th><th>P99 ms</th><th>ITL ms</th><th>req/s</th><th>out tok/s</th></tr>
{{range .Comparison.Rows}}<tr><td>{{.Name}}</td><td class="l">{{.Source}}</td><td class="l">{{.Target}}</td><td>{{.Requests}}</td><td>{{.Failed}}</td><td>{{num .MeanTTFT}}</td><td>{{num .StdTTFT}}</td><td>{{num .P50TTFT}}</td><td>{{num .P95TTFT}}</td><td>{{num .P99TTFT}}</td><td>{{num .MeanITL}}</td><td>{{num .RequestsPS}}</td><td>{{num .OutTokensPS}}</td></tr>
{{end}}</table>

{{with .Comparison.Diffs}}
<h2>Differences</h2>
<p class="note">Each run against the first: B − A with a bootstrap 95% confidence interval and a Mann–Whitney U test (two-sided).</p>
<table id="diffs">
<tr><th>run</th><th>metric</th><th>A ms</th><th>B ms</th><th>B − A ms</th><th>95% CI ms</th><th>change</th><th>p</th></tr>
{{range .}}{{if .Error}}<tr><td>{{.Run}}</td><td>{{.Metric}} {{stat .Comparison.Stat}}</td><td colspan="6" class="l">{{.Error}}</td></tr>
{{else}}<tr><td>{{.Run}}</td><td>{{.Metric}} {{stat .Comparison.Stat}}</td><td>{{num .Comparison.A}}</td><td>{{num .Comparison.B}}</td><td>{{signed .Comparison.Diff}}</td><td>{{ci .Comparison.CI95}}</td><td>{{pct .Comparison.RelDiff}}</td><td>{{pval .Comparison.PValue}}</td></tr>
{{end}}{{end}}</table>
{{range .}}<p class="verdict">{{.Verdict}}</p>
{{end}}{{end}}
{{range .Comparison.Notes}}<p class="note">{{.}}</p>
{{end}}

{{with .SLO}}
<h2>SLO verdicts</h2>
<table id="slo">
<tr><th>run</th><th>objective</th><th>limit ms</th><th>value ms</th><th>95% CI ms</th><th>margin ms</th><th>verdict</th></tr>
{{range .}}<tr><td>{{.Run}}</td><td class="l">{{.Name}}</td><td>{{num .LimitMs}}</td><td>{{num .ValueMs}}</td><td>{{num (index .CI95 0)}} – {{num (index .CI95 1)}}</td><td>{{num .MarginMs}}</td><td>{{if .Pass}}<span class="pass">pass</span>{{else}}<span class="fail">FAIL</span>{{end}}</td></tr>
{{end}}</table>
{{end}}

{{with .Warnings}}<h2>Warnings</h2>
{{range .}}<p class="note">{{.}}</p>
{{end}}{{end}}

<h2>Charts</h2>
{{range .Charts}}<figure id="fig-{{.ID}}">
{{.SVG}}
<figcaption>{{.Title}}{{if .Note}} — {{.Note}}{{end}}</figcaption>
</figure>
{{else}}<p class="note">No chart: the runs have no per-request records.</p>
{{end}}
</body>
</html>
`))

// WriteHTML writes the report as one self-contained HTML page.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		*Report
		SLO      []sloRow
		Warnings []string
		Charts   []htmlChart
	}{Report: r}
	for _, run := range r.Runs {
		for _, v := range run.Summary.SLO {
			data.SLO = append(data.SLO, sloRow{Run: run.Name, SLOVerdict: v})
		}
		for _, wn := range run.Summary.Warnings {
			data.Warnings = append(data.Warnings, run.Name+": "+wn)
		}
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

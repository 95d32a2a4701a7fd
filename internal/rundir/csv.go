package rundir

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// The CSV files of a run, for spreadsheets and tools that read no JSON.
const (
	RequestsCSV = "requests.csv"
	SummaryCSV  = "summary.csv"
)

// requestColumns are requests.csv's columns: a record's scalar fields, its
// inter-token gaps reduced to mean and max, and the best output count.
var requestColumns = []string{"index", "id", "warmup", "scenario", "session", "turn", "status", "error_class", "error",
	"intended", "sent", "first_token", "end", "ttft_ms", "ttft_intended_ms", "ttfb_ms", "ttfc_ms", "e2e_ms", "tpot_ms",
	"itl_mean_ms", "itl_max_ms", "schedule_lag_ms", "prompt_tokens", "prompt_tokens_usage", "cached_prompt_tokens",
	"output_tokens", "output_tokens_usage", "output_events", "finish_reason"}

// WriteCSV writes requests.csv (one row per request) and summary.csv (one
// row per latency metric) into dir. Times are RFC 3339 with nanoseconds,
// latencies milliseconds; an absent value is an empty cell.
func WriteCSV(dir string, sum *record.Summary, recs []record.Record) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	rows := [][]string{requestColumns}
	for i := range recs {
		rows = append(rows, requestRow(&recs[i]))
	}
	if err := writeCSV(filepath.Join(dir, RequestsCSV), rows); err != nil {
		return err
	}
	rows = [][]string{{"metric", "count", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99_9", "max"}}
	for _, m := range []struct {
		name string
		m    record.Metric
	}{
		{"ttft_ms", sum.TTFT}, {"ttft_intended_ms", sum.TTFTIntended}, {"ttfb_ms", sum.TTFB}, {"ttfc_ms", sum.TTFC},
		{"itl_ms", sum.ITL}, {"tpot_ms", sum.TPOT}, {"e2e_ms", sum.E2E}, {"schedule_lag_ms", sum.ScheduleLag},
	} {
		if m.m.Count == 0 {
			rows = append(rows, []string{m.name, "0", "", "", "", "", "", "", "", "", ""})
			continue
		}
		rows = append(rows, []string{m.name, strconv.Itoa(m.m.Count), num(m.m.Mean), num(m.m.Std), num(m.m.Min),
			num(m.m.P50), num(m.m.P90), num(m.m.P95), num(m.m.P99), num(m.m.P999), num(m.m.Max)})
	}
	return writeCSV(filepath.Join(dir, SummaryCSV), rows)
}

func requestRow(r *record.Record) []string {
	var itlSum, itlMax float64
	for _, g := range r.ITLMs {
		itlSum += g
		itlMax = max(itlMax, g)
	}
	itlMean, itlMaxCell := "", ""
	if len(r.ITLMs) > 0 {
		itlMean, itlMaxCell = num(itlSum/float64(len(r.ITLMs))), num(itlMax)
	}
	return []string{strconv.Itoa(r.Index), r.ID, strconv.FormatBool(r.Warmup), r.Scenario, r.Session, intCell(r.Turn),
		intCell(r.Status), r.ErrorClass, r.Error,
		timeCell(r.Intended), timeCell(r.Sent), timeCell(r.FirstToken), timeCell(r.End),
		msCell(r.TTFTMs), msCell(r.TTFTIntendedMs), msCell(r.TTFBMs), msCell(r.TTFCMs), msCell(r.E2EMs), msCell(r.TPOTMs),
		itlMean, itlMaxCell, msCell(r.ScheduleLagMs), intCell(r.PromptTokens), intCell(r.PromptTokensUsage), intCell(r.CachedPromptTokens),
		intCell(r.OutputTokens()), intCell(r.OutputTokensUsage), intCell(r.OutputEvents), r.FinishReason}
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.WriteAll(rows) // the error is w.Error, below
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func msCell(v float64) string {
	if v == 0 {
		return ""
	}
	return num(v)
}

func intCell(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

package analysis

import (
	"fmt"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
)

// Statistic names the latency an analysis reads from each run's summary:
// a metric (ttft, ttfb, ttfc, itl, tpot, e2e) and a statistic of its
// distribution (mean, p50/median, p90, p95, p99, p99_9/p999, max).
type Statistic struct {
	Metric string
	Stat   string
}

// Check reports an unknown statistic, then an unknown metric, as an
// *OptionError naming "stat" or "metric".
func (q Statistic) Check() error {
	if _, err := MetricStat(record.Metric{}, q.Stat); err != nil {
		return optionErr("stat", err)
	}
	if _, err := SummaryMetric(&record.Summary{}, q.Metric); err != nil {
		return optionErr("metric", err)
	}
	return nil
}

// Of reads the statistic from a summary, with the number of measurements
// behind it (zero: the run has none of that metric).
func (q Statistic) Of(s *record.Summary) (value float64, count int, err error) {
	m, err := SummaryMetric(s, q.Metric)
	if err != nil {
		return 0, 0, err
	}
	v, err := MetricStat(m, q.Stat)
	if err != nil {
		return 0, 0, err
	}
	return v, m.Count, nil
}

// SummaryMetric picks a latency distribution out of a summary.
func SummaryMetric(s *record.Summary, metric string) (record.Metric, error) {
	switch strings.ToLower(metric) {
	case "ttft":
		return s.TTFT, nil
	case "ttfb":
		return s.TTFB, nil
	case "ttfc":
		return s.TTFC, nil
	case "itl":
		return s.ITL, nil
	case "tpot":
		return s.TPOT, nil
	case "e2e":
		return s.E2E, nil
	}
	return record.Metric{}, fmt.Errorf("unknown metric %q (want ttft, ttfb, ttfc, itl, tpot or e2e)", metric)
}

// MetricStat picks one statistic out of a distribution.
func MetricStat(m record.Metric, stat string) (float64, error) {
	switch strings.ToLower(stat) {
	case "mean":
		return m.Mean, nil
	case "p50", "median":
		return m.P50, nil
	case "p90":
		return m.P90, nil
	case "p95":
		return m.P95, nil
	case "p99":
		return m.P99, nil
	case "p99_9", "p999":
		return m.P999, nil
	case "max":
		return m.Max, nil
	}
	return 0, fmt.Errorf("unknown statistic %q (want mean, p50, p90, p95, p99, p99_9 or max)", stat)
}

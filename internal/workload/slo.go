package workload

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/stats"
)

// Evaluate judges a run against the scenario's SLOs and computes its goodput.
//
// Each verdict compares the summary's statistic (e.g. TTFT P95 over the
// completed requests) with the limit; TTFT is judged from the intended send
// time (record.Summary.JudgedTTFT), which in an open loop counts the
// client's own lateness against the server, as a user would feel it; CI is the statistic's bootstrap 95%
// interval from the summary, and the margin is limit - value (negative
// fails). A run with no completed requests fails every SLO, with value 0.
//
// Goodput counts the measured (non-warm-up) requests that met every SLO
// individually: TTFT, TPOT and end-to-end compare the request's own value
// with each limit; ITL compares the request's own gap at the SLO's statistic
// (its P95 gap for an ITL P95 objective). Failed requests never meet it, so
// attainment = good / all measured requests, and goodput = good / the
// measured window in seconds.
func (s *Scenario) Evaluate(sum record.Summary, recs []record.Record) ([]record.SLOVerdict, record.Goodput) {
	verdicts := make([]record.SLOVerdict, 0, len(s.SLOs))
	for _, slo := range s.SLOs {
		m := metricOf(sum, slo.Metric)
		v := record.SLOVerdict{
			Name: slo.Name(), Metric: slo.Metric, Statistic: slo.Statistic,
			LimitMs: float64(slo.LimitMs),
		}
		if slo.Metric == "ttft" {
			v.Basis = sum.TTFTBasis
		}
		if m.Count == 0 {
			// No data: fail, with zero value and margin (JSON has no NaN).
			verdicts = append(verdicts, v)
			continue
		}
		v.ValueMs = statOf(m, slo.Statistic)
		if ci, ok := m.CI95[slo.Statistic]; ok {
			v.CI95 = ci
		} else {
			v.CI95 = [2]float64{v.ValueMs, v.ValueMs}
		}
		v.MarginMs = v.LimitMs - v.ValueMs
		v.Pass = v.ValueMs <= v.LimitMs
		verdicts = append(verdicts, v)
	}

	return verdicts, Goodput(s.SLOs, sum, recs)
}

// Goodput is the rate of measured requests that met every one of slos on
// their own (see Scenario.Evaluate), as vLLM's --goodput counts it.
func Goodput(slos []SLO, sum record.Summary, recs []record.Record) record.Goodput {
	var total, good int
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			continue
		}
		total++
		if r.OK() && meets(slos, r) {
			good++
		}
	}
	var g record.Goodput
	if total > 0 {
		g.Attainment = float64(good) / float64(total)
	}
	if sum.DurationS > 0 {
		g.RequestsPerS = float64(good) / sum.DurationS
	}
	return g
}

// ParseGoodput reads vLLM's --goodput objectives, "ttft:120", "tpot:50",
// "e2el:1000" (milliseconds; e2e is taken for e2el), into per-request SLOs.
func ParseGoodput(specs []string) ([]SLO, error) {
	var out []SLO
	for _, spec := range specs {
		k, v, ok := strings.Cut(strings.TrimSpace(spec), ":")
		ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || !(ms > 0) || math.IsInf(ms, 0) {
			return nil, fmt.Errorf("goodput objective %q: want NAME:MILLISECONDS with NAME ttft, tpot or e2el (e.g. ttft:120)", spec)
		}
		metric := strings.ToLower(strings.TrimSpace(k))
		switch metric {
		case "ttft", "tpot":
		case "e2el", "e2e":
			metric = "e2e"
		default:
			return nil, fmt.Errorf("goodput objective %q: %q is not ttft, tpot or e2el", spec, k)
		}
		// Per request, a limit has no statistic (that is for verdicts).
		out = append(out, SLO{Metric: metric, LimitMs: Millis(ms)})
	}
	return out, nil
}

// Passed reports whether every verdict passed.
func Passed(vs []record.SLOVerdict) bool {
	for _, v := range vs {
		if !v.Pass {
			return false
		}
	}
	return true
}

// meets reports whether one completed request met every SLO on its own.
func meets(slos []SLO, r *record.Record) bool {
	for _, slo := range slos {
		lim := float64(slo.LimitMs)
		var v float64
		switch slo.Metric {
		case "ttft":
			v = r.JudgedTTFTMs()
		case "e2e":
			v = r.E2EMs
		case "tpot":
			v = r.TPOTMs
		case "itl":
			if len(r.ITLMs) == 0 {
				continue
			}
			xs := slices.Clone(r.ITLMs)
			slices.Sort(xs)
			if q := sloStats[slo.Statistic]; q < 0 {
				var sum float64
				for _, x := range xs {
					sum += x
				}
				v = sum / float64(len(xs))
			} else {
				v = stats.Quantile(xs, q)
			}
		}
		if v > lim {
			return false
		}
	}
	return true
}

func metricOf(sum record.Summary, metric string) record.Metric {
	switch metric {
	case "ttft":
		return sum.JudgedTTFT()
	case "itl":
		return sum.ITL
	case "tpot":
		return sum.TPOT
	default:
		return sum.E2E
	}
}

func statOf(m record.Metric, stat string) float64 {
	switch stat {
	case "mean":
		return m.Mean
	case "p50":
		return m.P50
	case "p90":
		return m.P90
	case "p95":
		return m.P95
	case "p99":
		return m.P99
	default:
		return m.P999
	}
}

package serve

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader is the per-request fault-injection header. Its value is a
// comma- or semicolon-separated list of key=value items:
//
//	error=503            answer with this HTTP status instead of serving
//	error-rate=0.2       ... with this probability (status from error=, else 500)
//	slow-start=1.5s      hold the whole response (headers included) this long
//	stall-first=2s       hold the first token (and everything after it) this long
//	stall-mid=500ms@10   pause this long after the 10th token (default: half way)
//	cut-after=20         close the connection abruptly after 20 tokens
//	mid-rate=0.1         the mid-stream faults (stall-mid, cut-after) hit this share of requests (default all)
//
// Server-wide defaults come from FaultConfig (the --fault-* flags); a header
// item overrides its server-wide counterpart.
const FaultHeader = "X-Sim-Fault"

// FaultConfig injects failures.
type FaultConfig struct {
	ErrorRate     float64       `yaml:"error_rate,omitempty" json:"error_rate,omitempty"`
	ErrorStatus   int           `yaml:"error_status,omitempty" json:"error_status,omitempty"`
	SlowStart     time.Duration `yaml:"slow_start,omitempty" json:"slow_start,omitempty"`
	StallFirst    time.Duration `yaml:"stall_first,omitempty" json:"stall_first,omitempty"`
	StallMid      time.Duration `yaml:"stall_mid,omitempty" json:"stall_mid,omitempty"`
	StallMidAfter int           `yaml:"stall_mid_after,omitempty" json:"stall_mid_after,omitempty"` // 0: half way
	CutAfter      int           `yaml:"cut_after,omitempty" json:"cut_after,omitempty"`             // 0: never
	// MidRate is the share of requests that StallMid and CutAfter hit
	// (0: all), for a fleet whose streams fail now and then.
	MidRate float64 `yaml:"mid_rate,omitempty" json:"mid_rate,omitempty"`
}

// ParseFaults applies a header value on top of base.
func ParseFaults(base FaultConfig, header string) (FaultConfig, error) {
	f := base
	if strings.TrimSpace(header) == "" {
		return f, nil
	}
	explicitStatus := false
	for _, item := range strings.FieldsFunc(header, func(r rune) bool { return r == ',' || r == ';' }) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return f, fmt.Errorf("%s: item %q is not key=value", FaultHeader, item)
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		var err error
		switch k {
		case "error":
			f.ErrorStatus, err = strconv.Atoi(v)
			if err == nil && (f.ErrorStatus < 400 || f.ErrorStatus > 599) {
				err = fmt.Errorf("status must be 400..599")
			}
			explicitStatus = true
		case "error-rate":
			f.ErrorRate, err = strconv.ParseFloat(v, 64)
			if err == nil && (f.ErrorRate < 0 || f.ErrorRate > 1) {
				err = fmt.Errorf("rate must be in [0, 1]")
			}
		case "slow-start":
			f.SlowStart, err = parseDur(v)
		case "stall-first":
			f.StallFirst, err = parseDur(v)
		case "stall-mid":
			d, at, hasAt := strings.Cut(v, "@")
			f.StallMid, err = parseDur(d)
			if err == nil && hasAt {
				f.StallMidAfter, err = strconv.Atoi(at)
				if err == nil && f.StallMidAfter < 1 {
					err = fmt.Errorf("token index must be ≥ 1")
				}
			}
		case "mid-rate":
			f.MidRate, err = strconv.ParseFloat(v, 64)
			if err == nil && (f.MidRate < 0 || f.MidRate > 1) {
				err = fmt.Errorf("rate must be in [0, 1]")
			}
		case "cut-after":
			f.CutAfter, err = strconv.Atoi(v)
			if err == nil && f.CutAfter < 1 {
				err = fmt.Errorf("must be ≥ 1")
			}
		default:
			return f, fmt.Errorf("%s: unknown item %q (known: error, error-rate, slow-start, stall-first, stall-mid, cut-after, mid-rate)", FaultHeader, k)
		}
		if err != nil {
			return f, fmt.Errorf("%s: %s=%q: %v", FaultHeader, k, v, err)
		}
	}
	if explicitStatus && !strings.Contains(strings.ToLower(header), "error-rate") {
		f.ErrorRate = 1
	}
	return f, nil
}

func parseDur(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return d, nil
}

package epp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ttft-dev/ttft/internal/gateway/llmreq"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
)

// Headers the picker reads, as the ttft gateway does (lower case: Envoy
// sends HTTP/2-style lower-case header names).
const (
	headerSLOMs    = "x-ttft-slo-ms"
	headerSLOClass = "x-slo-class"
)

// parseBody reads an OpenAI (chat or completions) or Anthropic (messages)
// request body with the gateway's own reader (llmreq), so that the
// picker's prefix index and the gateway's agree on what a shared prefix
// is. An empty body (a GET, say) is a request for no particular model.
func parseBody(body []byte) (llmreq.Request, error) {
	if len(body) == 0 {
		return llmreq.Request{}, nil
	}
	r, err := llmreq.Parse(body)
	if err != nil {
		return r, fmt.Errorf("request body is not an OpenAI or Anthropic JSON request: %w", err)
	}
	return r, nil
}

// header returns the value of header key (lower case) in hm: Envoy puts it
// in raw_value, older data planes in value.
func header(hm *corev3.HeaderMap, key string) string {
	for _, h := range hm.GetHeaders() {
		if strings.EqualFold(h.GetKey(), key) {
			if rv := h.GetRawValue(); len(rv) > 0 {
				return string(rv)
			}
			return h.GetValue()
		}
	}
	return ""
}

// resolveSLO picks the request's TTFT target as the gateway does:
// x-ttft-slo-ms, then x-slo-class, then the picker's default class.
func resolveSLO(hm *corev3.HeaderMap, defaultClass string) (time.Duration, string, error) {
	if v := header(hm, headerSLOMs); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		// Written so that NaN fails it, as does a value that rounds to no
		// time at all.
		if err != nil || !(ms > 0 && ms <= 3_600_000) || time.Duration(ms*float64(time.Millisecond)) <= 0 {
			return 0, "", fmt.Errorf("header %s: %q is not a positive number of milliseconds", headerSLOMs, v)
		}
		class := "custom"
		if c := header(hm, headerSLOClass); c != "" {
			if _, ok := sched.ClassSLO(c); ok {
				class = strings.ToLower(c)
			}
		}
		return time.Duration(ms * float64(time.Millisecond)), class, nil
	}
	c := header(hm, headerSLOClass)
	if c == "" {
		c = defaultClass
	}
	if c == "" {
		return 0, "none", nil
	}
	c, err := sched.ParseClass(c)
	if err != nil {
		return 0, "", fmt.Errorf("header %s: %w", headerSLOClass, err)
	}
	d, _ := sched.ClassSLO(c)
	return d, c, nil
}

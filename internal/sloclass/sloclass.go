package sloclass

import (
	"fmt"
	"strings"
	"time"
)

// Class is one product's latency targets, as P95s.
type Class struct {
	// Name is the class's name (x-slo-class, slo_class, the scenario name).
	Name string
	// Product says what the class is for, in a few words.
	Product string
	// TTFT is the P95 time-to-first-token target.
	TTFT time.Duration
	// E2E is the P95 whole-answer target.
	E2E time.Duration
}

// Class names.
const (
	Code    = "code"
	Chat    = "chat"
	Summary = "summary"
)

var classes = [...]Class{
	{Name: Code, Product: "code completion", TTFT: 120 * time.Millisecond, E2E: 300 * time.Millisecond},
	{Name: Chat, Product: "customer-service Q&A", TTFT: 320 * time.Millisecond, E2E: 800 * time.Millisecond},
	{Name: Summary, Product: "real-time summarisation", TTFT: 650 * time.Millisecond, E2E: 1200 * time.Millisecond},
}

// All returns every class, tightest TTFT first.
func All() []Class { return classes[:] }

// Names lists the class names, tightest TTFT first.
func Names() []string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.Name
	}
	return names
}

// Lookup returns the class with that name, ignoring case.
func Lookup(name string) (Class, bool) {
	for _, c := range classes {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return Class{}, false
}

// Must returns the named class and panics when there is none (for the
// names above, in code).
func Must(name string) Class {
	c, ok := Lookup(name)
	if !ok {
		panic("sloclass: unknown class " + name)
	}
	return c
}

// Parse validates a class name and returns it in canonical (lower) case.
func Parse(name string) (string, error) {
	c, ok := Lookup(name)
	if !ok {
		return "", fmt.Errorf("unknown SLO class %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	return c.Name, nil
}

// Targets lists the classes' TTFT targets for help texts, in the order of
// Names: "120/320/650 ms".
func Targets() string {
	ms := make([]string, len(classes))
	for i, c := range classes {
		ms[i] = fmt.Sprint(c.TTFT.Milliseconds())
	}
	return strings.Join(ms, "/") + " ms"
}

// Describe summarises the classes for help texts: "code|chat|summary
// (120/320/650 ms P95 TTFT)".
func Describe() string {
	return fmt.Sprintf("%s (%s P95 TTFT)", strings.Join(Names(), "|"), Targets())
}

// TTFTBuckets are the classic histogram bounds, in seconds, of every TTFT
// histogram ttft exports (bench's client-side ones, the gateway's): dense
// where TTFT SLOs live (100 ms – 2 s), with each class's TTFT target as a
// bound, so that attainment reads off a histogram exactly. Prometheus
// servers without native-histogram scraping see only these. A new slice
// each call.
func TTFTBuckets() []float64 {
	return []float64{.005, .01, .02, .04, .06, .08, .1, .12, .15, .2, .25, .3, .32, .4, .5, .65, .75, 1, 1.5, 2, 2.5, 5, 7.5, 10, 20, 40, 80}
}

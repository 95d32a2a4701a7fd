package sched

import (
	"time"

	"github.com/ttft-dev/ttft/internal/sloclass"
)

// ClassSLO returns the P95 TTFT target of a named SLO class (case
// ignored). The classes and their targets (code 120 ms, chat 320 ms,
// summary 650 ms) are defined once, in package sloclass.
func ClassSLO(class string) (time.Duration, bool) {
	c, ok := sloclass.Lookup(class)
	return c.TTFT, ok
}

// Classes lists the known SLO class names, for help texts and validation.
func Classes() []string { return sloclass.Names() }

// ParseClass validates a class name and returns it in lower case.
func ParseClass(class string) (string, error) { return sloclass.Parse(class) }

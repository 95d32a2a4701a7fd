package sched

import (
	"fmt"
	"strings"
	"time"
)

// ClassSLO returns the P95 TTFT target of a named SLO class. The three classes
// and their targets (code 120 ms, chat 320 ms, summary 650 ms) are ttft's
// defaults for interactive code completion, chat, and long-document summaries.
func ClassSLO(class string) (time.Duration, bool) {
	switch strings.ToLower(class) {
	case "code":
		return 120 * time.Millisecond, true
	case "chat":
		return 320 * time.Millisecond, true
	case "summary":
		return 650 * time.Millisecond, true
	}
	return 0, false
}

// Classes lists the known SLO class names, for help texts and validation.
func Classes() []string { return []string{"code", "chat", "summary"} }

// ParseClass validates a class name.
func ParseClass(class string) (string, error) {
	if _, ok := ClassSLO(class); !ok {
		return "", fmt.Errorf("unknown SLO class %q (want one of %s)", class, strings.Join(Classes(), ", "))
	}
	return strings.ToLower(class), nil
}

package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseAge parses a retention age: a Go duration ("36h", "90m") or a whole
// number of days or weeks ("7d", "2w"). "0", "never" and "" mean keep
// forever (zero).
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch s {
	case "", "0", "never", "forever":
		return 0, nil
	}
	unit := time.Duration(0)
	switch {
	case strings.HasSuffix(s, "d"):
		unit = 24 * time.Hour
	case strings.HasSuffix(s, "w"):
		unit = 7 * 24 * time.Hour
	}
	if unit != 0 {
		n, err := strconv.Atoi(s[:len(s)-1])
		if err != nil || n < 0 || n > 100*365 {
			return 0, fmt.Errorf("invalid age %q: want e.g. 7d, 2w, 36h or 0 for never", s)
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid age %q: want e.g. 7d, 2w, 36h or 0 for never", s)
	}
	return d, nil
}

package yamlerr

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a YAML problem located in a file.
type Error struct {
	File string
	Line int // 0 when unknown
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

var (
	lineRe    = regexp.MustCompile(`(?s)^line (\d+): (.*)$`)
	unknownRe = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	typeRe    = regexp.MustCompile("(?s)^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// Clean rewrites err (from yaml.Unmarshal or a Decoder) for file name: the
// first problem only, with its line, in words. Other errors pass through
// unchanged.
func Clean(name string, err error) error {
	if err == nil {
		return nil
	}
	msg := ""
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		// The first problem only: fixing it shows the next.
		msg = te.Errors[0]
	} else {
		// Syntax errors are plain errors, possibly wrapped; a custom
		// UnmarshalYAML may report "line N: ..." itself.
		for e := err; e != nil && msg == ""; e = errors.Unwrap(e) {
			if m, ok := strings.CutPrefix(e.Error(), "yaml: "); ok {
				msg = m
			} else if lineRe.MatchString(e.Error()) {
				msg = e.Error()
			}
		}
		if msg == "" {
			return err
		}
	}
	e := &Error{File: name, Msg: msg}
	if m := lineRe.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	if m := unknownRe.FindStringSubmatch(e.Msg); m != nil {
		e.Msg = fmt.Sprintf("unknown field %q", m[1])
	} else if m := typeRe.FindStringSubmatch(e.Msg); m != nil {
		e.Msg = fmt.Sprintf("%q is not %s", m[2], kind(m[3]))
	}
	// Whatever is left is said on one line.
	e.Msg = strings.Join(strings.Fields(e.Msg), " ")
	return e
}

// kind names a Go destination type for a user.
func kind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "a whole number"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["):
		return "a mapping"
	}
	return "the expected kind of value (a mapping of fields)"
}

package yamlerr

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type model struct {
	Name   string  `yaml:"name"`
	Layers int     `yaml:"layers"`
	Scale  float64 `yaml:"scale"`
	On     bool    `yaml:"on"`
	Tags   []string
}

func decode(in string) error {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(in)))
	dec.KnownFields(true)
	var m model
	return dec.Decode(&m)
}

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"name: a\nparams_x: 3\n", `m.yaml:2: unknown field "params_x"`},
		{"name: a\nlayers: many\n", `m.yaml:2: "many" is not a whole number`},
		{"scale: big\n", `m.yaml:1: "big" is not a number`},
		{"on: maybe\n", `m.yaml:1: "maybe" is not true or false`},
		{"name: a\n  bad: [\n", "m.yaml:2: "},
		// Several problems: the first is reported, on one line.
		{"x: 1\ny: 2\n", `m.yaml:1: unknown field "x"`},
	} {
		err := Clean("m.yaml", decode(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: got %v, want prefix %q on one line", tc.in, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) || e.File != "m.yaml" {
			t.Errorf("%q: not an *Error naming the file: %#v", tc.in, err)
		}
	}
	other := errors.New("disk on fire")
	if Clean("m.yaml", other) != other || Clean("m.yaml", nil) != nil {
		t.Error("errors that are not yaml.v3's must pass through unchanged")
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"name: a\n", "x: 1\n", "layers: [1\n", "on: maybe\n", "- 1\n- 2\n", "a: &x 1\nb: *y\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		err := Clean("f.yaml", decode(in))
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error for %q: %q", in, err)
		}
	})
}

// Package deploy carries ttft's deployment assets, embedded so that tests
// (and any command that wants to serve them) read exactly the files users
// copy: Grafana dashboards (grafana/*.json) and the Prometheus example
// configuration, recording and alerting rules and their promtool unit tests
// (prometheus/*.yml). It also extracts every PromQL expression from them, so
// the integration tests can run each one against a real Prometheus.
package deploy

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed grafana/*.json prometheus/*.yml
var files embed.FS

// Files is the embedded tree (grafana/..., prometheus/...).
func Files() fs.FS { return files }

// Dashboards returns the Grafana dashboards by file name.
func Dashboards() (map[string][]byte, error) {
	names, err := fs.Glob(files, "grafana/*.json")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", n, err)
		}
		out[path.Base(n)] = b
	}
	return out, nil
}

// RuleFiles are the Prometheus rule files (not their unit tests, not the config).
var RuleFiles = []string{"prometheus/ttft-rules.yml"}

// Expr is one PromQL expression found in a dashboard or rule file.
type Expr struct {
	Source string // file it came from
	Where  string // panel title / rule name / variable name
	Kind   string // "panel", "variable", "record", "alert"
	Expr   string
}

// Dashboard is the subset of Grafana's dashboard JSON that ttft checks.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a Grafana panel.
type Panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Variable is a Grafana template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

// ParseDashboard decodes a dashboard, naming the file on error.
func ParseDashboard(name string, b []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("parsing dashboard %s: %w", name, err)
	}
	return &d, nil
}

var labelValuesRe = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// Expressions lists every PromQL expression in the dashboards and rule
// files, in a stable order. A variable's label_values(expr, label) query
// contributes its inner series selector.
func Expressions() ([]Expr, error) {
	var out []Expr
	dashes, err := Dashboards()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(dashes))
	for n := range dashes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d, err := ParseDashboard(n, dashes[n])
		if err != nil {
			return nil, err
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			if m := labelValuesRe.FindStringSubmatch(v.Definition); m != nil {
				out = append(out, Expr{Source: n, Where: "$" + v.Name, Kind: "variable", Expr: m[1]})
			}
		}
		var walk func([]Panel)
		walk = func(ps []Panel) {
			for _, p := range ps {
				for _, t := range p.Targets {
					out = append(out, Expr{Source: n, Where: p.Title + " / " + t.RefID, Kind: "panel", Expr: t.Expr})
				}
				walk(p.Panels)
			}
		}
		walk(d.Panels)
	}
	for _, rf := range RuleFiles {
		b, err := files.ReadFile(rf)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", rf, err)
		}
		var doc struct {
			Groups []struct {
				Name  string `yaml:"name"`
				Rules []struct {
					Record string `yaml:"record"`
					Alert  string `yaml:"alert"`
					Expr   string `yaml:"expr"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", rf, err)
		}
		for _, g := range doc.Groups {
			for _, r := range g.Rules {
				e := Expr{Source: path.Base(rf), Kind: "record", Where: r.Record, Expr: r.Expr}
				if r.Alert != "" {
					e.Kind, e.Where = "alert", r.Alert
				}
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// Substitute replaces Grafana's variables in a dashboard expression so it
// can be sent to Prometheus directly: $__rate_interval and $__interval by
// rateInterval, any other $name / ${name} by ".*" (every dashboard variable
// is used inside a regex matcher, =~).
func Substitute(expr, rateInterval string) string {
	r := strings.NewReplacer("$__rate_interval", rateInterval, "${__rate_interval}", rateInterval,
		"$__interval", rateInterval, "${__interval}", rateInterval)
	expr = r.Replace(expr)
	return varRe.ReplaceAllString(expr, ".*")
}

var varRe = regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`)

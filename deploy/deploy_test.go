package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/testutil"
)

func TestDashboardsShape(t *testing.T) {
	dashes, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ttft-gateway.json", "ttft-engines.json", "ttft-bench.json"} {
		if dashes[want] == nil {
			t.Errorf("dashboard %s missing", want)
		}
	}
	for name, b := range dashes {
		d, err := ParseDashboard(name, b)
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]Variable{}
		for _, v := range d.Templating.List {
			vars[v.Name] = v
		}
		if v, ok := vars["datasource"]; !ok || v.Type != "datasource" {
			t.Errorf("%s: no datasource template variable", name)
		}
		if _, ok := vars["model"]; !ok {
			t.Errorf("%s: no model template variable", name)
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: uid/title missing", name)
		}
		ids := map[int]bool{}
		for _, p := range d.Panels {
			if ids[p.ID] {
				t.Errorf("%s: duplicate panel id %d", name, p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q does not use the datasource variable", name, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", name, p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q has an empty query", name, p.Title)
				}
				// Every template variable used must exist.
				for _, m := range varRe.FindAllString(tg.Expr, -1) {
					v := strings.Trim(m, "${}")
					if _, ok := vars[v]; !ok && !strings.HasPrefix(v, "__") {
						t.Errorf("%s: panel %q uses undefined variable %s", name, p.Title, m)
					}
				}
			}
		}
	}
}

func TestExpressionsAndSubstitute(t *testing.T) {
	exprs, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range exprs {
		kinds[e.Kind]++
		s := Substitute(e.Expr, "1m")
		if strings.Contains(s, "$") {
			t.Errorf("%s %s: unsubstituted variable in %q", e.Source, e.Where, s)
		}
	}
	if kinds["panel"] < 30 || kinds["record"] < 20 || kinds["alert"] < 9 || kinds["variable"] < 5 {
		t.Errorf("expression counts %v look wrong", kinds)
	}
	if got := Substitute(`rate(x{model_name=~"$model", a=~"${backend}"}[$__rate_interval])`, "2m"); got != `rate(x{model_name=~".*", a=~".*"}[2m])` {
		t.Errorf("Substitute = %s", got)
	}
}

// TestPromQLParsesWithPromtool writes every dashboard expression as a
// recording rule and lets the real promtool parse them all, then checks the
// shipped config, rules and the rules' unit tests.
func TestPromQLParsesWithPromtool(t *testing.T) {
	promtool := testutil.Binary(t, "TTFT_PROMTOOL", "promtool", "apt-get install -y prometheus (.ci/install-prometheus.sh)")
	exprs, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		if e.Kind == "panel" || e.Kind == "variable" {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard_expr_%d", i), Expr: Substitute(e.Expr, "1m")})
		}
	}
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboards", "rules": rules}}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "dash-rules.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(dir, "check", "rules", f)
	run("prometheus", "check", "config", "prometheus.yml")
	run("prometheus", "test", "rules", "ttft-rules_test.yml")
}

package gateway

import (
	"strings"
	"testing"
)

func TestConfigErrorsNameFileLineField(t *testing.T) {
	env := func(k string) string { return map[string]string{"SET": "x"}[k] }
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty", "", "gw.yaml: empty configuration"},
		{"syntax", "backends: [\n", "gw.yaml:1: did not find expected node content"},
		{"unknown field", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n    weigth: 2\n", `gw.yaml:4: unknown field "weigth"`},
		{"type", "retry:\n  attempts: many\n", `gw.yaml:2: "many" is not a whole number`},
		{"duration", "limits:\n  idle_stream_timeout: soon\n", `gw.yaml:2: "soon" is not a duration`},
		{"no backends", "policy: random\n", "gw.yaml:1: backends: at least one backend is required"},
		{"bad policy", "policy: fastest\nbackends:\n  - name: a\n    url: http://127.0.0.1:1\n", `gw.yaml:1: policy: unknown policy "fastest"`},
		{"bad url", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n  - name: b\n    url: 127.0.0.1:2\n", `gw.yaml:5: backends[1].url: "127.0.0.1:2" is not an absolute http(s) URL`},
		{"dup name", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n  - name: a\n    url: http://127.0.0.1:2\n", `gw.yaml:4: backends[1].name: duplicate backend name "a"`},
		{"bad api", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n    api: grpc\n", `gw.yaml:4: backends[0].api: unknown API "grpc"`},
		{"missing env", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n    api_key_env: UNSET_KEY\n", "gw.yaml:4: backends[0].api_key_env: environment variable UNSET_KEY is not set"},
		{"bad class", "backends:\n  - name: a\n    url: http://127.0.0.1:1\n    slo_class: batch\n", `gw.yaml:4: backends[0].slo_class: unknown SLO class "batch"`},
		{"degrade without target", "backends:\n  - name: a\n    url: http://127.0.0.1:1\nroutes:\n  - model: m\n    admission: degrade\n", "gw.yaml:5: routes[0].degrade_to: admission: degrade needs degrade_to"},
		{"bad key hash", "backends:\n  - name: a\n    url: http://127.0.0.1:1\nkeys:\n  - name: k\n    sha256: sk-plaintext\n", "gw.yaml:6: keys[0].sha256: must be 64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("gw.yaml", []byte(tc.yaml), env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaultsAndKeys(t *testing.T) {
	y := `
listen: 127.0.0.1:9999
backends:
  - name: fast
    url: http://127.0.0.1:8001/
    models: [m]
    api_key_env: SET
    cost: {input_per_million: 0.5, output_per_million: 1.5}
    slo_class: code
routes:
  - model: m
    slo_class: chat
    admission: reject
keys:
  - name: team
    sha256: ` + HashKey("k") + `
    requests_per_minute: 60
`
	cfg, err := ParseConfig("gw.yaml", []byte(y), func(string) string { return "secret" })
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Backends[0]
	if b.URL != "http://127.0.0.1:8001" || b.API != "openai" || b.apiKey != "secret" || b.Cost.OutputPerMillion != 1.5 {
		t.Fatalf("backend: %+v", b)
	}
	if cfg.Policy != "slo-predictive" || cfg.Retry.Attempts != 3 || cfg.Limits.MaxBodyBytes != 8<<20 || cfg.Health.Path != "/v1/models" || !*cfg.AccessLog {
		t.Fatalf("defaults: %+v", cfg)
	}
	q, err := FromBackendURLs([]string{"http://127.0.0.1:1", "fast=http://127.0.0.1:2"})
	if err != nil || q.Backends[0].Name != "backend-1" || q.Backends[1].Name != "fast" || q.Backends[1].API != "openai" {
		t.Fatalf("quick form: %+v %v", q, err)
	}
	if _, err := FromBackendURLs([]string{"localhost"}); err == nil || !strings.Contains(err.Error(), "backends[0].url") {
		t.Fatalf("quick form bad URL: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("backends:\n  - name: a\n    url: http://127.0.0.1:1\n"))
	f.Add([]byte("policy: x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("f.yaml", data, func(string) string { return "" })
		if err == nil && len(cfg.Backends) == 0 {
			t.Fatal("accepted a config without backends")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/yamlerr"
)

// Duration is a time.Duration written in YAML as "250ms", "30s".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 250ms, 30s)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Std converts to time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Config is the gateway's configuration. Zero values take the defaults
// documented on each field (applied by Normalize).
type Config struct {
	// Listen is the address to serve on (default 127.0.0.1:8080).
	Listen string `yaml:"listen"`
	// Policy is the scheduling policy (default slo-predictive).
	Policy string `yaml:"policy"`
	// SLOClass is the default SLO class for requests that name none.
	SLOClass string `yaml:"slo_class"`
	// Explore is the SLO-predictive exploration share (default 0.03).
	Explore float64 `yaml:"explore"`
	// Predictor is the TTFT predictor mode: default, or switching (the
	// article's linear / gradient-boosted trees switch, sched/switching.go).
	Predictor string      `yaml:"predictor"`
	Retry     RetryConfig `yaml:"retry"`
	Limits    Limits      `yaml:"limits"`
	Health    Health      `yaml:"health"`
	// Continuation carries streams cut mid-answer over to another backend.
	Continuation Continuation `yaml:"continuation"`

	// PanicThreshold: when fewer than this share of the backends serving
	// a request's model are available (healthy, circuit breaker closed),
	// it goes to any healthy one, breakers ignored (default 0.5; negative:
	// never). sched.Options.PanicThreshold says why.
	PanicThreshold float64 `yaml:"panic_threshold"`

	// AccessLog enables the JSON access log (default on).
	AccessLog *bool `yaml:"access_log"`
	// Translate lets a chat request go to a backend of the other API
	// (OpenAI <-> Anthropic, translated both ways) when no backend serves
	// its model over its own API (default on).
	Translate *bool           `yaml:"translate"`
	Backends  []BackendConfig `yaml:"backends"`
	Routes    []Route         `yaml:"routes"`
	Keys      []ClientKey     `yaml:"keys"`
	// MetricsRequireKey makes /metrics ask for a client key, as the API
	// endpoints do (needs keys). Off by default: Prometheus scrapers
	// usually present none, and the metrics name no prompt, key or key
	// name (backends, models' SLO classes, counts and latencies).
	MetricsRequireKey bool `yaml:"metrics_require_key"`
	// SharedState shares the prefix index and breakers with the other
	// replicas of this gateway through Redis (shared.go; off without a URL).
	SharedState SharedState `yaml:"shared_state"`

	// File is where the configuration came from ("" for flags), for errors.
	File string `yaml:"-"`
}

// RetryConfig bounds retries. A request is retried (on another backend) only
// while nothing has been written to the client.
type RetryConfig struct {
	// Attempts is the most backends one request may try (default 3).
	Attempts int `yaml:"attempts"`
	// Budget is retries allowed per request on average (default 0.2): a
	// failing fleet is not hit with a multiple of its load.
	Budget float64 `yaml:"budget"`
}

// Continuation configures mid-stream continuation: a stream whose backend
// dies or stalls after tokens reached the client goes on on another
// backend, which is asked for the rest of the answer (docs/gateway.md).
type Continuation struct {
	// Max is the most continuations of one stream (default 2; negative:
	// none, whatever the routes say).
	Max int `yaml:"max"`
	// Chat is the default for /v1/chat/completions and /v1/messages
	// (default on); Completions for /v1/completions (default off: a
	// completions prompt carries no marker of where the answer starts, so
	// only engines that continue a prompt's text as their own serve it
	// well). A route's continuation overrides both.
	Chat        *bool `yaml:"chat"`
	Completions *bool `yaml:"completions"`
}

// Limits protect the gateway from slow, huge or stuck peers.
type Limits struct {
	MaxBodyBytes int64 `yaml:"max_body_bytes"` // default 8 MiB
	// HeaderTimeout bounds reading a client's request headers and body (default 10s).
	HeaderTimeout Duration `yaml:"header_timeout"`
	// FirstByteTimeout bounds a streamed answer's wait for its first token;
	// exceeding it is a retriable failure (default 60s).
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
	// ResponseTimeout bounds the wait for a non-streamed answer, which
	// arrives only when the backend has generated all of it (default 10m).
	// It is not retried elsewhere once the backend has the request: a long
	// answer would take as long there, for nothing.
	ResponseTimeout Duration `yaml:"response_timeout"`
	// IdleStreamTimeout bounds the silence between stream reads from a
	// backend, and each write to a client (default 30s).
	IdleStreamTimeout Duration `yaml:"idle_stream_timeout"`
}

// Health configures active checks.
type Health struct {
	Interval Duration `yaml:"interval"` // default 5s; 0 in Normalize → default
	Timeout  Duration `yaml:"timeout"`  // default 2s
	Path     string   `yaml:"path"`     // default /v1/models
	// Failures is how many consecutive failed checks mark a backend down (default 2).
	Failures int `yaml:"failures"`
	// Disabled turns active checks off.
	Disabled bool `yaml:"disabled"`
}

// BackendConfig describes one backend.
type BackendConfig struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// API is openai, anthropic or both (default openai).
	API    string   `yaml:"api"`
	Models []string `yaml:"models"`
	// APIKeyEnv names the environment variable holding the backend's key;
	// the gateway injects it (Authorization: Bearer / x-api-key).
	APIKeyEnv      string  `yaml:"api_key_env"`
	Weight         float64 `yaml:"weight"`
	MaxConcurrency int     `yaml:"max_concurrency"`
	Cost           Cost    `yaml:"cost"`
	// SLOClass is the class applied to requests for this backend's models
	// when neither the request nor a route names one.
	SLOClass string `yaml:"slo_class"`
	// MetricsURL, when set, is scraped for vLLM gauges (waiting requests,
	// KV-cache usage) that feed the TTFT predictor.
	MetricsURL string `yaml:"metrics_url"`
	// PrefixBlocks bounds the prefix index (default 65536 blocks of 256 bytes).
	PrefixBlocks int `yaml:"prefix_blocks"`

	apiKey string
}

// Cost is the price per million tokens, for reports and pareto analysis.
type Cost struct {
	InputPerMillion  float64 `yaml:"input_per_million"`
	OutputPerMillion float64 `yaml:"output_per_million"`
}

// Admission policies when no backend is predicted to meet the SLO.
const (
	AdmitBestEffort = "best-effort"
	AdmitReject     = "reject"
	AdmitDegrade    = "degrade"
)

// Route holds per-model defaults.
type Route struct {
	Model    string `yaml:"model"`
	SLOClass string `yaml:"slo_class"`
	SLOMs    int    `yaml:"slo_ms"`
	// Admission is best-effort (default), reject (429 + Retry-After) or
	// degrade (send to DegradeTo).
	Admission string `yaml:"admission"`
	DegradeTo string `yaml:"degrade_to"`
	// Continuation turns mid-stream continuation on or off for the
	// model's streams, whatever their API (default: continuation.chat or
	// continuation.completions).
	Continuation *bool `yaml:"continuation"`
}

// ClientKey is one client API key, stored as the hex SHA-256 of the key
// ("ttft gateway hash-key" prints it) so the file holds no secret.
type ClientKey struct {
	Name              string  `yaml:"name"`
	SHA256            string  `yaml:"sha256"`
	RequestsPerMinute float64 `yaml:"requests_per_minute"`
	TokensPerMinute   float64 `yaml:"tokens_per_minute"`
}

// ConfigError is a configuration mistake with its position.
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// LoadConfig reads and validates a YAML configuration file. Secrets named by
// api_key_env are resolved with getenv (os.Getenv when nil).
func LoadConfig(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading gateway config: %w", err)
	}
	return ParseConfig(path, data, getenv)
}

// ParseConfig parses and validates configuration bytes; name is used in errors.
func ParseConfig(name string, data []byte, getenv func(string) string) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlErr(name, err)
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{File: name, Msg: "empty configuration"}
		}
		return nil, yamlErr(name, err)
	}
	cfg.File = name
	if err := cfg.validate(&root, getenv); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// yamlErr rewrites yaml.v3's errors as "file:N: msg" (yamlerr.Clean).
func yamlErr(name string, err error) error {
	var ye *yamlerr.Error
	if errors.As(yamlerr.Clean(name, err), &ye) {
		return &ConfigError{File: name, Line: ye.Line, Msg: ye.Msg}
	}
	return &ConfigError{File: name, Msg: err.Error()}
}

// lineOf finds the line of a field by path through mapping keys and sequence
// indexes (0 when absent, e.g. for configs built in code).
func lineOf(root *yaml.Node, path ...any) int {
	n := root
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return line
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					line = n.Content[i].Line
					n = n.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return line
			}
		case int:
			if n.Kind != yaml.SequenceNode || k >= len(n.Content) {
				return line
			}
			n = n.Content[k]
			line = n.Line
		}
	}
	return line
}

// FromBackendURLs builds a configuration from quick --backend flags:
// "URL" or "name=URL"; such backends serve any model over the OpenAI API,
// which every common engine speaks (vLLM, SGLang, TGI, llama.cpp, Ollama);
// Anthropic clients reach them through translation. A config file can
// declare anthropic or both.
func FromBackendURLs(urls []string) (*Config, error) {
	cfg := &Config{}
	for i, u := range urls {
		name, raw, ok := strings.Cut(u, "=")
		if !ok || strings.Contains(name, "/") {
			name, raw = fmt.Sprintf("backend-%d", i+1), u
		}
		cfg.Backends = append(cfg.Backends, BackendConfig{Name: name, URL: raw, API: "openai"})
	}
	if err := cfg.validate(nil, os.Getenv); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate checks a configuration built in code and applies defaults.
func (c *Config) Validate(getenv func(string) string) error { return c.validate(nil, getenv) }

func (c *Config) validate(root *yaml.Node, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	bad := fieldErrs{file: c.File, root: root}
	// Section by section, in the order the file documents them: each
	// applies its defaults and reports its first mistake.
	for _, v := range []func(fieldErrs) error{c.validateTop, c.validateRetry, c.validateLimits, c.validateHealth, c.validateContinuation, c.validateSharedState} {
		if err := v(bad); err != nil {
			return err
		}
	}
	if c.Translate == nil {
		on := true
		c.Translate = &on
	}
	if c.AccessLog == nil {
		on := true
		c.AccessLog = &on
	}
	if err := c.validateBackends(bad, getenv); err != nil {
		return err
	}
	if err := c.validateRoutes(bad); err != nil {
		return err
	}
	if err := c.validateKeys(bad); err != nil {
		return err
	}
	if c.MetricsRequireKey && len(c.Keys) == 0 {
		return bad.at("needs client keys (keys)", "metrics_require_key")
	}
	return nil
}

// fieldErrs makes one configuration's ConfigErrors: the field by its path
// ("backends", 1, "url" → backends[1].url) and its line in the YAML (root;
// nil for configurations built in code).
type fieldErrs struct {
	file string
	root *yaml.Node
}

func (e fieldErrs) at(msg string, path ...any) error {
	field := ""
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if field != "" {
				field += "."
			}
			field += v
		case int:
			field += fmt.Sprintf("[%d]", v)
		}
	}
	return &ConfigError{File: e.file, Line: lineOf(e.root, path...), Field: field, Msg: msg}
}

// validateTop checks the top-level scheduling fields: listen, policy,
// slo_class, explore, panic_threshold.
func (c *Config) validateTop(bad fieldErrs) error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Policy == "" {
		c.Policy = sched.SLOPredictive
	}
	if c.Predictor != "" && !slices.Contains(sched.PredictorModes(), c.Predictor) {
		return bad.at(fmt.Sprintf("unknown predictor %q (want one of %s)", c.Predictor, strings.Join(sched.PredictorModes(), ", ")), "predictor")
	}
	if !slices.Contains(sched.Policies(), c.Policy) {
		return bad.at(fmt.Sprintf("unknown policy %q (want one of %s)", c.Policy, strings.Join(sched.Policies(), ", ")), "policy")
	}
	if c.SLOClass != "" {
		if _, err := sched.ParseClass(c.SLOClass); err != nil {
			return bad.at(err.Error(), "slo_class")
		}
	}
	if c.Explore < 0 || c.Explore > 0.5 {
		return bad.at("must be between 0 and 0.5", "explore")
	}
	if c.PanicThreshold == 0 {
		c.PanicThreshold = 0.5
	}
	if c.PanicThreshold > 1 {
		return bad.at("must be at most 1 (a share of the backends; negative turns panic routing off)", "panic_threshold")
	}
	return nil
}

// validateRetry checks retry.
func (c *Config) validateRetry(bad fieldErrs) error {
	if c.Retry.Attempts == 0 {
		c.Retry.Attempts = 3
	}
	if c.Retry.Attempts < 1 || c.Retry.Attempts > 10 {
		return bad.at("must be between 1 and 10", "retry", "attempts")
	}
	if c.Retry.Budget == 0 {
		c.Retry.Budget = 0.2
	}
	if c.Retry.Budget < 0 || c.Retry.Budget > 1 {
		return bad.at("must be between 0 and 1", "retry", "budget")
	}
	return nil
}

// setDefault sets *d to v when it is zero.
func setDefault(d *Duration, v time.Duration) {
	if *d == 0 {
		*d = Duration(v)
	}
}

// validateLimits checks limits.
func (c *Config) validateLimits(bad fieldErrs) error {
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = 8 << 20
	}
	if c.Limits.MaxBodyBytes < 1024 {
		return bad.at("must be at least 1024", "limits", "max_body_bytes")
	}
	setDefault(&c.Limits.HeaderTimeout, 10*time.Second)
	setDefault(&c.Limits.FirstByteTimeout, 60*time.Second)
	setDefault(&c.Limits.ResponseTimeout, 10*time.Minute)
	setDefault(&c.Limits.IdleStreamTimeout, 30*time.Second)
	return nil
}

// validateContinuation checks continuation.
func (c *Config) validateContinuation(bad fieldErrs) error {
	k := &c.Continuation
	if k.Max == 0 {
		k.Max = 2
	}
	if k.Max > 10 {
		return bad.at("must be at most 10", "continuation", "max")
	}
	if k.Chat == nil {
		on := true
		k.Chat = &on
	}
	if k.Completions == nil {
		off := false
		k.Completions = &off
	}
	return nil
}

// validateHealth checks health.
func (c *Config) validateHealth(bad fieldErrs) error {
	setDefault(&c.Health.Interval, 5*time.Second)
	setDefault(&c.Health.Timeout, 2*time.Second)
	if c.Health.Path == "" {
		c.Health.Path = "/v1/models"
	}
	if !strings.HasPrefix(c.Health.Path, "/") {
		return bad.at("must start with /", "health", "path")
	}
	if c.Health.Failures == 0 {
		c.Health.Failures = 2
	}
	return nil
}

// validateBackends checks backends (at least one, unique names) and
// resolves their api_key_env with getenv.
func (c *Config) validateBackends(bad fieldErrs, getenv func(string) string) error {
	if len(c.Backends) == 0 {
		return bad.at("at least one backend is required", "backends")
	}
	names := map[string]bool{}
	for i := range c.Backends {
		b := &c.Backends[i]
		if b.Name == "" {
			return bad.at("is required", "backends", i, "name")
		}
		if names[b.Name] {
			return bad.at(fmt.Sprintf("duplicate backend name %q", b.Name), "backends", i, "name")
		}
		names[b.Name] = true
		if err := b.validate(bad, i, getenv); err != nil {
			return err
		}
	}
	return nil
}

// validate checks backends[i] but for its name.
func (b *BackendConfig) validate(bad fieldErrs, i int, getenv func(string) string) error {
	u, err := url.Parse(b.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad.at(fmt.Sprintf("%q is not an absolute http(s) URL", b.URL), "backends", i, "url")
	}
	b.URL = strings.TrimRight(b.URL, "/")
	switch b.API {
	case "":
		b.API = "openai"
	case "openai", "anthropic", "both":
	default:
		return bad.at(fmt.Sprintf("unknown API %q (want openai, anthropic or both)", b.API), "backends", i, "api")
	}
	if b.Weight < 0 {
		return bad.at("must not be negative", "backends", i, "weight")
	}
	if b.MaxConcurrency < 0 {
		return bad.at("must not be negative", "backends", i, "max_concurrency")
	}
	if b.Cost.InputPerMillion < 0 || b.Cost.OutputPerMillion < 0 {
		return bad.at("costs must not be negative", "backends", i, "cost")
	}
	if b.SLOClass != "" {
		if _, err := sched.ParseClass(b.SLOClass); err != nil {
			return bad.at(err.Error(), "backends", i, "slo_class")
		}
	}
	if b.MetricsURL != "" {
		if u, err := url.Parse(b.MetricsURL); err != nil || u.Host == "" {
			return bad.at(fmt.Sprintf("%q is not an absolute URL", b.MetricsURL), "backends", i, "metrics_url")
		}
	}
	if b.APIKeyEnv != "" {
		b.apiKey = getenv(b.APIKeyEnv)
		if b.apiKey == "" {
			return bad.at(fmt.Sprintf("environment variable %s is not set", b.APIKeyEnv), "backends", i, "api_key_env")
		}
	}
	return nil
}

// validateRoutes checks routes: one per model, admission and its target.
func (c *Config) validateRoutes(bad fieldErrs) error {
	models := map[string]bool{}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Model == "" {
			return bad.at("is required", "routes", i, "model")
		}
		if models[r.Model] {
			return bad.at(fmt.Sprintf("duplicate route for model %q", r.Model), "routes", i, "model")
		}
		models[r.Model] = true
		if r.SLOClass != "" {
			if _, err := sched.ParseClass(r.SLOClass); err != nil {
				return bad.at(err.Error(), "routes", i, "slo_class")
			}
		}
		if r.SLOMs < 0 {
			return bad.at("must not be negative", "routes", i, "slo_ms")
		}
		switch r.Admission {
		case "":
			r.Admission = AdmitBestEffort
		case AdmitBestEffort, AdmitReject:
		case AdmitDegrade:
			if r.DegradeTo == "" {
				return bad.at("admission: degrade needs degrade_to", "routes", i, "degrade_to")
			}
		default:
			return bad.at(fmt.Sprintf("unknown admission %q (want best-effort, reject or degrade)", r.Admission), "routes", i, "admission")
		}
	}
	return nil
}

// validateKeys checks keys: named, unique SHA-256 hashes, rate limits.
func (c *Config) validateKeys(bad fieldErrs) error {
	hashes := map[string]bool{}
	for i := range c.Keys {
		k := &c.Keys[i]
		if k.Name == "" {
			return bad.at("is required", "keys", i, "name")
		}
		k.SHA256 = strings.ToLower(k.SHA256)
		if len(k.SHA256) != 64 || strings.Trim(k.SHA256, "0123456789abcdef") != "" {
			return bad.at("must be 64 hex digits: the SHA-256 of the key (ttft gateway hash-key)", "keys", i, "sha256")
		}
		if hashes[k.SHA256] {
			return bad.at("duplicate key", "keys", i, "sha256")
		}
		hashes[k.SHA256] = true
		if k.RequestsPerMinute < 0 || k.TokensPerMinute < 0 {
			return bad.at("rate limits must not be negative", "keys", i)
		}
	}
	return nil
}

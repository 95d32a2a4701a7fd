package workload

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/sloclass"
)

// Scenario is a named workload profile with service-level objectives: what
// is sent (length distributions, shared prefixes, multi-turn sessions), how
// it arrives, and what latency it must meet.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
	// PromptTokens is each request's own prompt length; with a Prefix it is
	// the part after the shared prefix, with a Session the new user message
	// of each turn.
	PromptTokens Dist `yaml:"prompt_tokens"`
	// OutputTokens is the output length; MaxTokens is set to the draw and,
	// with ForceOutput, MinTokens too (vLLM min_tokens) so the length is exact.
	OutputTokens Dist `yaml:"output_tokens"`
	ForceOutput  bool `yaml:"force_output,omitempty"`

	Prefix  *PrefixSpec  `yaml:"prefix,omitempty"`
	Session *SessionSpec `yaml:"session,omitempty"`
	Arrival ArrivalSpec  `yaml:"arrival"`
	SLOs    []SLO        `yaml:"slo"`
}

// PrefixSpec describes shared-prefix groups: Groups documents (system prompts,
// files) of Tokens tokens each; every request picks a group by Popularity.
type PrefixSpec struct {
	Groups     int     `yaml:"groups"`
	Tokens     int     `yaml:"tokens"`
	Popularity string  `yaml:"popularity,omitempty"` // uniform (default) | zipf
	ZipfS      float64 `yaml:"zipf_s,omitempty"`     // Zipf exponent, default 1.1
}

// SessionSpec describes multi-turn conversations.
type SessionSpec struct {
	Sessions  int      `yaml:"sessions"`
	Turns     int      `yaml:"turns"`
	ThinkTime Duration `yaml:"think_time,omitempty"`
	// SystemTokens is an optional system prompt per session.
	SystemTokens int `yaml:"system_tokens,omitempty"`
}

// ArrivalSpec is the scenario's default open-loop arrival process. --rate or
// --concurrency on the command line replace it.
type ArrivalSpec struct {
	Process    string  `yaml:"process,omitempty"` // poisson (default) | gamma | constant
	RatePerS   float64 `yaml:"rate,omitempty"`    // requests (or sessions) per second; 0 = none
	Burstiness float64 `yaml:"burstiness,omitempty"`
	// BurstAmplitude modulates the rate sinusoidally by ±amplitude (0.3 =
	// ±30%) over BurstPeriod, by thinning.
	BurstAmplitude float64  `yaml:"burst_amplitude,omitempty"`
	BurstPeriod    Duration `yaml:"burst_period,omitempty"`
}

// SLO is one objective: Statistic of Metric at most LimitMs.
type SLO struct {
	Metric    string `yaml:"metric"` // ttft | itl | tpot | e2e
	Statistic string `yaml:"stat"`   // mean | p50 | p90 | p95 | p99 | p99_9
	LimitMs   Millis `yaml:"max"`
	line      int
}

// Name is the verdict's name, e.g. "ttft_p95".
func (s SLO) Name() string { return s.Metric + "_" + s.Statistic }

func (s SLO) String() string {
	return fmt.Sprintf("%s %s <= %g ms", s.Metric, s.Statistic, float64(s.LimitMs))
}

// Millis is a limit in milliseconds; YAML accepts a number (ms) or a Go
// duration string ("320ms", "1.2s").
type Millis float64

func (m *Millis) UnmarshalYAML(n *yaml.Node) error {
	if d, err := time.ParseDuration(n.Value); err == nil {
		*m = Millis(float64(d) / float64(time.Millisecond))
		return nil
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want milliseconds or a duration like 320ms, got %q", n.Line, n.Value)
	}
	*m = Millis(v)
	return nil
}

// Duration is a time.Duration that YAML reads from "2s" or seconds.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if v, err := time.ParseDuration(n.Value); err == nil {
		*d = Duration(v)
		return nil
	}
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration like 2s, got %q", n.Line, n.Value)
	}
	*d = Duration(v * float64(time.Second))
	return nil
}

var sloMetrics = map[string]bool{"ttft": true, "itl": true, "tpot": true, "e2e": true}
var sloStats = map[string]float64{"mean": -1, "p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "p99_9": 0.999}

func (s *SLO) UnmarshalYAML(n *yaml.Node) error {
	type plain SLO
	var p plain
	if err := decodeStrict(n, &p); err != nil {
		return err
	}
	*s = SLO(p)
	s.line = n.Line
	s.Statistic = strings.ReplaceAll(strings.ToLower(s.Statistic), ".", "_")
	if s.Statistic == "median" {
		s.Statistic = "p50"
	}
	return s.validate(fmt.Sprintf("line %d: slo", n.Line))
}

func (s SLO) validate(where string) error {
	if !sloMetrics[s.Metric] {
		return fmt.Errorf("%s: metric %q is not one of ttft, itl, tpot, e2e", where, s.Metric)
	}
	if _, ok := sloStats[s.Statistic]; !ok {
		return fmt.Errorf("%s: stat %q is not one of mean, p50, p90, p95, p99, p99_9", where, s.Statistic)
	}
	if !(s.LimitMs > 0) || math.IsInf(float64(s.LimitMs), 0) {
		return fmt.Errorf("%s: max must be a positive latency, got %v", where, float64(s.LimitMs))
	}
	return nil
}

// Validate checks a scenario's fields together.
func (s *Scenario) Validate() error {
	if s.Name == "" {
		return errors.New("name is required")
	}
	if err := s.PromptTokens.Validate("prompt_tokens"); err != nil {
		return err
	}
	if err := s.OutputTokens.Validate("output_tokens"); err != nil {
		return err
	}
	if p := s.Prefix; p != nil {
		if p.Groups < 1 || p.Tokens < 1 {
			return fmt.Errorf("prefix: groups and tokens must be at least 1, got %d and %d", p.Groups, p.Tokens)
		}
		switch p.Popularity {
		case "", "uniform":
		case "zipf":
			if p.ZipfS < 0 {
				return fmt.Errorf("prefix: zipf_s must be >= 0, got %v", p.ZipfS)
			}
		default:
			return fmt.Errorf("prefix: popularity %q is not uniform or zipf", p.Popularity)
		}
	}
	if ss := s.Session; ss != nil {
		if ss.Sessions < 1 || ss.Turns < 1 {
			return fmt.Errorf("session: sessions and turns must be at least 1, got %d and %d", ss.Sessions, ss.Turns)
		}
		if ss.ThinkTime < 0 || ss.SystemTokens < 0 {
			return fmt.Errorf("session: think_time and system_tokens must not be negative")
		}
		if s.Prefix != nil {
			return fmt.Errorf("session and prefix cannot be combined (a session's history is its shared prefix)")
		}
	}
	a := s.Arrival
	switch a.Process {
	case "", "poisson", "constant":
	case "gamma":
		if !(a.Burstiness > 0) {
			return fmt.Errorf("arrival: gamma needs burstiness > 0")
		}
	default:
		return fmt.Errorf("arrival: process %q is not poisson, gamma or constant", a.Process)
	}
	if a.RatePerS < 0 || a.BurstAmplitude < 0 || a.BurstAmplitude >= 1 {
		return fmt.Errorf("arrival: rate must be >= 0 and burst_amplitude in [0, 1)")
	}
	if a.BurstAmplitude > 0 && a.BurstPeriod <= 0 {
		return fmt.Errorf("arrival: burst_amplitude needs a positive burst_period")
	}
	for i, slo := range s.SLOs {
		if err := slo.validate(fmt.Sprintf("slo[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// Built-in scenarios from the source article's §3.2 table, one per SLO
// class (package sloclass holds the article's limits, shared with the
// gateway); the length distributions and rates are our choices, documented
// in docs/workloads.md.
func builtinScenarios() map[string]*Scenario {
	chat, code, summary := sloclass.Must(sloclass.Chat), sloclass.Must(sloclass.Code), sloclass.Must(sloclass.Summary)
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	return map[string]*Scenario{
		chat.Name: {
			Name:        chat.Name,
			Description: fmt.Sprintf("%s: TTFT P95 <= %s, whole answer within %s, tolerates ±30%% bursts", chat.Product, ms(chat.TTFT), ms(chat.E2E)),
			// Short questions with some context, short answers.
			PromptTokens: Dist{Kind: "lognormal", Median: 200, Sigma: 0.6, Min: 32, Max: 1024},
			OutputTokens: Dist{Kind: "lognormal", Median: 48, Sigma: 0.4, Min: 8, Max: 128},
			Prefix:       &PrefixSpec{Groups: 1, Tokens: 256}, // one shared service system prompt
			Arrival:      ArrivalSpec{Process: "poisson", RatePerS: 4, BurstAmplitude: 0.3, BurstPeriod: Duration(60 * time.Second)},
			SLOs:         classSLOs(chat),
		},
		code.Name: {
			Name:        code.Name,
			Description: fmt.Sprintf("%s: TTFT P95 <= %s, <= %s end to end, short outputs over a long shared file context, jitter-sensitive", code.Product, ms(code.TTFT), ms(code.E2E)),
			// The cursor's neighbourhood after a long file shared by many
			// requests (the article: >= 70% prefix reuse needed).
			PromptTokens: Dist{Kind: "uniform", Min: 32, Max: 256},
			OutputTokens: Dist{Kind: "uniform", Min: 8, Max: 32},
			ForceOutput:  true,
			Prefix:       &PrefixSpec{Groups: 8, Tokens: 1536, Popularity: "zipf", ZipfS: 1.1},
			// Keystroke-driven and steady: constant-ish gaps (gamma shape 4).
			Arrival: ArrivalSpec{Process: "gamma", RatePerS: 8, Burstiness: 4},
			SLOs:    classSLOs(code),
		},
		summary.Name: {
			Name:         summary.Name,
			Description:  fmt.Sprintf("%s: TTFT P95 <= %s, <= %s end to end, long inputs, batch-friendly", summary.Product, ms(summary.TTFT), ms(summary.E2E)),
			PromptTokens: Dist{Kind: "uniform", Min: 2048, Max: 4096},
			OutputTokens: Dist{Kind: "uniform", Min: 32, Max: 96},
			// Documents come in batches: bursty gamma arrivals (shape 0.5).
			Arrival: ArrivalSpec{Process: "gamma", RatePerS: 1, Burstiness: 0.5},
			SLOs:    classSLOs(summary),
		},
	}
}

// classSLOs are a class's targets as scenario SLOs (P95 TTFT and E2E).
func classSLOs(c sloclass.Class) []SLO {
	return []SLO{
		{Metric: "ttft", Statistic: "p95", LimitMs: Millis(c.TTFT.Milliseconds())},
		{Metric: "e2e", Statistic: "p95", LimitMs: Millis(c.E2E.Milliseconds())},
	}
}

// BuiltinScenarioNames lists the built-in scenarios.
func BuiltinScenarioNames() []string {
	var names []string
	for n := range builtinScenarios() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// BuiltinScenario returns a fresh copy of a built-in scenario.
func BuiltinScenario(name string) (*Scenario, bool) {
	s, ok := builtinScenarios()[name]
	return s, ok
}

// LoadScenario resolves --scenario: a built-in name or a YAML file.
func LoadScenario(spec string) (*Scenario, error) {
	if s, ok := BuiltinScenario(spec); ok {
		return s, nil
	}
	data, err := os.ReadFile(spec)
	if err != nil {
		if os.IsNotExist(err) && !strings.ContainsAny(spec, `/\.`) {
			return nil, fmt.Errorf("unknown scenario %q (built in: %s; or give a YAML file)", spec, strings.Join(BuiltinScenarioNames(), ", "))
		}
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	return ParseScenario(spec, data)
}

var yamlLineRe = regexp.MustCompile(`(?m)^\s*(?:yaml: )?line (\d+): `)

// ParseScenario reads a scenario from YAML; errors read "file:line: what".
func ParseScenario(file string, data []byte) (*Scenario, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, scenarioErr(file, 0, err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: a scenario is a YAML mapping (name, prompt_tokens, output_tokens, arrival, slo)", file)
	}
	doc := root.Content[0]
	type plain Scenario
	var p plain
	if err := decodeStrict(doc, &p); err != nil {
		return nil, scenarioErr(file, 0, err)
	}
	s := (*Scenario)(&p)
	if err := s.Validate(); err != nil {
		return nil, scenarioErr(file, fieldLine(doc, err.Error()), err)
	}
	return s, nil
}

// fieldLine finds the line of the top-level key an error message starts with.
func fieldLine(doc *yaml.Node, msg string) int {
	key, _, _ := strings.Cut(msg, ":")
	key, _, _ = strings.Cut(key, "[")
	key, _, _ = strings.Cut(key, " ")
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == key {
			return doc.Content[i].Line
		}
	}
	return doc.Line
}

func scenarioErr(file string, line int, err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n")
	if m := yamlLineRe.FindStringSubmatchIndex(msg); m != nil && m[0] == 0 {
		return fmt.Errorf("%s:%s: %s", file, msg[m[2]:m[3]], strings.TrimSpace(msg[m[1]:]))
	}
	if line > 0 {
		return fmt.Errorf("%s:%d: %s", file, line, msg)
	}
	return fmt.Errorf("%s: %s", file, msg)
}

func (p *PrefixSpec) UnmarshalYAML(n *yaml.Node) error {
	type plain PrefixSpec
	return decodeStrict(n, (*plain)(p))
}

func (s *SessionSpec) UnmarshalYAML(n *yaml.Node) error {
	type plain SessionSpec
	return decodeStrict(n, (*plain)(s))
}

func (a *ArrivalSpec) UnmarshalYAML(n *yaml.Node) error {
	type plain ArrivalSpec
	return decodeStrict(n, (*plain)(a))
}

package workload

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestBuiltinScenariosMatchArticle(t *testing.T) {
	want := map[string][2]float64{"chat": {320, 800}, "code": {120, 300}, "summary": {650, 1200}}
	for name, lim := range want {
		s, ok := BuiltinScenario(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := map[string]float64{}
		for _, slo := range s.SLOs {
			got[slo.Name()] = float64(slo.LimitMs)
		}
		if got["ttft_p95"] != lim[0] || got["e2e_p95"] != lim[1] {
			t.Errorf("%s SLOs %v, want ttft_p95 %v e2e_p95 %v", name, got, lim[0], lim[1])
		}
	}
	if got := strings.Join(BuiltinScenarioNames(), ","); got != "chat,code,summary" {
		t.Errorf("names %s", got)
	}
	// A fresh copy each time: callers may modify it.
	a, _ := BuiltinScenario("chat")
	a.SLOs[0].LimitMs = 1
	b, _ := BuiltinScenario("chat")
	if b.SLOs[0].LimitMs != 320 {
		t.Error("built-in scenario shared between callers")
	}
}

const goodYAML = `name: mine
description: test
prompt_tokens: {dist: uniform, min: 10, max: 20}
output_tokens: 16
force_output: true
prefix: {groups: 4, tokens: 50, popularity: zipf, zipf_s: 1.2}
arrival: {process: gamma, rate: 5, burstiness: 0.5}
slo:
  - {metric: ttft, stat: p95, max: 200ms}
  - {metric: itl, stat: p99, max: 40}
  - {metric: e2e, stat: median, max: 1.5s}
`

func TestParseScenario(t *testing.T) {
	s, err := ParseScenario("mine.yaml", []byte(goodYAML))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "mine" || s.PromptTokens.Kind != "uniform" || s.OutputTokens != FixedDist(16) || !s.ForceOutput {
		t.Fatalf("%+v", s)
	}
	if s.Prefix.Groups != 4 || s.Prefix.ZipfS != 1.2 || s.Arrival.RatePerS != 5 {
		t.Fatalf("%+v %+v", s.Prefix, s.Arrival)
	}
	if len(s.SLOs) != 3 || s.SLOs[0].LimitMs != 200 || s.SLOs[1].LimitMs != 40 || s.SLOs[2].LimitMs != 1500 || s.SLOs[2].Statistic != "p50" {
		t.Fatalf("%+v", s.SLOs)
	}
	path := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(path, []byte(goodYAML), 0o644)
	if _, err := LoadScenario(path); err != nil {
		t.Fatal(err)
	}
}

func TestParseScenarioErrorsNameFileLineField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top field", "name: x\nprompt_tokens: 1\noutput_tokens: 1\nbogus: 1\n", "f.yaml:4: unknown field \"bogus\""},
		{"unknown slo field", "name: x\nprompt_tokens: 1\noutput_tokens: 1\nslo:\n  - {metric: ttft, stat: p95, max: 1, foo: 2}\n", "f.yaml:5: unknown field \"foo\""},
		{"bad metric", "name: x\nprompt_tokens: 1\noutput_tokens: 1\nslo:\n  - {metric: ttfx, stat: p95, max: 1}\n", "f.yaml:5: slo: metric \"ttfx\""},
		{"bad limit", "name: x\nprompt_tokens: 1\noutput_tokens: 1\nslo:\n  - {metric: ttft, stat: p95, max: fast}\n", "f.yaml:5: want milliseconds"},
		{"bad dist", "name: x\nprompt_tokens: {dist: weird}\noutput_tokens: 1\n", "f.yaml:2: prompt_tokens: unknown dist \"weird\""},
		{"bad uniform", "name: x\nprompt_tokens: 1\noutput_tokens: {dist: uniform, min: 5, max: 2}\n", "f.yaml:3: output_tokens: uniform needs"},
		{"missing name", "prompt_tokens: 1\noutput_tokens: 1\n", "f.yaml:1: name is required"},
		{"missing prompt_tokens", "name: x\noutput_tokens: 1\n", "prompt_tokens is required: a number of tokens"},
		{"bad prefix field", "name: x\nprompt_tokens: 1\noutput_tokens: 1\nprefix:\n  groups: 2\n  tokenz: 3\n", "f.yaml:6: unknown field \"tokenz\""},
		{"not yaml", "name: [x\n", "f.yaml:"},
		{"not mapping", "- 1\n", "a scenario is a YAML mapping"},
		{"bad arrival", "name: x\nprompt_tokens: 1\noutput_tokens: 1\narrival: {process: wobbly}\n", "f.yaml:4: arrival: process \"wobbly\""},
	}
	for _, c := range cases {
		_, err := ParseScenario("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
	if _, err := LoadScenario("nosuch"); err == nil || !strings.Contains(err.Error(), "chat, code, summary") {
		t.Errorf("unknown name: %v", err)
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(goodYAML))
	f.Add([]byte("name: x\nprompt_tokens: 1\noutput_tokens: 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseScenario("f.yaml", b)
		if err == nil {
			if err := s.Validate(); err != nil {
				t.Fatalf("parsed scenario fails validation: %v", err)
			}
		} else if !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

func TestEvaluate(t *testing.T) {
	s := &Scenario{Name: "x", SLOs: []SLO{
		{Metric: "ttft", Statistic: "p95", LimitMs: 100},
		{Metric: "e2e", Statistic: "p95", LimitMs: 500},
	}}
	sum := record.Summary{DurationS: 10,
		TTFT: record.Metric{Count: 4, P95: 90, CI95: map[string][2]float64{"p95": {80, 99}}},
		E2E:  record.Metric{Count: 4, P95: 600},
	}
	recs := []record.Record{
		{TTFTMs: 50, E2EMs: 300},
		{TTFTMs: 50, E2EMs: 300, Warmup: true},
		{TTFTMs: 150, E2EMs: 300},   // misses ttft
		{TTFTMs: 50, E2EMs: 700},    // misses e2e
		{ErrorClass: "http_status"}, // failed counts against
		{TTFTMs: 99, E2EMs: 499},
	}
	vs, g := s.Evaluate(sum, recs)
	if len(vs) != 2 || !vs[0].Pass || vs[1].Pass || Passed(vs) {
		t.Fatalf("%+v", vs)
	}
	if vs[0].ValueMs != 90 || vs[0].CI95 != [2]float64{80, 99} || vs[0].MarginMs != 10 || vs[1].MarginMs != -100 {
		t.Fatalf("%+v", vs)
	}
	if g.Attainment != 2.0/5 || math.Abs(g.RequestsPerS-0.2) > 1e-12 {
		t.Fatalf("goodput %+v", g)
	}
	// No data fails.
	vs, _ = s.Evaluate(record.Summary{}, nil)
	if Passed(vs) {
		t.Fatal("empty run passed")
	}
	// ITL per request at the SLO's statistic.
	s2 := &Scenario{SLOs: []SLO{{Metric: "itl", Statistic: "p50", LimitMs: 10}}}
	_, g = s2.Evaluate(record.Summary{DurationS: 1}, []record.Record{{ITLMs: []float64{5, 6, 50}}, {ITLMs: []float64{20, 30, 1}}})
	if g.Attainment != 0.5 {
		t.Fatalf("itl attainment %v", g.Attainment)
	}
}

func TestGeneratedWithPrefixGroups(t *testing.T) {
	tok := DefaultTokenizer()
	src, err := NewGenerated(GenOptions{
		Seed: 3, Requests: 400, Scenario: "p",
		Prompt: Dist{Kind: "uniform", Min: 5, Max: 15}, Output: FixedDist(8), ForceOutput: true,
		Prefix: &PrefixSpec{Groups: 4, Tokens: 40, Popularity: "zipf", ZipfS: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	prefixes := map[string]string{}
	for i := 0; i < 400; i++ {
		r, err := src.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := tok.Count(r.Prompt)
		if n != r.PromptTokens || n < 45 || n > 55 || len(r.Tokens) != n {
			t.Fatalf("request %d: %d tokens (%d declared)", i, n, r.PromptTokens)
		}
		if r.MaxTokens != 8 || r.MinTokens != 8 || r.Scenario != "p" {
			t.Fatalf("%+v", r)
		}
		sys := r.Messages[0].Content
		if p, ok := prefixes[r.Group]; ok && p != sys {
			t.Fatalf("group %s prefix changed", r.Group)
		}
		prefixes[r.Group] = sys
		if tok.Count(sys) != 40 || !strings.HasPrefix(r.Prompt, sys) {
			t.Fatalf("prefix %d tokens", tok.Count(sys))
		}
		// The first 40 token IDs are the group's prefix IDs: a prefix cache sees it.
		if got := tok.Decode(r.Tokens[:40]); got != sys {
			t.Fatalf("prefix IDs do not decode to the prefix")
		}
		counts[r.Group]++
	}
	// Zipf s=1 over 4 groups: weights 1, 1/2, 1/3, 1/4 (sum 25/12).
	for k, w := range []float64{1, 0.5, 1.0 / 3, 0.25} {
		want := 400 * w / (25.0 / 12)
		got := float64(counts["g"+string(rune('0'+k))])
		if math.Abs(got-want) > 4*math.Sqrt(want) {
			t.Errorf("group %d: %v requests, want about %.0f", k, got, want)
		}
	}
}

func TestZipfUniformPick(t *testing.T) {
	gen, _ := NewPromptGen(DefaultTokenizer())
	pg, err := newPrefixGroups(gen, PrefixSpec{Groups: 10, Tokens: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	counts := make([]int, 10)
	for i := 0; i < 20000; i++ {
		counts[pg.pick(rng)]++
	}
	// Chi-square against uniform, 9 degrees of freedom: 99.9% quantile 27.9.
	var chi float64
	for _, c := range counts {
		chi += (float64(c) - 2000) * (float64(c) - 2000) / 2000
	}
	if chi > 27.9 {
		t.Errorf("uniform popularity chi2 %.1f: %v", chi, counts)
	}
}

func TestScheduleRateAndBursts(t *testing.T) {
	// Poisson at 10/s with ±30% sinusoidal bursts over 10 s: the mean rate
	// stays 10/s, and the first half-period (rate above average) gets more
	// arrivals than the second.
	s, err := newSchedule(ArrivalSpec{Process: "poisson", RatePerS: 10, BurstAmplitude: 0.3, BurstPeriod: Duration(10 * time.Second)}, 4)
	if err != nil {
		t.Fatal(err)
	}
	var first, second int
	var last time.Duration
	n := 20000
	for i := 0; i < n; i++ {
		at := s.next()
		if at < last {
			t.Fatal("schedule went backwards")
		}
		last = at
		if (at % (10 * time.Second)) < 5*time.Second {
			first++
		} else {
			second++
		}
	}
	rate := float64(n) / last.Seconds()
	if math.Abs(rate-10) > 0.3 {
		t.Errorf("mean rate %.2f, want 10", rate)
	}
	// Expected ratio (1 + 0.3*2/pi) / (1 - 0.3*2/pi) ≈ 1.47.
	ratio := float64(first) / float64(second)
	if ratio < 1.35 || ratio > 1.6 {
		t.Errorf("burst ratio %.2f, want about 1.47", ratio)
	}
}

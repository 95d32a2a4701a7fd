package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Dist is a distribution of token counts. In YAML it is either a number
// (fixed) or a mapping {dist: fixed|uniform|normal|lognormal, ...}. Draws are
// rounded and clamped to [Min, Max] (Max 0 = unbounded); Min defaults to 1.
type Dist struct {
	Kind   string  `yaml:"dist" json:"dist"`
	Value  int     `yaml:"value,omitempty" json:"value,omitempty"`   // fixed
	Min    int     `yaml:"min,omitempty" json:"min,omitempty"`       // uniform lower bound; clamp for all
	Max    int     `yaml:"max,omitempty" json:"max,omitempty"`       // uniform upper bound; clamp for all
	Mean   float64 `yaml:"mean,omitempty" json:"mean,omitempty"`     // normal
	Std    float64 `yaml:"std,omitempty" json:"std,omitempty"`       // normal
	Median float64 `yaml:"median,omitempty" json:"median,omitempty"` // lognormal: exp(mu)
	Sigma  float64 `yaml:"sigma,omitempty" json:"sigma,omitempty"`   // lognormal: sd of log
}

// Fixed returns a fixed distribution.
func FixedDist(n int) Dist { return Dist{Kind: "fixed", Value: n} }

// Validate checks the parameters; what names the field for the message.
func (d Dist) Validate(what string) error {
	switch d.Kind {
	case "fixed":
		if d.Value < 1 {
			return fmt.Errorf("%s: fixed value must be at least 1, got %d", what, d.Value)
		}
	case "uniform":
		if d.Min < 1 || d.Max < d.Min {
			return fmt.Errorf("%s: uniform needs 1 <= min <= max, got min %d max %d", what, d.Min, d.Max)
		}
	case "normal":
		if !(d.Mean >= 1) || !(d.Std >= 0) {
			return fmt.Errorf("%s: normal needs mean >= 1 and std >= 0, got mean %v std %v", what, d.Mean, d.Std)
		}
	case "lognormal":
		if !(d.Median >= 1) || !(d.Sigma >= 0) {
			return fmt.Errorf("%s: lognormal needs median >= 1 and sigma >= 0, got median %v sigma %v", what, d.Median, d.Sigma)
		}
	case "":
		if d == (Dist{}) {
			return fmt.Errorf("%s is required: a number of tokens, or {dist: uniform|normal|lognormal, ...}", what)
		}
		return fmt.Errorf("%s: missing dist (fixed, uniform, normal or lognormal)", what)
	default:
		return fmt.Errorf("%s: unknown dist %q (want fixed, uniform, normal or lognormal)", what, d.Kind)
	}
	if d.Min < 0 || (d.Max > 0 && d.Max < d.Min) {
		return fmt.Errorf("%s: bounds min %d max %d are inconsistent", what, d.Min, d.Max)
	}
	return nil
}

// Draw samples one value.
func (d Dist) Draw(rng *rand.Rand) int {
	var x float64
	switch d.Kind {
	case "fixed":
		return d.Value
	case "uniform":
		return d.Min + rng.IntN(d.Max-d.Min+1)
	case "normal":
		x = d.Mean + d.Std*rng.NormFloat64()
	case "lognormal":
		x = d.Median * math.Exp(d.Sigma*rng.NormFloat64())
	}
	n := int(math.Round(x))
	lo := max(d.Min, 1)
	if n < lo {
		n = lo
	}
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return n
}

// MeanValue is the distribution's mean before clamping (for docs and plans).
func (d Dist) MeanValue() float64 {
	switch d.Kind {
	case "fixed":
		return float64(d.Value)
	case "uniform":
		return float64(d.Min+d.Max) / 2
	case "normal":
		return d.Mean
	case "lognormal":
		return d.Median * math.Exp(d.Sigma*d.Sigma/2)
	}
	return 0
}

func (d Dist) String() string {
	switch d.Kind {
	case "fixed":
		return fmt.Sprint(d.Value)
	case "uniform":
		return fmt.Sprintf("uniform %d..%d", d.Min, d.Max)
	case "normal":
		return fmt.Sprintf("normal mean %g std %g%s", d.Mean, d.Std, d.bounds())
	case "lognormal":
		return fmt.Sprintf("lognormal median %g sigma %g%s", d.Median, d.Sigma, d.bounds())
	}
	return d.Kind
}

func (d Dist) bounds() string {
	var parts []string
	if d.Min > 0 {
		parts = append(parts, fmt.Sprintf("min %d", d.Min))
	}
	if d.Max > 0 {
		parts = append(parts, fmt.Sprintf("max %d", d.Max))
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, " ")
}

// UnmarshalYAML accepts a bare number as a fixed distribution.
func (d *Dist) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v int
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: want a token count or a {dist: ...} mapping, got %q", n.Line, n.Value)
		}
		*d = FixedDist(v)
		return nil
	}
	type plain Dist
	var p plain
	if err := decodeStrict(n, &p); err != nil {
		return err
	}
	*d = Dist(p)
	return nil
}

// decodeStrict decodes a mapping node rejecting unknown keys, naming the line.
func decodeStrict(n *yaml.Node, v any) error {
	if n.Kind == yaml.MappingNode {
		known := yamlFieldNames(v)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !known[k.Value] {
				return fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
			}
		}
	}
	return n.Decode(v)
}

// ParseDist reads a distribution from the command line: "N" or "fixed:N";
// "uniform:MIN,MAX"; "normal:MEAN,STD[,MIN,MAX]"; "lognormal:MEDIAN,SIGMA[,MIN,MAX]"
// — the same distributions as a scenario's YAML, MIN and MAX clamping
// the draws (0: none).
func ParseDist(spec string) (Dist, error) {
	s := strings.TrimSpace(spec)
	kind, args, hasKind := strings.Cut(s, ":")
	if !hasKind {
		kind, args = "fixed", s
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	var nums []float64
	for _, a := range strings.Split(args, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(a), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return Dist{}, fmt.Errorf("distribution %q: %q is not a number (want e.g. normal:500,100 or uniform:100,500)", spec, a)
		}
		nums = append(nums, v)
	}
	whole := func(v float64) (int, bool) { return int(v), v == math.Trunc(v) && math.Abs(v) < 1<<31 }
	var d Dist
	switch kind {
	case "fixed":
		n, ok := whole(nums[0])
		if len(nums) != 1 || !ok {
			return Dist{}, fmt.Errorf("distribution %q: fixed takes one whole number of tokens", spec)
		}
		d = FixedDist(n)
	case "uniform":
		lo, ok1 := whole(nums[0])
		if len(nums) != 2 || !ok1 {
			return Dist{}, fmt.Errorf("distribution %q: uniform takes MIN,MAX (whole numbers)", spec)
		}
		hi, ok2 := whole(nums[1])
		if !ok2 {
			return Dist{}, fmt.Errorf("distribution %q: uniform takes MIN,MAX (whole numbers)", spec)
		}
		d = Dist{Kind: "uniform", Min: lo, Max: hi}
	case "normal", "lognormal":
		if len(nums) != 2 && len(nums) != 4 {
			return Dist{}, fmt.Errorf("distribution %q: %s takes two parameters and optionally MIN,MAX", spec, kind)
		}
		d = Dist{Kind: kind}
		if kind == "normal" {
			d.Mean, d.Std = nums[0], nums[1]
		} else {
			d.Median, d.Sigma = nums[0], nums[1]
		}
		if len(nums) == 4 {
			lo, ok1 := whole(nums[2])
			hi, ok2 := whole(nums[3])
			if !ok1 || !ok2 {
				return Dist{}, fmt.Errorf("distribution %q: MIN and MAX are whole numbers of tokens", spec)
			}
			d.Min, d.Max = lo, hi
		}
	default:
		return Dist{}, fmt.Errorf("distribution %q: unknown kind %q (want fixed, uniform, normal or lognormal)", spec, kind)
	}
	if err := d.Validate("distribution " + strconv.Quote(spec)); err != nil {
		return Dist{}, err
	}
	return d, nil
}

// RangeDist is vLLM's random dataset length: uniform over
// [⌊n·(1−ratio)⌋, ⌈n·(1+ratio)⌉] (at least 1), ratio in [0, 1); ratio 0 is n
// fixed.
func RangeDist(n int, ratio float64) (Dist, error) {
	if !(ratio >= 0 && ratio < 1) {
		return Dist{}, fmt.Errorf("range ratio %v must be in [0, 1)", ratio)
	}
	if n < 1 {
		return Dist{}, fmt.Errorf("length %d must be at least 1", n)
	}
	if ratio == 0 {
		return FixedDist(n), nil
	}
	lo := max(int(math.Floor(float64(n)*(1-ratio))), 1)
	hi := max(int(math.Ceil(float64(n)*(1+ratio))), lo)
	return Dist{Kind: "uniform", Min: lo, Max: hi}, nil
}

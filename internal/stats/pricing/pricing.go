package pricing

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ttft-dev/ttft/internal/yamlerr"
)

//go:embed prices.yaml
var defaultYAML []byte

// APIPrice is a hosted API's list price in USD per million tokens.
type APIPrice struct {
	Input  float64 `yaml:"input" json:"input"`
	Output float64 `yaml:"output" json:"output"`
}

// List is a price list. Keys are normalised (lower case, '_' and ' ' as
// '-').
type List struct {
	GPUs map[string]float64  `yaml:"gpus" json:"gpus"`
	APIs map[string]APIPrice `yaml:"apis" json:"apis"`
}

// Norm normalises a GPU or model name for lookup.
func Norm(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	return strings.NewReplacer("_", "-", " ", "-").Replace(s)
}

// Default returns the embedded list (hosted API prices; GPU prices come
// from the simulator's catalog, merged in by the caller).
func Default() *List {
	l, err := Parse(bytes.NewReader(defaultYAML), "embedded prices.yaml")
	if err != nil {
		panic(err) // build-time invariant, checked by a test
	}
	return l
}

// Parse reads a price list in YAML (the format of prices.yaml) or CSV with
// the header kind,name,price[,output]: "gpu,a10g,1.01" is USD per
// GPU-hour, "api,gpt-4o,2.5,10" USD per million input and output tokens.
func Parse(r io.Reader, name string) (*List, error) {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	first := strings.TrimSpace(strings.SplitN(strings.TrimPrefix(string(b), "\ufeff"), "\n", 2)[0])
	if strings.HasPrefix(strings.ToLower(first), "kind,") {
		return parseCSV(b, name)
	}
	var raw struct {
		GPUs map[string]float64  `yaml:"gpus"`
		APIs map[string]APIPrice `yaml:"apis"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w (want YAML with gpus: {name: usd_per_gpu_hour} and apis: {name: {input: usd_per_m, output: usd_per_m}}, or CSV kind,name,price,output)", yamlerr.Clean(name, err))
	}
	l := &List{GPUs: map[string]float64{}, APIs: map[string]APIPrice{}}
	for k, v := range raw.GPUs {
		if err := check(v); err != nil {
			return nil, fmt.Errorf("%s: gpus.%s: %w", name, k, err)
		}
		l.GPUs[Norm(k)] = v
	}
	for k, v := range raw.APIs {
		if err := check(v.Input); err != nil {
			return nil, fmt.Errorf("%s: apis.%s.input: %w", name, k, err)
		}
		if err := check(v.Output); err != nil {
			return nil, fmt.Errorf("%s: apis.%s.output: %w", name, k, err)
		}
		l.APIs[Norm(k)] = v
	}
	return l, nil
}

func check(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("price %v is not a non-negative number", v)
	}
	return nil
}

func parseCSV(b []byte, name string) (*List, error) {
	cr := csv.NewReader(bytes.NewReader(b))
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	recs, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	l := &List{GPUs: map[string]float64{}, APIs: map[string]APIPrice{}}
	for i, rec := range recs[1:] {
		line := i + 2
		if len(rec) < 3 {
			return nil, fmt.Errorf("%s:%d: want kind,name,price[,output]", name, line)
		}
		nums := make([]float64, 0, 2)
		for _, f := range rec[2:min(len(rec), 4)] {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || check(v) != nil {
				return nil, fmt.Errorf("%s:%d: price %q is not a non-negative number", name, line, f)
			}
			nums = append(nums, v)
		}
		switch strings.ToLower(strings.TrimSpace(rec[0])) {
		case "gpu":
			l.GPUs[Norm(rec[1])] = nums[0]
		case "api":
			if len(nums) < 2 {
				return nil, fmt.Errorf("%s:%d: an api price needs input and output USD per million tokens", name, line)
			}
			l.APIs[Norm(rec[1])] = APIPrice{Input: nums[0], Output: nums[1]}
		default:
			return nil, fmt.Errorf("%s:%d: kind %q is neither gpu nor api", name, line, rec[0])
		}
	}
	return l, nil
}

// Merge copies other's entries over l's.
func (l *List) Merge(other *List) {
	for k, v := range other.GPUs {
		l.GPUs[k] = v
	}
	for k, v := range other.APIs {
		l.APIs[k] = v
	}
}

// GPU returns the USD per GPU-hour for name.
func (l *List) GPU(name string) (float64, bool) {
	v, ok := l.GPUs[Norm(name)]
	return v, ok
}

// API returns the hosted price for a model. A dated model name such as
// "gpt-4-turbo-2024-04-09" falls back to the longest listed prefix.
func (l *List) API(model string) (APIPrice, bool) {
	m := Norm(model)
	if p, ok := l.APIs[m]; ok {
		return p, true
	}
	best, bestLen := APIPrice{}, 0
	for k, p := range l.APIs {
		if strings.HasPrefix(m, k+"-") && len(k) > bestLen {
			best, bestLen = p, len(k)
		}
	}
	return best, bestLen > 0
}

package k8s

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"text/template"
)

//go:embed bench-job.yaml.tmpl db-secret.example.yaml
var files embed.FS

// DefaultMilliCPUPerStream is the CPU a stream costs the load generator,
// in millicores: ttft bench measured 54–69 µs of whole-process CPU (user +
// system) per token event at 1,000 streams (issue 18's profile), and a
// stream of a fast deployment receives about 100 token events per second,
// so ≈ 7 millicores per stream; a pod is given at least 250.
const DefaultMilliCPUPerStream = 7.0

// JobParams are what the Job is rendered from.
type JobParams struct {
	Name      string // Job name (default ttft-bench-RUNID)
	Namespace string // default "default"
	RunID     string // the run's ID, shared by every shard
	Shards    int
	Image     string
	// Args are `ttft`'s arguments, starting with "bench"; the shard flags
	// are left to the environment.
	Args []string
	// Secret and SecretKey name the Secret holding the database URL.
	Secret, SecretKey string
	// Streams is the run's concurrency: the most requests in flight at
	// once over all shards.
	Streams           int
	MilliCPUPerStream float64
}

type jobView struct {
	JobParams
	ArgsJSON          string
	StreamsPerShard   int
	CPU, CPULimit     string
	Memory            string
	MilliCPUPerStream string
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Resources sizes one shard: CPU from the streams it drives, memory from
// a base plus a share per stream (buffers, records kept in memory).
func Resources(streams, shards int, milliPerStream float64) (perShard int, cpu, cpuLimit, memory string) {
	perShard = (streams + shards - 1) / max(shards, 1)
	milli := max(250, int(math.Ceil(float64(perShard)*milliPerStream)))
	mem := 256 + (perShard*256+1023)/1024 // MiB: 256 KiB per stream
	return perShard, fmt.Sprintf("%dm", milli), fmt.Sprintf("%dm", 2*milli), fmt.Sprintf("%dMi", mem)
}

// RenderJob writes the Indexed Job for p.
func RenderJob(p JobParams) ([]byte, error) {
	if p.Namespace == "" {
		p.Namespace = "default"
	}
	if p.Secret == "" {
		p.Secret = "ttft-db"
	}
	if p.SecretKey == "" {
		p.SecretKey = "url"
	}
	if p.MilliCPUPerStream <= 0 {
		p.MilliCPUPerStream = DefaultMilliCPUPerStream
	}
	if p.Name == "" {
		p.Name = "ttft-bench-" + p.RunID
	}
	switch {
	case p.Shards < 1:
		return nil, fmt.Errorf("a Job of %d shards", p.Shards)
	case !dnsLabel.MatchString(p.RunID) || len(p.RunID) > 63:
		return nil, fmt.Errorf("run ID %q must be a DNS label (lower-case letters, digits, dashes) to name the Job", p.RunID)
	case !dnsLabel.MatchString(p.Name) || len(p.Name) > 63:
		return nil, fmt.Errorf("Job name %q must be a DNS label of at most 63 characters", p.Name)
	case !dnsLabel.MatchString(p.Namespace):
		return nil, fmt.Errorf("namespace %q must be a DNS label", p.Namespace)
	case p.Image == "" || strings.ContainsAny(p.Image, " \n\"'"):
		return nil, fmt.Errorf("image %q", p.Image)
	case len(p.Args) == 0 || p.Args[0] != "bench":
		return nil, fmt.Errorf("the container runs `ttft bench ...`; got args %q", p.Args)
	case !dnsLabel.MatchString(p.Secret) && !strings.Contains(p.Secret, "."):
		return nil, fmt.Errorf("secret name %q", p.Secret)
	}
	// JSON strings are YAML flow scalars: quoting every argument keeps a
	// flag value such as "yes", "1e3" or "a: b" a string.
	args, err := json.Marshal(p.Args)
	if err != nil {
		return nil, err
	}
	v := jobView{JobParams: p, ArgsJSON: string(args), MilliCPUPerStream: fmt.Sprintf("%g", p.MilliCPUPerStream)}
	v.StreamsPerShard, v.CPU, v.CPULimit, v.Memory = Resources(p.Streams, p.Shards, p.MilliCPUPerStream)
	tmpl, err := template.ParseFS(files, "bench-job.yaml.tmpl")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("rendering the Job: %w", err)
	}
	return b.Bytes(), nil
}

// SecretExample is the example Secret's manifest.
func SecretExample() []byte {
	b, _ := files.ReadFile("db-secret.example.yaml")
	return b
}

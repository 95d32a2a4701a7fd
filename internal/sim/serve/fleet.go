package serve

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// FleetFile is the YAML form of a heterogeneous fleet:
//
//	replicas:
//	  - {model: llama-3.1-8b, gpu: h100-sxm, count: 2}
//	  - {model: llama-3-70b, gpu: a100-80gb, tensor_parallel_size: 4, kv_cache_dtype: fp8}
type FleetFile struct {
	Replicas []Config `yaml:"replicas"`
}

// ParseFleet reads a fleet file, expanding each entry's count.
func ParseFleet(b []byte) ([]Config, error) {
	var f FleetFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parsing fleet YAML: %w", err)
	}
	if len(f.Replicas) == 0 {
		return nil, fmt.Errorf("fleet YAML lists no replicas")
	}
	var out []Config
	for i, r := range f.Replicas {
		if r.Model == "" || r.GPU == "" {
			return nil, fmt.Errorf("fleet YAML replicas[%d]: model and gpu are required", i)
		}
		if r.Count < 0 {
			return nil, fmt.Errorf("fleet YAML replicas[%d]: count must not be negative", i)
		}
		n := max(1, r.Count)
		r.Count = 0
		for j := 0; j < n; j++ {
			out = append(out, r)
		}
	}
	return out, nil
}

// StartFleet starts one server per config. When the first config's address
// has a fixed port P, configs without an address get P+1, P+2, … on the
// same host; otherwise each takes a free loopback port. On error the
// servers already started are closed.
func StartFleet(ctx context.Context, cfgs []Config) ([]*Server, error) {
	if len(cfgs) == 0 {
		return nil, fmt.Errorf("a fleet needs at least one replica")
	}
	host, basePort := "127.0.0.1", 0
	if a := cfgs[0].Addr; a != "" {
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("fleet address %q: %w", a, err)
		}
		host = h
		basePort, _ = strconv.Atoi(p)
	}
	var out []*Server
	for i, c := range cfgs {
		if c.Addr == "" || (i > 0 && c.Addr == cfgs[0].Addr) {
			port := 0
			if basePort > 0 {
				port = basePort + i
			}
			c.Addr = net.JoinHostPort(host, strconv.Itoa(port))
		}
		if c.Seed == 0 {
			c.Seed = int64(i + 1) // replicas with jitter must not move in lockstep
		}
		s, err := Start(ctx, c)
		if err != nil {
			for _, o := range out {
				_ = o.Close()
			}
			if len(cfgs) == 1 {
				return nil, err // one server: no fleet to name
			}
			return nil, fmt.Errorf("fleet replica %d (%s on %s): %w", i, c.Model, c.GPU, err)
		}
		out = append(out, s)
	}
	return out, nil
}

package record

import "time"

// ManifestSchema versions manifest.json.
const ManifestSchema = "ttft.manifest/v1.0"

// Manifest says how a run was made, so it can be repeated and compared.
type Manifest struct {
	Schema      string            `json:"schema"`
	RunID       string            `json:"run_id,omitempty"`
	Tool        string            `json:"tool"`
	ToolVersion string            `json:"tool_version"`
	Command     string            `json:"command"` // bench | sim run | sweep
	Args        []string          `json:"args,omitempty"`
	Flags       map[string]string `json:"flags,omitempty"`
	Source      string            `json:"source"` // bench | sim
	Target      string            `json:"target,omitempty"`
	API         string            `json:"api,omitempty"`
	Model       string            `json:"model,omitempty"`
	Scenario    string            `json:"scenario,omitempty"`
	Host        Host              `json:"host"`
	Started     time.Time         `json:"started"`
	Ended       time.Time         `json:"ended,omitzero"`
	// Labels are free-form facts for analyses: gpu, gpus, replicas, sweep
	// parameter values (concurrency, prompt_tokens, ...).
	Labels map[string]string `json:"labels,omitempty"`
	// Server holds what the target reported about itself (/v1/models
	// entries, version endpoints, response headers such as "server").
	Server map[string]any `json:"server,omitempty"`
	// Interrupted is true when the run was stopped before its end.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Host describes the machine that ran the client.
type Host struct {
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
}

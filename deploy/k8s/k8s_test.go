package k8s

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeJob decodes strictly: an unknown or misplaced field (a typo the API
// server would drop or refuse) fails.
func decodeJob(t *testing.T, b []byte) *batchv1.Job {
	t.Helper()
	var j batchv1.Job
	if err := yaml.UnmarshalStrict(b, &j); err != nil {
		t.Fatalf("rendered Job does not decode strictly into batch/v1 Job: %v\n%s", err, b)
	}
	return &j
}

func TestRenderedJobDecodesStrictly(t *testing.T) {
	cases := []struct {
		name    string
		p       JobParams
		cpu     string
		perPod  int
		wantErr string
	}{
		{"four shards", JobParams{RunID: "run-1", Shards: 4, Image: "ttft:dev", Streams: 1000,
			Args: []string{"bench", "--target", "http://vllm:8000", "--rate", "50", "--label", "note=yes: really", "-n", "1e3"}}, "1750m", 250, ""},
		{"small run gets the floor", JobParams{RunID: "r", Shards: 2, Image: "ttft:dev", Streams: 8, Args: []string{"bench"}}, "250m", 4, ""},
		{"bad run id", JobParams{RunID: "Run_1", Shards: 2, Image: "i", Args: []string{"bench"}}, "", 0, "DNS label"},
		{"not bench", JobParams{RunID: "r", Shards: 2, Image: "i", Args: []string{"sim", "serve"}}, "", 0, "ttft bench"},
		{"no shards", JobParams{RunID: "r", Shards: 0, Image: "i", Args: []string{"bench"}}, "", 0, "shards"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := RenderJob(c.p)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			j := decodeJob(t, b)
			s := j.Spec
			if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
				t.Fatalf("completion mode %v, want Indexed", s.CompletionMode)
			}
			if *s.Completions != int32(c.p.Shards) || *s.Parallelism != int32(c.p.Shards) {
				t.Fatalf("completions %d parallelism %d, want %d", *s.Completions, *s.Parallelism, c.p.Shards)
			}
			pod := s.Template.Spec
			if pod.RestartPolicy != corev1.RestartPolicyNever || len(pod.Containers) != 1 {
				t.Fatalf("pod spec %+v", pod)
			}
			ctr := pod.Containers[0]
			if strings.Join(ctr.Args, "\x00") != strings.Join(c.p.Args, "\x00") {
				t.Fatalf("args %q, want %q", ctr.Args, c.p.Args)
			}
			env := map[string]corev1.EnvVar{}
			for _, e := range ctr.Env {
				env[e.Name] = e
			}
			if env["TTFT_RUN_ID"].Value != c.p.RunID || env["TTFT_SHARD_COUNT"].Value == "" {
				t.Fatalf("env %+v", ctr.Env)
			}
			if ref := env["TTFT_DB"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "ttft-db" || ref.SecretKeyRef.Key != "url" {
				t.Fatalf("TTFT_DB must come from the Secret: %+v", env["TTFT_DB"])
			}
			if got := ctr.Resources.Requests.Cpu().String(); got != c.cpu {
				t.Fatalf("CPU request %s, want %s", got, c.cpu)
			}
			if per, _, _, _ := Resources(c.p.Streams, c.p.Shards, DefaultMilliCPUPerStream); per != c.perPod {
				t.Fatalf("%d streams per pod, want %d", per, c.perPod)
			}
		})
	}
}

func TestSecretExampleDecodesStrictly(t *testing.T) {
	var s corev1.Secret
	if err := yaml.UnmarshalStrict(SecretExample(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "ttft-db" || s.StringData["url"] == "" {
		t.Fatalf("secret %+v", s)
	}
}

package cli

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"
)

func TestRenderK8sJob(t *testing.T) {
	code, stdout, stderr := runCLI(t, "bench", "--render-k8s", "-", "--k8s-shards", "3", "--run-id", "r-42", "--target", "http://vllm:8000",
		"-c", "12", "-n", "300", "--db", "postgres://u:secret@db/x", "-o", "/tmp/x", "--label", "gpu=h100", "--no-probe", "--ignore-eos")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if strings.Contains(stdout, "u:secret@") {
		t.Fatal("the database URL leaked into the manifest: it belongs in the Secret")
	}
	var j batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(stdout), &j); err != nil {
		t.Fatalf("strict decode: %v\n%s", err, stdout)
	}
	if *j.Spec.Completions != 3 || j.Name != "ttft-bench-r-42" {
		t.Fatalf("job %s with %d completions", j.Name, *j.Spec.Completions)
	}
	want := []string{"bench", "--target", "http://vllm:8000", "-c", "12", "-n", "300", "--label", "gpu=h100", "--no-probe", "--ignore-eos"}
	if got := j.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
		t.Fatalf("pod args %q, want %q", got, want)
	}
	if code, _, stderr := runCLI(t, "bench", "--render-k8s", "-", "--k8s-shards", "16", "-c", "8"); code != 2 || !strings.Contains(stderr, "cannot be split") {
		t.Fatalf("8 workers over 16 shards: exit %d %s", code, stderr)
	}
}

func TestPodArgsDropsTheShardsOwnFlags(t *testing.T) {
	cmd := newBenchCmd(&Env{})
	fs := cmd.Flags()
	cases := []struct{ in, want []string }{
		{[]string{"bench", "--shard=1/2", "--db", "x", "-n", "5"}, []string{"bench", "-n", "5"}},
		{[]string{"bench", "--out=/d", "--quiet", "--run-id", "r"}, []string{"bench", "--quiet"}},
		{[]string{"bench", "--num-prompts", "7", "--k8s-image", "i:1"}, []string{"bench", "--num-prompts", "7"}},
	}
	for _, c := range cases {
		if got := podArgs(fs, c.in); !slices.Equal(got, c.want) {
			t.Errorf("podArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

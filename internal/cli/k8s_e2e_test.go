package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// envPodArgs carries a pod's command line into TestK8sPodProcess, the
// test binary re-executed as the pod's `ttft`.
const envPodArgs = "TTFT_K8S_POD_ARGS"

// TestK8sPodProcess is not a test on its own: TestK8sIndexedJobEndToEnd
// runs the test binary with it as each pod's container process.
func TestK8sPodProcess(t *testing.T) {
	raw := os.Getenv(envPodArgs)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(Main(context.Background(), Env{Args: args, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
}

// TestK8sIndexedJobEndToEnd renders a sharded run as an Indexed Job, applies
// it to a real control plane (etcd, kube-apiserver, the real Job controller
// in kube-controller-manager, a kwok node), runs each pod the Job
// controller creates as a local process with the pod's own environment
// (JOB_COMPLETION_INDEX from the controller, the database URL from the
// Secret) against a live simulator and PostgreSQL, and checks that the Job
// completes and that the merged run is the single-process run's.
func TestK8sIndexedJobEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane and PostgreSQL")
	}
	kube := testutil.StartKube(t)
	dsn := testutil.Postgres(t)
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	srv, err := serve.Start(context.Background(), serve.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const n, shards, runID = 90, 3, "k8s-run-1"
	load := []string{"bench", "--target", srv.URL(), "--model", srv.ModelName(), "--rate", "150", "--arrival", "gamma", "--burstiness", "0.5",
		"--seed", "5", "-n", strconv.Itoa(n), "--max-tokens", "8", "--prompt-tokens", "64", "--no-progress", "--no-probe"}
	base := map[string]string{"HOME": t.TempDir(), "GOGC": "100"}
	singleDir := filepath.Join(t.TempDir(), "single")
	if code, stdout, stderr := cliEnv(base, append(load, "--out", singleDir, "--no-store")...); code != 0 {
		t.Fatalf("single run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	single, err := record.ReadJSONL(filepath.Join(singleDir, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(single, func(i, j int) bool { return single[i].Index < single[j].Index })

	jobFile := filepath.Join(t.TempDir(), "job.yaml")
	render := append(append([]string(nil), load...), "--render-k8s", jobFile, "--k8s-shards", strconv.Itoa(shards), "--run-id", runID, "--k8s-image", "ttft:test")
	if code, stdout, stderr := cliEnv(base, render...); code != 0 {
		t.Fatalf("render: exit %d\n%s\n%s", code, stdout, stderr)
	}
	manifest, err := os.ReadFile(jobFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: ttft-db\nstringData:\n  url: %q\n", dsn)
	if err := kube.Apply(ctx, "default", []byte(secret)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Apply(ctx, "default", manifest); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // pods run concurrently
	indexes := map[string]bool{}
	job, err := kube.RunJobPods(ctx, "default", "ttft-bench-"+runID, func(ctx context.Context, pod *corev1.Pod, argv, env []string) error {
		if len(argv) == 0 || argv[0] != "ttft" {
			return fmt.Errorf("container command %q is not ttft", argv)
		}
		args, _ := json.Marshal(argv[1:])
		data := t.TempDir() // the pod's emptyDir at /var/lib/ttft
		penv := []string{envPodArgs + "=" + string(args), "HOME=" + data, "PATH=" + os.Getenv("PATH")}
		for _, e := range env {
			if strings.HasPrefix(e, "TTFT_DATA_DIR=") {
				e = "TTFT_DATA_DIR=" + data
			}
			if strings.HasPrefix(e, "JOB_COMPLETION_INDEX=") {
				mu.Lock()
				indexes[e] = true
				mu.Unlock()
			}
			penv = append(penv, e)
		}
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestK8sPodProcess$")
		cmd.Env = penv
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	complete := false
	for _, c := range job.Status.Conditions {
		complete = complete || c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
	}
	if !complete || job.Status.Succeeded != shards {
		t.Fatalf("job status %+v", job.Status)
	}
	if len(indexes) != shards {
		t.Fatalf("pods saw completion indexes %v, want %d distinct", indexes, shards)
	}
	shardedBench{dsn: dsn, runID: runID, count: shards, requests: n}.check(t, single)
}

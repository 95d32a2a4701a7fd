package cli

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSimCalibrateRecoversHostProfile: runs made by the simulator with a
// host profile the default does not know (vllm-4vcpu: 20 ms per request,
// 3.8 ms per request in flight) are calibrated from the default vllm
// profile; the runs held out of the fit are predicted within 15 %, and the
// written catalog loads in sim run.
func TestSimCalibrateRecoversHostProfile(t *testing.T) {
	dir := t.TempDir()
	var runs []string
	for _, c := range []int{1, 2, 4, 8, 16} {
		out := filepath.Join(dir, fmt.Sprintf("c%d", c))
		code, stdout, stderr := runCLI(t, "sim", "run", "--engine-profile", "vllm-4vcpu", "--model", "qwen2.5-0.5b", "--gpu", "l4",
			"--gpu-memory-utilization", "0.6", "--max-model-len", "8192", "--prompt-tokens", "256", "--max-tokens", "64", "--ignore-eos",
			"--concurrency", strconv.Itoa(c), "--requests", strconv.Itoa(10*c+20), "--warmup", strconv.Itoa(c), "--ramp-up", "1s", "--no-store", "--out", out)
		if code != 0 {
			t.Fatalf("sim run c=%d: exit %d\n%s\n%s", c, code, stdout, stderr)
		}
		runs = append(runs, out)
	}
	yml := filepath.Join(dir, "cal.yaml")
	args := append([]string{"sim", "calibrate", "--model", "qwen2.5-0.5b", "--gpu", "l4", "--gpu-memory-utilization", "0.6", "--max-model-len", "8192", "--out", yml}, runs...)
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("calibrate: exit %d\n%s\n%s", code, stdout, stderr)
	}
	m := regexp.MustCompile(`held-out median \|TTFT error\| ([0-9.]+)%`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no held-out error in:\n%s", stdout)
	}
	if e, _ := strconv.ParseFloat(m[1], 64); e > 15 {
		t.Errorf("held-out median TTFT error %.1f%%, want ≤ 15%%:\n%s", e, stdout)
	}
	code, stdout, stderr = runCLI(t, "sim", "run", "--catalog", yml, "--engine-profile", "calibrated", "--model", "qwen2.5-0.5b", "--gpu", "l4",
		"--max-model-len", "8192", "--prompt-tokens", "256", "--max-tokens", "8", "-c", "2", "-n", "4", "--no-store", "--out", filepath.Join(dir, "check"))
	if code != 0 || !strings.Contains(stdout, "ttft_ms") {
		t.Fatalf("sim run with the calibrated catalog: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

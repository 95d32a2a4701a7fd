package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/gguf"
)

func runModelCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, args...)
}

func TestModelSynthCLI(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	mf := filepath.Join(dir, "Modelfile")
	args := []string{"model", "synth", "-o", p, "--modelfile", mf, "--dim", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--ff", "64", "--ctx", "256", "--vocab", "512", "--seed", "9", "--name", "tiny"}
	code, stdout, stderr := runModelCLI(t, args...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "wrote "+p) || !strings.Contains(stdout, "ollama create tiny -f "+mf) {
		t.Errorf("stdout: %s", stdout)
	}
	f, err := gguf.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{"llama.embedding_length": uint32(32), "llama.block_count": uint32(1), "llama.attention.head_count_kv": uint32(1),
		"llama.context_length": uint32(256), "general.name": "tiny", "ttft.synth.seed": uint64(9)} {
		if got, _ := f.Get(key); got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	text, err := os.ReadFile(mf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(text), "FROM "+p+"\n") || !strings.Contains(string(text), "PARAMETER num_ctx 256") {
		t.Errorf("Modelfile:\n%s", text)
	}
	// Same flags, same bytes, also through stdout.
	first, _ := os.ReadFile(p)
	code, again, stderr := runModelCLI(t, append([]string{"model", "synth", "-o", "-"}, args[6:]...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if again != string(first) {
		t.Errorf("-o - wrote %d bytes differing from the file's %d", len(again), len(first))
	}
	// inspect reads it back.
	code, stdout, stderr = runModelCLI(t, "model", "inspect", p)
	if code != ExitOK || !strings.Contains(stdout, "blk.0.ffn_down.weight") || !strings.Contains(stdout, `general.architecture = "llama"`) {
		t.Errorf("inspect exit %d: %s %s", code, stdout, stderr)
	}
}

func TestModelCLIErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"model", "synth"}, "-o/--output is required"},
		{[]string{"model", "synth", "-o", filepath.Join(dir, "x.gguf"), "--dim", "30"}, "dim 30 is not a multiple of heads 4"},
		{[]string{"model", "synth", "-o", filepath.Join(dir, "x.gguf"), "--vocab", "10"}, "vocab 10 is below the minimum"},
		{[]string{"model", "synth", "-o", "-", "--modelfile", "M"}, "--modelfile needs a file"},
		{[]string{"model", "synth", "-o", filepath.Join(dir, "no", "such", "x.gguf")}, "cannot write"},
		{[]string{"model", "inspect", bad}, bad},
		{[]string{"model", "synth", "--dim", "abc"}, "invalid argument"},
	} {
		code, _, stderr := runModelCLI(t, tc.args...)
		if code != ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, ExitUsage, tc.want)
		}
	}
}

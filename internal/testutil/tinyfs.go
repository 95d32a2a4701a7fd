package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TinyFS mounts a tmpfs of size bytes on a new temporary directory, so a
// test can fill a real file system and see ENOSPC as users do. It needs
// root (CI runs as root); elsewhere it skips or fails per Missing.
func TinyFS(t testing.TB, size int) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		Missing(t, "root, to mount a small tmpfs", "run the test as root, as .ci/run does")
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		Missing(t, "a small tmpfs mount", fmt.Sprintf("mount -t tmpfs failed: %v: %s", err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

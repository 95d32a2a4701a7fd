package sched

import (
	"os/exec"
	"strings"
	"testing"
)

// The scheduler must not depend on net/http, so that an Envoy ext_proc
// endpoint picker can reuse it without an HTTP stack.
func TestNoNetHTTP(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" {
			t.Fatal("package sched depends on net/http")
		}
	}
}

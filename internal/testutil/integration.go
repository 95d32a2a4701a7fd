package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns "component absent" skips
// into failures. .ci/run sets it; CI=true has the same effect.
const RequireEnv = "TTFT_REQUIRE_INTEGRATION"

// Strict reports whether missing integration components must fail tests.
func Strict() bool {
	return os.Getenv(RequireEnv) == "1" || os.Getenv("CI") == "true"
}

// Missing skips the test with a clear message, or fails it under CI.
func Missing(t testing.TB, what, howToGet string) {
	t.Helper()
	if Strict() {
		t.Fatalf("%s is required (%s=1 or CI=true) but absent: %s", what, RequireEnv, howToGet)
	}
	t.Skipf("skipping: %s not found (%s); set %s=1 to make this a failure", what, howToGet, RequireEnv)
}

// Binary finds an executable for an integration test: first the environment
// variable envVar (a path), then name on PATH. If absent it skips or fails
// per Missing.
func Binary(t testing.TB, envVar, name, howToGet string) string {
	t.Helper()
	if envVar != "" {
		if p := os.Getenv(envVar); p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	Missing(t, name, howToGet)
	return ""
}

package cli

import (
	"strings"
	"testing"
)

// TestLiveEvalEPPPolicies: "epp:POLICY" runs a fleet through the Endpoint
// Picker behind the Envoy stand-in, beside the gateway's runs, and prints
// the comparison; what the picker cannot run is a usage error.
func TestLiveEvalEPPPolicies(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"admission through the picker", []string{"--policies", "epp:slo-predictive+reject"}, ExitUsage, "", "Endpoint Picker"},
		{"unknown policy", []string{"--policies", "epp:nope"}, ExitUsage, "", "unknown policy"},
		{"side by side", []string{"--fleets", "two", "--policies", "slo-predictive,epp:slo-predictive", "--seeds", "1", "--requests", "60"}, 0,
			"| two   | slo-predictive | ", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.code == 0 && testing.Short() {
				t.Skip("live run")
			}
			code, stdout, stderr := runCLI(t, append([]string{"gateway", "live-eval"}, c.args...)...)
			if code != c.code || !strings.Contains(stdout, c.stdout) || !strings.Contains(stderr, c.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout, stderr)
			}
			if c.code == 0 && !strings.Contains(stdout, "within 5%") {
				t.Errorf("no comparison table:\n%s", stdout)
			}
		})
	}
}

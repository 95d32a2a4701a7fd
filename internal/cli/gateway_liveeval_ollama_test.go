package cli

import (
	"strings"
	"testing"
)

// The real-engine fleets need the ollama binary and are their own
// evaluation: asking for them otherwise is a usage error, before anything
// starts.
func TestLiveEvalOllamaUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"fleet without binary", []string{"--fleets", "ollama"}, `fleet "ollama" needs --ollama PATH`},
		{"with admission", []string{"--ollama", "/nonexistent/ollama", "--admission"}, "--ollama has fleets of its own"},
		{"with predictor", []string{"--ollama", "/nonexistent/ollama", "--predictor"}, "--ollama has fleets of its own"},
		{"unknown fleet", []string{"--ollama", "/nonexistent/ollama", "--fleets", "ollama-nine"}, "ollama-three"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCLI(t, append([]string{"gateway", "live-eval"}, tt.args...)...)
			if code != ExitUsage || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errs, ExitUsage, tt.want)
			}
		})
	}
}

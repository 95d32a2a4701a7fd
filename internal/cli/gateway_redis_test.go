package cli

import (
	"io"
	"testing"
)

// --redis turns shared state on for a --backend gateway (and overrides a
// file's shared_state.redis); the config's defaults apply to it.
func TestGatewayRedisFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"off", []string{"--backend", "http://127.0.0.1:1"}, ""},
		{"on", []string{"--backend", "http://127.0.0.1:1", "--redis", "redis://127.0.0.1:6379/2"}, "redis://127.0.0.1:6379/2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := &Env{Stderr: io.Discard, Getenv: func(string) string { return "" }}
			cmd := newGatewayCmd(env)
			if err := cmd.Flags().Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			o := &gatewayOptions{}
			o.backends, _ = cmd.Flags().GetStringArray("backend")
			o.redis, _ = cmd.Flags().GetString("redis")
			o.listen, _ = cmd.Flags().GetString("listen")
			cfg, err := o.config(env, cmd.Flags())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SharedState.Redis != tc.want {
				t.Errorf("shared_state.redis = %q, want %q", cfg.SharedState.Redis, tc.want)
			}
			if tc.want != "" && (cfg.SharedState.KeyPrefix == "" || cfg.SharedState.TTL == 0) {
				t.Errorf("defaults not applied: %+v", cfg.SharedState)
			}
		})
	}
}

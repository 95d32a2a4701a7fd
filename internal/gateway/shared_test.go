package gateway

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSharedStateConfig(t *testing.T) {
	const backends = "backends:\n  - name: a\n    url: http://127.0.0.1:1\n"
	for _, tc := range []struct {
		name, yaml, err string
		want            SharedState
	}{
		{"off", backends, "", SharedState{}},
		{"defaults", backends + "shared_state:\n  redis: redis://127.0.0.1:6379/0\n", "",
			SharedState{Redis: "redis://127.0.0.1:6379/0", TTL: Duration(10 * time.Minute), KeyPrefix: "ttft:gateway:"}},
		{"set", backends + "shared_state:\n  redis: rediss://r:6380/1\n  ttl: 90s\n  key_prefix: \"fleet-a:\"\n", "",
			SharedState{Redis: "rediss://r:6380/1", TTL: Duration(90 * time.Second), KeyPrefix: "fleet-a:"}},
		{"load not shared", backends + "shared_state:\n  redis: redis://127.0.0.1:6379/0\n  share_load: false\n", "",
			SharedState{Redis: "redis://127.0.0.1:6379/0", TTL: Duration(10 * time.Minute), KeyPrefix: "ttft:gateway:", ShareLoad: new(false)}},
		{"bad scheme", backends + "shared_state:\n  redis: http://127.0.0.1:6379\n", "gw.yaml:5: shared_state.redis: must be a redis://", SharedState{}},
		{"short ttl", backends + "shared_state:\n  redis: redis://127.0.0.1:6379\n  ttl: 10ms\n", "gw.yaml:6: shared_state.ttl: must be at least 1s", SharedState{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig("gw.yaml", []byte(tc.yaml), nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.SharedState, tc.want) {
				t.Errorf("shared_state = %+v, want %+v", cfg.SharedState, tc.want)
			}
		})
	}
}

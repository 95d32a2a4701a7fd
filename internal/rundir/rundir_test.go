package rundir

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	got := RedactArgs([]string{"bench", "--api-key", "k1", "--api-key=k2", "-H", "Authorization: Bearer x", "--header=x-api-key: y", "-H", "X-Ok: 1"})
	b, _ := json.Marshal(got)
	for _, s := range []string{"k1", "k2", "Bearer x", "x-api-key: y"} {
		if strings.Contains(string(b), s) {
			t.Errorf("%s leaked: %s", s, b)
		}
	}
	if !strings.Contains(string(b), "X-Ok: 1") {
		t.Errorf("harmless header redacted: %s", b)
	}
}

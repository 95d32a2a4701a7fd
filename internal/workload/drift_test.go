package workload

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
)

func TestTurnDrift(t *testing.T) {
	var recs []record.Record
	for s := 0; s < 10; s++ {
		for turn := 1; turn <= 3; turn++ {
			recs = append(recs, record.Record{Turn: turn, TTFTMs: float64(80 + 20*turn + s),
				PromptTokens: 100 * turn, PromptTokensUsage: 100*turn + 5, CachedPromptTokens: 100 * (turn - 1)})
		}
	}
	recs = append(recs, record.Record{Turn: 2, ErrorClass: "timeout"}, record.Record{Turn: 1, Warmup: true, TTFTMs: 1}, record.Record{TTFTMs: 5})
	ts := TurnDrift(recs)
	if len(ts) != 3 {
		t.Fatalf("%d turns", len(ts))
	}
	if ts[0].Turn != 1 || ts[0].Requests != 10 || ts[1].Requests != 11 || ts[1].Failed != 1 {
		t.Fatalf("%+v", ts)
	}
	if ts[0].TTFTP50 != 104.5 || ts[2].TTFTP50 != 144.5 || ts[1].PromptTokens != 200 {
		t.Fatalf("%+v", ts)
	}
	if ts[0].CachedShare != 0 || ts[2].CachedShare != 200.0/305 {
		t.Fatalf("cached %v %v", ts[0].CachedShare, ts[2].CachedShare)
	}
	var b bytes.Buffer
	PrintTurnDrift(&b, ts)
	if !strings.Contains(b.String(), "+38%") {
		t.Errorf("table lacks turn 3 drift:\n%s", b.String())
	}
	if TurnDrift([]record.Record{{TTFTMs: 3}}) != nil {
		t.Error("records without turns gave a drift table")
	}
}

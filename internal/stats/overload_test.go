package stats

import (
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// A closed loop's TTFT settling after its first burst is not a growing
// queue; the same TTFTs on a schedule are.
func TestOverloadClosedLoopBurstIsNotAQueue(t *testing.T) {
	t0 := time.Unix(0, 0)
	var recs []record.Record
	for i := range 100 {
		sent := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		ttft := 50.0
		if i >= 25 {
			ttft = 400 // later requests share the engine with decoding ones
		}
		recs = append(recs, record.Record{Intended: sent, Sent: sent, TTFTMs: ttft})
	}
	var s record.Summary
	if !ClosedLoop(recs) {
		t.Fatal("records sent at their intended times are a closed loop")
	}
	if why := Overload(&s, recs, 0); why != "" {
		t.Errorf("closed loop flagged: %s", why)
	}
	for i := range recs {
		recs[i].Intended = recs[i].Sent.Add(-time.Millisecond)
	}
	if ClosedLoop(recs) || Overload(&s, recs, 0) == "" {
		t.Error("the same TTFT rise on a schedule is not flagged")
	}
}

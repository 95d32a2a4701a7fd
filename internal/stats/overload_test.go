package stats

import (
	"strings"
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

// The schedule-lag warning means something: a few ms of jitter on a busy
// client is quiet, lateness comparable to the TTFT is not.
func TestScheduleLagWarningThreshold(t *testing.T) {
	t0 := time.Unix(0, 0)
	run := func(lagMs float64) []string {
		var recs []record.Record
		for i := range 200 {
			intended := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			sent := intended.Add(time.Duration(lagMs * float64(time.Millisecond) * float64(i%10) / 9))
			r := record.Record{Intended: intended, Sent: sent, FirstToken: sent.Add(30 * time.Millisecond), End: sent.Add(60 * time.Millisecond), OutputEvents: 2}
			r.Finalize()
			recs = append(recs, r)
		}
		return Summarize(recs, SummaryOptions{NoCI: true, OpenLoop: true}).Warnings
	}
	hasLag := func(ws []string) bool {
		for _, w := range ws {
			if strings.HasPrefix(w, "schedule lag P99") {
				return true
			}
		}
		return false
	}
	if ws := run(6); hasLag(ws) {
		t.Errorf("6 ms of lag on a 30 ms TTFT warned: %v", ws)
	}
	if ws := run(40); !hasLag(ws) {
		t.Errorf("40 ms of lag on a 30 ms TTFT did not warn: %v", ws)
	}
}

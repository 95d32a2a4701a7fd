package sched

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// slowObserver stretches each timed plugin by a millisecond, so that
// simultaneous decisions would overlap if nothing ordered them.
type slowObserver struct{}

func (slowObserver) Observe(float64) { time.Sleep(time.Millisecond) }

// TestSimultaneousPicksSeeEachOther: eight requests of one new prompt
// group arrive at once. Each decision must see the ones before it — their
// prefix inserted, their requests counted in flight — so prefix affinity
// keeps the group on one backend and least-outstanding spreads the eight
// two per backend, even with every plugin slowed so that unordered
// decisions would all read the same empty index and idle fleet.
func TestSimultaneousPicksSeeEachOther(t *testing.T) {
	text := strings.Repeat("a shared system prompt for one group of requests. ", 60)
	h := NewBlockHasher(DefaultBlockBytes)
	h.Text(text)
	blocks := h.Hashes()
	for _, tc := range []struct {
		policy string
		check  func(perBackend map[string]int) bool
		want   string
	}{
		{PrefixAffinity, func(m map[string]int) bool { return len(m) == 1 }, "all eight on one backend"},
		{LeastOutstanding, func(m map[string]int) bool {
			for _, n := range m {
				if n != 2 {
					return false
				}
			}
			return len(m) == 4
		}, "two on each of the four backends"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			clk := newClock()
			bs := backends("a", "b", "c", "d")
			s, err := New(Options{Policy: tc.policy, Now: clk.now, Seed: 7, Explore: -1,
				PluginLatency:      func(string, string) Observer { return slowObserver{} },
				PluginLatencyEvery: 1}, bs)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			start := make(chan struct{})
			tickets := make([]*Ticket, 8)
			errs := make([]error, 8)
			for i := range tickets {
				wg.Go(func() {
					<-start
					tickets[i], errs[i] = s.Pick(&Request{API: "openai", Model: "m", PromptTokens: len(text) / 4, Blocks: blocks})
				})
			}
			close(start)
			wg.Wait()
			per := map[string]int{}
			for i, tk := range tickets {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				per[tk.Backend.Name()]++
			}
			if !tc.check(per) {
				t.Fatalf("eight simultaneous picks went %v; want %s", per, tc.want)
			}
		})
	}
}

package liveeval

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/sloclass"
)

// The gateway's own scheduler (package sched, every decision made as the
// live gateway makes it, its clock injected) routing the stand-ins'
// offline replay (bounds_test.go) on a virtual clock: a run of a fleet
// takes milliseconds and has no host noise. What it leaves out is the
// HTTP hop, the host's timing and the scrapes' exact instants; the
// live suite stays the measure of record (docs/routing-evaluation.md,
// "The scheduler on the replay").

// schedEvent is a first token reaching the gateway, a slot freed at a
// stand-in, or an answer's end reaching the gateway, at a virtual time.
type schedEvent struct {
	at   float64
	kind int // eventFirst, eventFree, eventDone, eventHeaders
	b    int
	r    *boundReq
	t    *sched.Ticket
	hit  int
}

const (
	eventFirst = iota
	eventFree
	eventDone
	// eventHeaders: the response's headers, which the stand-in sends
	// when the request arrives (standin.Config.LateHeaders unset).
	eventHeaders
)

type schedHeap []schedEvent

func (h schedHeap) Len() int { return len(h) }
func (h schedHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].kind < h[j].kind
}
func (h schedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *schedHeap) Push(x any)   { *h = append(*h, x.(schedEvent)) }
func (h *schedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// schedRun replays one seed of a closed-loop stand-in fleet through the
// gateway's scheduler under policy, and returns the scored TTFTs, ms.
// The scheduler hears what the live gateway hears: each request's first
// token and end, the cached tokens its answer reports, and every second
// (the live suite's scrape interval, the first before any request) the
// stand-ins' metrics.
func schedRun(t testing.TB, f Fleet, seed uint64, policy string) []float64 {
	late := 0.0
	if v := os.Getenv("LIVEEVAL_REPLAY_LATE_MS"); v != "" {
		late, _ = strconv.ParseFloat(v, 64)
	}
	// A host's timers wake late: each of the stand-in's sleeps (the
	// prefill, then one per token) overshoots.
	var lateness func() float64
	if late > 0 {
		rng := rand.New(rand.NewPCG(seed, 0x6c617465))
		lateness = func() float64 { return late * rng.ExpFloat64() }
	}
	base := time.Unix(1_700_000_000, 0)
	now := 0.0
	clock := func() time.Time { return base.Add(time.Duration(now * float64(time.Millisecond))) }
	bs := make([]*boundBackend, len(f.StandIns))
	sbs := make([]*sched.Backend, len(f.StandIns))
	idx := map[*sched.Backend]int{}
	next := 0
	for i, c := range f.StandIns {
		bs[i] = newBoundBackend(c)
		bs[i].arrived = &next
		sbs[i] = sched.NewBackend(sched.BackendSpec{Name: fmt.Sprintf("b%d", i)})
		idx[sbs[i]] = i
	}
	s, err := sched.New(sched.Options{Policy: policy, Seed: seed, Now: clock}, sbs)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _ := boundRequests(t, f, seed)
	src := newSource(f.Workload, seed)
	sreqs := make([]sched.Request, len(reqs))
	h := sched.NewBlockHasher(sched.DefaultBlockBytes)
	for i := range reqs {
		q, err := src.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h.Reset()
		for _, m := range q.Messages {
			h.Segment(m.Role, m.Content)
		}
		sreqs[i] = sched.Request{API: "openai", Model: f.Model(), PromptTokens: h.Bytes() / 4,
			Blocks: append([]uint64(nil), h.Hashes()...), SLO: f.SLO, Class: sloclass.Chat, MaxTokens: q.MaxTokens}
	}
	queried, hits := make([]float64, len(bs)), make([]float64, len(bs))
	scrape := func() {
		for i, b := range bs {
			if b.cfg.NoMetrics {
				continue
			}
			es := sched.UnknownEngineStats()
			es.Waiting, es.Running = float64(len(b.queue)), float64(b.running)
			es.KVUsage = 0
			if b.cache != nil {
				es.KVUsage = float64(b.cache.Len()) / float64(b.cfg.CacheBlocks)
			}
			es.CacheTokens = float64(b.cfg.CacheBlocks * b.cfg.BlockChars / 4)
			es.PrefixQueries, es.PrefixHits = queried[i], hits[i]
			sbs[i].SetEngineStats(es)
		}
	}
	scrape()
	nextScrape := 1000.0
	var ev schedHeap
	var ttfts []float64
	tickets := map[*boundReq]*sched.Ticket{}
	start := func(b int) {
		be := bs[b]
		for be.running < be.cfg.Slots && len(be.queue) > 0 {
			r, hit, pf, end := be.take(now, lateness)
			queried[b] += float64(r.chars / 4)
			hits[b] += float64(hit * be.cfg.BlockChars / 4)
			// A backend behind a network round trip (Config.Network)
			// hears of the request later: its answer reaches the
			// gateway that much after the stand-in wrote it; its slot
			// frees when the stand-in is done.
			net := ms(be.cfg.Network)
			if r.i >= f.Workload.Warmup {
				ttfts = append(ttfts, now+pf-r.sent+boundNet+net)
			}
			heap.Push(&ev, schedEvent{at: now + pf + boundNet + net, kind: eventFirst, b: b, r: r})
			heap.Push(&ev, schedEvent{at: end, kind: eventFree, b: b, r: r, hit: hit})
			if net > 0 {
				heap.Push(&ev, schedEvent{at: end + net, kind: eventDone, b: b, r: r, hit: hit})
			}
		}
	}
	send := func() {
		if next >= len(reqs) {
			return
		}
		r := reqs[next]
		sr := &sreqs[next]
		next++
		r.sent = now
		tk, err := s.Pick(sr)
		if err != nil {
			t.Fatalf("pick: %v", err)
		}
		tickets[r] = tk
		b := idx[tk.Backend]
		if !bs[b].cfg.LateHeaders {
			heap.Push(&ev, schedEvent{at: now + ms(bs[b].cfg.Network) + 0.1, kind: eventHeaders, b: b, r: r})
		}
		bs[b].queue = append(bs[b].queue, r)
		start(b)
	}
	for range f.Workload.Concurrency {
		send()
	}
	for ev.Len() > 0 {
		e := heap.Pop(&ev).(schedEvent)
		for e.at >= nextScrape {
			now = nextScrape
			scrape()
			nextScrape += 1000
		}
		now = e.at
		tk := tickets[e.r]
		be := bs[e.b]
		done := func() {
			tk.ObserveCached(e.hit*be.cfg.BlockChars/4, e.r.chars/4)
			tk.End(sched.OutcomeOK)
			delete(tickets, e.r)
		}
		switch e.kind {
		case eventHeaders:
			if tk != nil {
				tk.HeadersAt(clock())
			}
		case eventFirst:
			tk.FirstTokenAt(clock())
		case eventFree:
			be.running--
			for k, x := range be.ends {
				if x == e.at {
					be.ends = append(be.ends[:k], be.ends[k+1:]...)
					break
				}
			}
			if be.cfg.Network == 0 {
				// Heard at once: the end and the next send in one step,
				// as before backends had a distance.
				done()
				start(e.b)
				send()
				continue
			}
			start(e.b)
		case eventDone:
			done()
			send()
		}
	}
	return ttfts
}

// schedPooled is a policy's pooled P99 and mean over seeds 1..n.
func schedPooled(t testing.TB, f Fleet, n int, policy string) (p99, mean float64) {
	return pooledOver(n, func(seed uint64) []float64 { return schedRun(t, f, seed, policy) })
}

// TestSchedReplay prints, per fleet the replay runs, the gateway's
// policies' pooled P99 on the replay and the default's ratios to
// round-robin and to the better single signal: the suite's verdicts
// without the host's noise, in seconds. LIVEEVAL_REPLAY_POLICY names a
// policy to put in the default's place, LIVEEVAL_REPLAY_SEEDS how many
// seeds (default 8, the live suite's), LIVEEVAL_REPLAY_LATE_MS the mean
// of an exponential lateness added to each of the stand-ins' sleeps
// (a loaded host's timers wake late; 0.5 reproduces the live suite's
// ratios on the two-slot fleets, docs/routing-evaluation.md).
//
//	LIVEEVAL_BOUNDS=1 go test ./internal/gateway/liveeval -run TestSchedReplay -v
func TestSchedReplay(t *testing.T) {
	if os.Getenv("LIVEEVAL_BOUNDS") == "" {
		t.Skip("set LIVEEVAL_BOUNDS=1 to print the scheduler's replay (docs/routing-evaluation.md)")
	}
	seeds := 8
	if v := os.Getenv("LIVEEVAL_REPLAY_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LIVEEVAL_REPLAY_SEEDS=%q: want a number of seeds", v)
		}
		seeds = n
	}
	def := sched.SLOPredictive
	if p := os.Getenv("LIVEEVAL_REPLAY_POLICY"); p != "" {
		def = p
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| fleet | round-robin | least-outstanding | prefix affinity | %s | mean ms | ÷ round-robin | ÷ best single signal |\n|---|---|---|---|---|---|---|---|\n", def)
	fleets := boundFleets()
	if os.Getenv("LIVEEVAL_REPLAY_SET") == "6" {
		// The sixth held-out set's fleets the replay models: not the
		// shared prefills' processor, not open loops.
		fleets = slices.DeleteFunc(unseenFleets6(), func(f Fleet) bool {
			return f.Workload.Rate > 0 || slices.ContainsFunc(f.StandIns, func(c standin.Config) bool { return c.SharedPrefill })
		})
	}
	if v := os.Getenv("LIVEEVAL_REPLAY_FLEETS"); v != "" {
		want := strings.Split(v, ",")
		fleets = slices.DeleteFunc(fleets, func(f Fleet) bool { return !slices.Contains(want, f.Name) })
	}
	for _, f := range fleets {
		rr, _ := schedPooled(t, f, seeds, sched.RoundRobin)
		lo, _ := schedPooled(t, f, seeds, sched.LeastOutstanding)
		pa, _ := schedPooled(t, f, seeds, sched.PrefixAffinity)
		d, m := schedPooled(t, f, seeds, def)
		fmt.Fprintf(&out, "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", f.Name, rr, lo, pa, d, m, d/rr, d/math.Min(lo, pa))
	}
	t.Logf("pooled P99 ms over seeds 1–%d, the gateway's scheduler on the replay:\n%s", seeds, out.String())
}

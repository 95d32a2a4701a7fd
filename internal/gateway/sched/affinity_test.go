package sched

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestSLOAffinityPicker: the default policy keeps a prompt where its
// prefix is cached, and moves it only when that backend is predicted to
// miss the SLO while another meets it, or to be much slower than one that
// meets it.
func TestSLOAffinityPicker(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	tests := []struct {
		name string
		// per backend "home" (holds the prompt) then "other":
		// prediction base and per-token slope, queued tokens
		homeBase, homeTok, otherBase, otherTok float64
		homeQueue, otherQueue                  int64
		slo                                    time.Duration
		want, reason                           string
	}{
		{"stays with the cached prefix", 0.02, 2e-5, 0.02, 2e-5, 0, 0, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"stays through a short queue", 0.02, 2e-5, 0.02, 2e-5, 2000, 0, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"spills when home would miss the SLO", 0.02, 2e-5, 0.02, 2e-5, 20000, 0, 120 * time.Millisecond, "other", ReasonHeadroom},
		{"stays when no backend meets the SLO", 0.02, 2e-5, 0.02, 2e-5, 20000, 20000, 120 * time.Millisecond, "home", ReasonPrefixHit},
		{"leaves a much slower home", 0.2, 2e-4, 0.02, 2e-5, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			train(bs[0], 200, tt.homeBase, tt.homeTok, rng)
			train(bs[1], 200, tt.otherBase, tt.otherTok, rng)
			bs[0].Prefix().Insert(prompt)
			bs[0].queuedTokens.Add(tt.homeQueue)
			bs[1].queuedTokens.Add(tt.otherQueue)
			tk := pickPrompt(t, bs, clk.now, prompt, tt.slo)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, tt.reason)
			}
		})
	}
}

// A spill goes no further back in a destination's queue than one past
// the deepest queue the destination has returned a first token from: a
// prediction for a deeper queue extrapolates what it was never shown.
func TestSLOAffinitySpillWithinReach(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	for _, tt := range []struct {
		name            string
		inFlight, reach int64
		want, reason    string
	}{
		{"idle destination", 0, 0, "other", ReasonHeadroom},
		{"one past its reach", 1, 0, "other", ReasonHeadroom},
		{"beyond its reach: stays", 3, 0, "home", ReasonPrefixHit},
		{"a queue it has served from", 3, 2, "other", ReasonHeadroom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			train(bs[0], 200, 0.2, 2e-4, rng) // a much slower home
			train(bs[1], 200, 0.02, 2e-5, rng)
			bs[0].Prefix().Insert(prompt)
			bs[1].inFlight.Store(tt.inFlight)
			bs[1].noteReach(tt.reach)
			tk := pickPrompt(t, bs, newClock().now, prompt, 2*time.Second)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s), want %s (%s)", tk.Backend.Name(), tk.Reason, tt.want, tt.reason)
			}
		})
	}
	// A first token from behind k requests extends the reach to k.
	b := backends("x")[0]
	for _, k := range []int64{2, 1, 5, 3} {
		b.noteReach(k)
	}
	if r := b.reach.Load(); r != 5 {
		t.Errorf("reach %d after first tokens from behind 2, 1, 5, 3; want 5", r)
	}
}

// New prompt groups on a cold fleet (no prefix anywhere, one prior
// prediction for all) go to the backends in turn, not all to the first.
func TestSLOAffinitySpreadsNewGroups(t *testing.T) {
	clk := newClock()
	s := mustNew(t, SLOPredictive, clk, backends("a", "b", "c"))
	got := map[string]int{}
	for g := range 6 {
		tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)), SLO: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got[tk.Backend.Name()]++
	}
	for _, n := range []string{"a", "b", "c"} {
		if got[n] != 2 {
			t.Errorf("six new groups over three cold backends: %v, want two each", got)
			break
		}
	}
}

// New prompt groups on idle backends go where the prefix index holds
// least, and between backends holding as much to the faster: the
// groups' footprints stay even, and the odd one lands on a fast backend.
func TestSLOAffinityNewGroupFootprint(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ { // whatever the rotation's start
		bs := backends("fast1", "fast2", "slow")
		rng := rand.New(rand.NewPCG(seed, 3))
		train(bs[0], 200, 0.02, 2e-5, rng)
		train(bs[1], 200, 0.02, 2e-5, rng)
		train(bs[2], 200, 0.03, 3e-5, rng) // slower, not spillSlower times
		group := func(g int) []uint64 { return blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)) }
		bs[0].Prefix().Insert(group(100))
		bs[0].Prefix().Insert(group(101))
		bs[2].Prefix().Insert(group(102))
		s, err := New(Options{Policy: SLOPredictive, Now: newClock().now, Seed: seed, Explore: -1}, bs)
		if err != nil {
			t.Fatal(err)
		}
		// In index blocks: fast1 62 (two groups), slow 31, fast2 0; a new
		// group is 25. So fast2 (0), fast2 (25 < 31), slow (31 < 50),
		// fast2 (50 < 56 and 62).
		var got []string
		for g := range 4 {
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: group(g), SLO: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, tk.Backend.Name())
			tk.End(OutcomeOK) // idle again: load ties
		}
		if g := strings.Join(got, " "); g != "fast2 fast2 slow fast2" {
			t.Errorf("seed %d: four new groups went to %s; want fast2 fast2 slow fast2", seed, g)
		}
	}
}

// A seeded gateway places new groups alike every time it is given the
// same seed (the live evaluation compares policies on same-seed runs),
// and different seeds start the rotation at different backends.
func TestSLOAffinitySeededRotation(t *testing.T) {
	place := func(seed uint64) string {
		s, err := New(Options{Policy: SLOPredictive, Now: newClock().now, Seed: seed, Explore: -1}, backends("a", "b", "c", "d"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for g := range 6 {
			tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)), SLO: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tk.Backend.Name())
		}
		return strings.Join(out, "")
	}
	firsts := map[byte]bool{}
	for seed := uint64(1); seed <= 16; seed++ {
		p := place(seed)
		if q := place(seed); p != q {
			t.Fatalf("seed %d placed new groups %s, then %s", seed, p, q)
		}
		firsts[p[0]] = true
	}
	if len(firsts) < 3 {
		t.Errorf("16 seeds put the first new group on %d of 4 backends", len(firsts))
	}
}

// slotObserver is a replica's SharedObserver that only knows its slot.
type slotObserver struct{ rank, n int }

func (slotObserver) PrefixInserted(string, []uint64)        {}
func (slotObserver) CooldownOpen(string, string, time.Time) {}
func (o slotObserver) ReplicaSlot() (rank, n int)           { return o.rank, o.n }

// replicaScheduler is one replica's scheduler, with its own backends.
func replicaScheduler(t *testing.T, rank, n int, names ...string) *Scheduler {
	t.Helper()
	s, err := New(Options{Policy: SLOPredictive, Now: newClock().now, Seed: uint64(rank + 1), Explore: -1, Shared: slotObserver{rank, n}}, backends(names...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Replicas that know their slots, all starting cold at once and unable
// to see each other's requests yet, place their first new groups evenly
// over the backends: counts differ by at most one.
func TestSLOAffinityStaggersReplicas(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f"}
	tests := []struct{ replicas, backends, each int }{
		{4, 4, 2}, {2, 4, 2}, {4, 2, 1}, {3, 4, 2}, {4, 6, 1}, {3, 6, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d replicas %d backends %d picks each", tt.replicas, tt.backends, tt.each), func(t *testing.T) {
			got := map[string]int{}
			g := 0
			for r := range tt.replicas {
				s := replicaScheduler(t, r, tt.replicas, names[:tt.backends]...)
				for range tt.each {
					g++
					tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)), SLO: time.Second})
					if err != nil {
						t.Fatal(err)
					}
					got[tk.Backend.Name()]++
				}
			}
			lo, hi := tt.replicas*tt.each, 0
			for _, n := range names[:tt.backends] {
				lo, hi = min(lo, got[n]), max(hi, got[n])
			}
			if hi-lo > 1 {
				t.Errorf("first picks per backend %v: uneven (%d to %d)", got, lo, hi)
			}
		})
	}
}

// What the replicas know of each other's load is a few milliseconds old:
// replicas deciding on the same view treat a backend one request busier
// than the least loaded as tied with it, and their staggered scans then
// send simultaneous new groups to different backends; a single gateway,
// whose view is exact, still takes the least loaded; and a backend two
// requests busier is avoided by all.
func TestSLOAffinityReplicaSlack(t *testing.T) {
	tests := []struct {
		name          string
		remoteA       int64
		replicas      int
		want0, want1  string // rank 0's and rank 1's pick
		singleGateway string
	}{
		{"one request apart: tied for replicas", 1, 2, "b", "a", "b"},
		{"two requests apart: least loaded", 2, 2, "b", "b", "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pick := func(s *Scheduler) string {
				// Both replicas see a's requests of a third replica.
				for _, b := range s.Backends() {
					if b.Name() == "a" {
						b.ImportInFlight(tt.remoteA)
					}
				}
				tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: blocksOf(strings.Repeat("a new group ", 200)), SLO: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				return tk.Backend.Name()
			}
			if got := pick(replicaScheduler(t, 0, tt.replicas, "a", "b")); got != tt.want0 {
				t.Errorf("replica 0 picked %s, want %s", got, tt.want0)
			}
			if got := pick(replicaScheduler(t, 1, tt.replicas, "a", "b")); got != tt.want1 {
				t.Errorf("replica 1 picked %s, want %s", got, tt.want1)
			}
			for range 4 { // whatever its random start
				if got := pick(mustNew(t, SLOPredictive, newClock(), backends("a", "b"))); got != tt.singleGateway {
					t.Errorf("a single gateway picked %s, want %s", got, tt.singleGateway)
				}
			}
		})
	}
}

// Where the engines publish their cache's size, a new prompt group goes
// to a backend whose cache the groups already placed there leave room
// for, even past a less loaded one whose cache they fill (fillLimit),
// and stays there while it is predicted to meet the SLO — unless the one
// with room is predicted more than spillSlower times slower and to miss
// the SLO, where the load decides as before.
func TestSLOAffinityNewGroupRoom(t *testing.T) {
	for _, tt := range []struct {
		name               string
		slowBase, slowPerT float64
		slo                time.Duration
		want               string
	}{
		// An SLO neither meets: no spill overrules the choice.
		{"1.5× slower", 0.03, 3e-5, 20 * time.Millisecond, "fast fast fast slow"},
		{"3× slower, over the SLO", 0.06, 6e-5, 20 * time.Millisecond, "fast fast fast fast"},
		// Both meet it: room decides, and no spill for speed moves the
		// group from the slower backend into the full cache.
		{"3× slower, within the SLO", 0.06, 6e-5, 200 * time.Millisecond, "fast fast fast slow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("fast", "slow")
			rng := rand.New(rand.NewPCG(5, 6))
			train(bs[0], 200, 0.02, 2e-5, rng)
			train(bs[1], 200, tt.slowBase, tt.slowPerT, rng)
			group := func(g int) []uint64 { return blocksOf(strings.Repeat(fmt.Sprint("group ", g, " "), 200)) }
			n := len(group(0))
			for _, b := range bs {
				es := UnknownEngineStats()
				es.CacheTokens = float64(4*n*DefaultBlockBytes/4) - 1 // room for three such groups within fillLimit, not four
				b.SetEngineStats(es)
			}
			s, err := New(Options{Policy: SLOPredictive, Now: newClock().now, Seed: 1, Explore: -1}, bs)
			if err != nil {
				t.Fatal(err)
			}
			bs[1].inFlight.Add(1) // slow is busier throughout
			var got []string
			for g := range 4 {
				tk, err := s.Pick(&Request{Model: "m", PromptTokens: 500, Blocks: group(g), SLO: tt.slo})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, tk.Backend.Name())
				tk.End(OutcomeOK)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("four new groups went to %s; want %s", g, tt.want)
			}
		})
	}
}

// spillPrompt is the prompt of the spill tests, of n blocks.
func spillPrompt() (prompt []uint64, n int) {
	prompt = blocksOf(strings.Repeat("shared system prompt ", 100))
	return prompt, len(prompt)
}

// placeResidents publishes b's KV size (0: unknown) and places k prompt
// groups of n blocks on it, in its prefix index and its capacity model.
func placeResidents(b *Backend, cacheTokens float64, k, n int) {
	es := UnknownEngineStats()
	if cacheTokens > 0 {
		es.CacheTokens = cacheTokens
	}
	b.SetEngineStats(es)
	for g := range k {
		blocks := blocksOf(strings.Repeat(fmt.Sprint("resident ", g, " "), 200))[:n]
		b.Prefix().InsertRoot(blocks)
		b.caps.insertRoot(blocks)
	}
}

// A request whose home holds most of its prompt leaves that slower home
// for a backend holding none of it only where the destination's cache
// has room for it (fillLimit): moved into a full cache, its prompt group
// evicts the groups living there, whose next requests miss. A
// destination already holding part of the prompt, a cache of unknown
// size, a home predicted to miss the SLO, a prompt mostly unique (its
// home holds under half) and a home past its slots (queuedSpill: the
// request would wait there for one) are not held back.
func TestSLOAffinitySpillNeedsRoom(t *testing.T) {
	prompt, n := spillPrompt()
	for _, tt := range []struct {
		name         string
		cacheTokens  float64 // the destination's published KV (0: unknown)
		residents    int     // prompt groups placed on the destination
		holdsPart    bool    // the destination's index holds the prompt's first half
		homeUnder    bool    // the home's index holds only the prompt's first 2/5
		homeQueue    int64   // tokens queued at home (enough: over the SLO)
		homeInFlight int64   // requests in flight at home, which has four slots
		slo          time.Duration
		want, reason string
	}{
		{"room: leaves the slower home", float64(8 * n * DefaultBlockBytes / 4), 1, false, false, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
		{"full: stays home", float64(4 * n * DefaultBlockBytes / 4), 3, false, false, 0, 0, 2 * time.Second, "home", ReasonPrefixHit},
		{"full, holding part: leaves", float64(4 * n * DefaultBlockBytes / 4), 3, true, false, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
		{"full, home holding under half: leaves", float64(4 * n * DefaultBlockBytes / 4), 3, false, true, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
		{"size unknown: leaves", 0, 3, false, false, 0, 0, 2 * time.Second, "other", ReasonHeadroom},
		{"full, home over the SLO: leaves", float64(4 * n * DefaultBlockBytes / 4), 3, false, false, 20000, 0, 2 * time.Second, "other", ReasonHeadroom},
		{"full, home within its slots: stays", float64(4 * n * DefaultBlockBytes / 4), 3, false, false, 0, 3, 2 * time.Second, "home", ReasonPrefixHit},
		{"full, home past its slots: leaves", float64(4 * n * DefaultBlockBytes / 4), 3, false, false, 0, 6, 2 * time.Second, "other", ReasonHeadroom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			if tt.homeInFlight > 0 {
				trainSlots(bs[0], 200, 0.2, 2e-4, 0.05, rng) // a much slower home
				bs[0].inFlight.Add(tt.homeInFlight)
				bs[0].noteReach(8)
				bs[1].noteReach(8)
			} else {
				train(bs[0], 200, 0.2, 2e-4, rng) // a much slower home
			}
			train(bs[1], 200, 0.02, 2e-5, rng)
			placeResidents(bs[1], tt.cacheTokens, tt.residents, n)
			if tt.holdsPart {
				bs[1].Prefix().Insert(prompt[:n/2])
				bs[1].caps.insert(prompt[:n/2])
			}
			if tt.homeUnder {
				bs[0].Prefix().Insert(prompt[:2*n/5])
			} else {
				bs[0].Prefix().Insert(prompt)
			}
			bs[0].queuedTokens.Add(tt.homeQueue)
			tk := pickPrompt(t, bs, newClock().now, prompt, tt.slo)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s; destination fill %.2f), want %s (%s)", tk.Backend.Name(), tk.Reason, bs[1].caps.fill(n), tt.want, tt.reason)
			}
		})
	}
}

// A home predicted over the SLO leaves for a backend holding none of the
// prompt, whose cache the groups living there fill, only where the move
// costs less than staying with the eviction it causes priced in
// (evictionPrice): a home at 52 ms beside a full backend at 37 ms for the
// prefill stays (37 + 37 > 52); into a cache with room, or of unknown
// size, it leaves.
func TestSLOAffinityEvictionPrice(t *testing.T) {
	prompt, n := spillPrompt()
	for _, tt := range []struct {
		name         string
		cacheTokens  float64 // the destination's published KV (0: unknown)
		want, reason string
	}{
		{"full: stays home", float64(4 * n * DefaultBlockBytes / 4), "home", ReasonPrefixHit},
		{"room: leaves", float64(16 * n * DefaultBlockBytes / 4), "other", ReasonHeadroom},
		{"size unknown: leaves", 0, "other", ReasonHeadroom},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			train(bs[0], 200, 0.05, 2e-5, rng)
			train(bs[1], 200, 0.025, 2e-5, rng)
			placeResidents(bs[1], tt.cacheTokens, 3, n)
			bs[0].Prefix().Insert(prompt)
			tk := pickPrompt(t, bs, newClock().now, prompt, 45*time.Millisecond)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s; destination fill %.2f), want %s (%s)", tk.Backend.Name(), tk.Reason, bs[1].caps.fill(n), tt.want, tt.reason)
			}
		})
	}
}

// A request no backend is predicted to serve within its SLO goes where it
// is predicted fastest when its home holds less than half of its prompt
// (a long document after a group's instructions), and stays home when
// the home holds most of it or is not much slower.
func TestSLOAffinityMissEverywhere(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	n := len(prompt)
	for _, tt := range []struct {
		name             string
		homeHolds        int     // leading blocks of the prompt in the home's index
		homeBase, homeTk float64 // the home's prediction: base and per-token slope
		want, reason     string
	}{
		{"under half at a slow home: fastest", 2 * n / 5, 0.2, 2e-4, "other", ReasonNoHeadroom},
		{"most of it at a slow home: stays", n, 0.2, 2e-4, "home", ReasonPrefixHit},
		{"under half at a home as fast: stays", 2 * n / 5, 0.02, 2e-5, "home", ReasonPrefixHit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			train(bs[0], 200, tt.homeBase, tt.homeTk, rng)
			train(bs[1], 200, 0.02, 2e-5, rng)
			bs[0].Prefix().Insert(prompt[:tt.homeHolds])
			tk := pickPrompt(t, bs, newClock().now, prompt, time.Millisecond) // met nowhere
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, tt.reason)
			}
		})
	}
}

// pickPrompt asks a fresh slo-predictive scheduler over bs (seeded, no
// exploration) where a 600-token request for prompt goes.
func pickPrompt(t *testing.T, bs []*Backend, now func() time.Time, prompt []uint64, slo time.Duration) *Ticket {
	t.Helper()
	s, err := New(Options{Policy: SLOPredictive, Now: now, Seed: 1, Explore: -1}, bs)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := s.Pick(&Request{Model: "m", PromptTokens: 600, Blocks: prompt, SLO: slo})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// trainSlots teaches b's predictors (the bound included) an engine of
// four slots: a request waits drain seconds for each request in flight
// past them, and prefills at perTok seconds per uncached token.
func trainSlots(b *Backend, n int, base, perTok, drain float64, rng *rand.Rand) {
	b.preds.bound.on.Store(true)
	for range n {
		f := Features{UncachedTokens: float64(rng.IntN(2000)), InFlight: float64(rng.IntN(8))}
		f.PromptTokens = f.UncachedTokens
		b.preds.observe(f, base+perTok*f.UncachedTokens+drain*max(0, f.InFlight-3))
	}
}

// A request whose home has more requests in flight than slots goes to a
// backend predicted missFaster times faster with its prompt uncached
// there, though the home is within the SLO and not spillSlower times
// slower (the rules before it kept it home); within its slots the home
// keeps it. Also where the destination meets the SLO only on average,
// its TTFTs spread too wide for their P95 to meet it (where answers are
// long, none did: fleet long-decode, docs/routing-evaluation.md), the
// home within the SLO on average (so that the mean fallback does not
// move it).
func TestSLOAffinityQueuedHome(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	for _, tt := range []struct {
		name         string
		homeInFlight int64
		wide         bool // the destination's TTFTs spread wide
		want, reason string
	}{
		{"past its slots: leaves", 5, false, "other", ReasonHeadroom},
		{"within its slots: stays", 3, false, "home", ReasonPrefixHit},
		{"past its slots, a wide spread there: leaves", 5, true, "other", ReasonHeadroom},
		{"within its slots, a wide spread there: stays", 3, true, "home", ReasonPrefixHit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			slo, otherInFlight := 500*time.Millisecond, int64(3)
			if !tt.wide {
				for _, b := range bs {
					trainSlots(b, 300, 0.005, 2e-5, 0.03, rng)
				}
				// The other is as busy as a home within its slots, so
				// that the linear predictor (which prices every request
				// in flight alike) does not call the home spillSlower
				// times slower: only the queue past the slots tells
				// them apart.
			} else {
				// Home: 5 ms cached, 10 ms per request waited for past
				// four slots: 25 ms at five in flight. Other: 17 ms for
				// the prompt uncached on average, its TTFTs spread over
				// a factor of five about that, so that their P95 is over
				// the SLO (28 ms).
				slo, otherInFlight = 28*time.Millisecond, 1
				trainSlots(bs[0], 300, 0.005, 2e-5, 0.01, rng)
				bs[1].preds.bound.on.Store(true)
				for range 300 {
					f := Features{UncachedTokens: float64(rng.IntN(2000)), InFlight: float64(rng.IntN(2))}
					f.PromptTokens = f.UncachedTokens
					bs[1].preds.observe(f, (0.005+2e-5*f.UncachedTokens)*(0.3+1.4*rng.Float64()))
				}
			}
			bs[0].Prefix().Insert(prompt)
			bs[0].inFlight.Add(tt.homeInFlight)
			bs[1].inFlight.Add(otherInFlight)
			for _, b := range bs {
				b.noteReach(8)
			}
			tk := pickPrompt(t, bs, newClock().now, prompt, slo)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v / P95 %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tk.Prediction.P95, tt.want, tt.reason)
			}
			if tt.wide && tt.want == "other" && tk.Prediction.P95 <= slo {
				t.Errorf("the other's predicted P95 %v is within the SLO: the test needs it over", tk.Prediction.P95)
			}
		})
	}
}

// When no backend is predicted to meet the SLO with its P95 margin (the
// TTFTs spread wide), a home predicted to miss it on average gives the
// request to a backend predicted to meet it on average and missFaster
// times faster; a home whose mean meets it keeps the request.
func TestSLOAffinityMeanFallback(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	for _, tt := range []struct {
		name         string
		homeBase     float64
		want, reason string
	}{
		{"home over the SLO: leaves", 0.2, "other", ReasonHeadroom},
		{"home within the SLO: stays", 0.012, "home", ReasonPrefixHit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			noisy := func(b *Backend, base float64) {
				for range 300 {
					f := Features{UncachedTokens: float64(rng.IntN(2000))}
					f.PromptTokens = f.UncachedTokens
					b.preds.observe(f, base*(0.4+1.2*rng.Float64()))
				}
			}
			noisy(bs[0], tt.homeBase)
			noisy(bs[1], 0.01)
			bs[0].Prefix().Insert(prompt)
			tk := pickPrompt(t, bs, newClock().now, prompt, 15*time.Millisecond)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v / P95 %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tk.Prediction.P95, tt.want, tt.reason)
			}
		})
	}
}

// A home past its slots whose queue bound prices the wait cheaply (its
// fit learnt that requests waited little) gives the request up when the
// answers holding its slots have just begun: the wait for a slot counts
// in full (slotTracker.slotWait), 60–70 ms here against a 17 ms prefill
// on a free backend. When they are nearly done it keeps it.
func TestSLOAffinityQueuedHomeSlotWait(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tt := range []struct {
		name         string
		age          time.Duration // how long the home's answers have run (of 100 ms)
		want, reason string
	}{
		{"answers just begun: leaves", ms(30), "other", ReasonHeadroom},
		{"answers nearly done: stays", ms(97), "home", ReasonPrefixHit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "other")
			rng := rand.New(rand.NewPCG(1, 2))
			for _, b := range bs {
				trainSlots(b, 300, 0.005, 2e-5, 0.001, rng)
				b.noteReach(8)
			}
			clk := newClock()
			home := &bs[0].slots
			fillTracker(home, clk.now(), ms(100), ms(5), []time.Duration{tt.age, tt.age - ms(1), tt.age - ms(2), tt.age - ms(3)}, []time.Duration{ms(1)})
			bs[0].inFlight.Add(5)
			bs[0].Prefix().Insert(prompt)
			tk := pickPrompt(t, bs, clk.now, prompt, 500*time.Millisecond)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				var w [nSlots]float64
				home.waits(clk.now(), &w)
				t.Errorf("picked %s (%s, predicted %v), want %s (%s); the home's waits %v", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, tt.reason, w)
			}
		})
	}
}

// A request leaving a home predicted to miss the SLO goes to a backend
// that will serve it within the SLO counting its wait for a slot: not to
// the one predicted fastest whose slots are all held by answers just
// begun (a wait of about 70 ms against a 60 ms SLO), but to the free one
// beside it. When those answers are nearly done, the fastest takes it.
// Under a generous SLO, where both would meet it and the home is only
// too slow, the free one still wins, priced with the full one's wait.
func TestSLOAffinitySpillDestinationSlotWait(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tt := range []struct {
		name string
		age  time.Duration // how long the full backend's answers have run (of 100 ms)
		slo  time.Duration
		want string
	}{
		{"answers just begun: the free backend", ms(30), ms(60), "free"},
		{"answers nearly done: the fastest", ms(97), ms(60), "full"},
		{"a generous SLO: the free backend, priced lower", ms(30), ms(500), "free"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "full", "free")
			rng := rand.New(rand.NewPCG(5, 6))
			trainSlots(bs[0], 300, 0.100, 2e-5, 0.001, rng)
			trainSlots(bs[1], 300, 0.004, 1e-5, 0.001, rng)
			trainSlots(bs[2], 300, 0.014, 1e-5, 0.001, rng)
			for _, b := range bs {
				b.noteReach(8)
			}
			clk := newClock()
			fillTracker(&bs[1].slots, clk.now(), ms(100), ms(5), []time.Duration{tt.age, tt.age - ms(1), tt.age - ms(2), tt.age - ms(3)}, nil)
			bs[1].inFlight.Add(4)
			bs[0].Prefix().Insert(prompt)
			tk := pickPrompt(t, bs, clk.now, prompt, tt.slo)
			if tk.Backend.Name() != tt.want || tk.Reason != ReasonHeadroom {
				var w [nSlots]float64
				bs[1].slots.waits(clk.now(), &w)
				t.Errorf("picked %s (%s, predicted %v), want %s (%s); the full backend's waits %v", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, ReasonHeadroom, w)
			}
		})
	}
}

// A request whose home's learnt cache capacity has evicted its prompt,
// while another backend's still holds most of it, goes there when that is
// predicted faster (fleet remote-fast: homes predicted to miss at ≈ 50 ms
// kept their requests beside far copies at 29, docs/routing-evaluation.md);
// it stays where the home still holds it, or where the backend holding it
// is predicted slower.
func TestSLOAffinityEvictedHome(t *testing.T) {
	prompt := blocksOf(strings.Repeat("shared system prompt ", 100))
	for _, tt := range []struct {
		name           string
		homeEvicted    bool
		holderInFlight int64
		want           string
		reason         string
	}{
		{"home evicted: the backend holding it", true, 0, "holder", ReasonPrefixHit},
		{"home still holds it", false, 0, "home", ReasonPrefixHit},
		{"the holder predicted slower", true, 7, "home", ReasonPrefixHit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bs := backends("home", "holder", "cold")
			rng := rand.New(rand.NewPCG(7, 8))
			for _, b := range bs {
				trainSlots(b, 300, 0.020, 2e-5, 0.004, rng)
				b.noteReach(8)
				b.caps.active.Store(0)
			}
			home, holder := bs[0], bs[1]
			home.Prefix().Insert(prompt)
			home.caps.insert(prompt)
			if tt.homeEvicted {
				var other []uint64
				for i := range 2 * capacityHypotheses[0] {
					other = append(other, uint64(i)*0x9e3779b97f4a7c15+1)
				}
				home.caps.insert(other)
			}
			holder.Prefix().Insert(prompt[:20])
			holder.caps.insert(prompt[:20])
			holder.inFlight.Add(tt.holderInFlight)
			clk := newClock()
			tk := pickPrompt(t, bs, clk.now, prompt, 60*time.Millisecond)
			if tk.Backend.Name() != tt.want || tk.Reason != tt.reason {
				t.Errorf("picked %s (%s, predicted %v), want %s (%s)", tk.Backend.Name(), tk.Reason, tk.Prediction.Mean, tt.want, tt.reason)
			}
		})
	}
}

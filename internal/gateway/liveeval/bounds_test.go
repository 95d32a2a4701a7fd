package liveeval

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/lru"
)

// The stand-ins' latency model, replayed offline in virtual time, to
// bound what any routing could reach on a fleet: policies that are given
// what the gateway can only estimate (each backend's exact wait for a
// slot and exact cache contents) and placements searched for with the
// whole run in view. It is the stand-in's own model (standin.Server.chat:
// FIFO slots, a block LRU looked up when a slot is taken, prefill per
// uncached character, decode per token, speed and drift) driven by the
// suite's own request sequence (source), closed loop. What it leaves out
// is the gateway, HTTP and the host: about a millisecond, added as a
// constant. docs/routing-evaluation.md, "What any placement could reach".

// boundNet is the gateway's and loopback's share of a live TTFT, ms.
const boundNet = 0.7

type boundReq struct {
	i, group, out int
	chars         int
	blocks        []uint64
	sent          float64
}

type boundBackend struct {
	cfg standin.Config
	// arrived is how many requests the fleet has been sent, the clock
	// the stand-ins' events are set on (standin.Config.DriftAfter); nil
	// is none.
	arrived *int
	cache   *lru.Set[uint64]
	running int
	queue   []*boundReq
	// ends are the running requests' end times, ms.
	ends []float64
}

func newBoundBackend(c standin.Config) *boundBackend {
	c = c.WithDefaults()
	b := &boundBackend{cfg: c}
	if c.CacheBlocks > 0 {
		b.cache = lru.NewSet[uint64](c.CacheBlocks)
	}
	return b
}

// factor is the stand-in's time factor at t (ms since the fleet
// started): its drift is set on the requests sent, not on t.
func (b *boundBackend) factor(t float64) float64 {
	f := 1 / b.cfg.Speed
	if b.cfg.DriftAfter > 0 && b.arrived != nil && *b.arrived >= b.cfg.DriftAfter {
		f *= b.cfg.DriftFactor
	}
	return f
}

func (b *boundBackend) hit(blocks []uint64) int {
	if b.cache == nil {
		return 0
	}
	h := 0
	for h < len(blocks) && b.cache.Contains(blocks[h]) {
		h++
	}
	return h
}

func (b *boundBackend) prefill(t float64, chars, hitBlocks int) float64 {
	return b.factor(t) * (ms(b.cfg.Overhead) + ms(b.cfg.PrefillPerKChar)*float64(chars-hitBlocks*b.cfg.BlockChars)/1000)
}

func (b *boundBackend) hold(t float64, r *boundReq, hitBlocks int) float64 {
	return b.prefill(t, r.chars, hitBlocks) + b.factor(t)*ms(b.cfg.DecodePerToken)*float64(r.out-1)
}

// ttft is r's exact TTFT were it sent to b at t: the FIFO wait for a
// slot behind the requests running and queued (each priced with the
// cache as it is now), then its prefill.
func (b *boundBackend) ttft(t float64, r *boundReq) float64 {
	free := make([]float64, 0, b.cfg.Slots)
	for range b.cfg.Slots - b.running {
		free = append(free, t)
	}
	free = append(free, b.ends...)
	slices.Sort(free)
	free = free[:b.cfg.Slots]
	for _, q := range b.queue {
		s := max(free[0], t)
		free[0] = s + b.hold(s, q, b.hit(q.blocks))
		slices.Sort(free)
	}
	s := max(free[0], t)
	return s - t + b.prefill(s, r.chars, b.hit(r.blocks))
}

// take gives the next request in line a slot at now, as the stand-in
// does: its cache looked up and touched, its prefill and its end (each
// sleep late by late(), when late is not nil). It returns the request,
// the blocks it found cached, its prefill and its end.
func (b *boundBackend) take(now float64, late func() float64) (r *boundReq, hit int, pf, end float64) {
	r = b.queue[0]
	b.queue = b.queue[1:]
	hit = b.hit(r.blocks)
	if b.cache != nil {
		for k := len(r.blocks) - 1; k >= 0; k-- {
			b.cache.Touch(r.blocks[k])
		}
	}
	pf = b.prefill(now, r.chars, hit)
	decode := b.factor(now) * ms(b.cfg.DecodePerToken) * float64(r.out-1)
	if late != nil {
		pf += late()
		for range r.out - 1 {
			decode += late()
		}
	}
	// The gateway hears an answer end after its first token.
	end = max(now+pf+decode, now+pf+boundNet)
	b.running++
	b.ends = append(b.ends, end)
	return r, hit, pf, end
}

// boundPolicy picks a backend for r at t.
type boundPolicy func(t float64, r *boundReq, bs []*boundBackend) int

// boundRequests is the fleet's request sequence for a seed, as the live
// suite sends it, with each prompt's block hashes as the stand-ins take
// them, and each group's full prefix blocks.
func boundRequests(t testing.TB, f Fleet, seed uint64) (reqs []*boundReq, prefixBlocks [][]uint64) {
	bc := 256
	if len(f.StandIns) > 0 && f.StandIns[0].BlockChars > 0 {
		bc = f.StandIns[0].BlockChars
	}
	src := newSource(f.Workload, seed)
	prefixBlocks = make([][]uint64, f.Workload.Groups)
	for i := range f.Workload.Warmup + f.Workload.Requests {
		req, err := src.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var p strings.Builder
		for _, m := range req.Messages {
			p.WriteString("<" + m.Role + ">" + m.Content + "\n")
		}
		s := p.String()
		hs := standin.BlockHashes(s, bc)
		n := len(hs)
		g := 0
		for g < f.Workload.Groups && groupLabel(g) != req.Group {
			g++
		}
		if prefixBlocks[g] == nil {
			pb := min((len("<system>")+len(req.Messages[0].Content))/bc, n)
			prefixBlocks[g] = hs[:pb]
		}
		reqs = append(reqs, &boundReq{i: i, group: g, out: req.MaxTokens, chars: len(s), blocks: hs})
	}
	return reqs, prefixBlocks
}

// boundRun replays one seed of a closed-loop fleet under a policy and
// returns the scored requests' TTFTs, ms.
func boundRun(t testing.TB, f Fleet, seed uint64, pol func(prefix [][]uint64) boundPolicy) []float64 {
	reqs, prefix := boundRequests(t, f, seed)
	p := pol(prefix)
	next := 0
	bs := make([]*boundBackend, len(f.StandIns))
	for i, c := range f.StandIns {
		bs[i] = newBoundBackend(c)
		bs[i].arrived = &next
	}
	var ends schedHeap // end events only
	var ttfts []float64
	start := func(b int, now float64) {
		be := bs[b]
		for be.running < be.cfg.Slots && len(be.queue) > 0 {
			r, _, pf, end := be.take(now, nil)
			if r.i >= f.Workload.Warmup {
				ttfts = append(ttfts, now+pf-r.sent+boundNet)
			}
			heap.Push(&ends, schedEvent{at: end, b: b})
		}
	}
	send := func(now float64) {
		if next >= len(reqs) {
			return
		}
		r := reqs[next]
		next++
		r.sent = now
		b := p(now, r, bs)
		bs[b].queue = append(bs[b].queue, r)
		start(b, now)
	}
	for range f.Workload.Concurrency {
		send(0)
	}
	for ends.Len() > 0 {
		e := heap.Pop(&ends).(schedEvent)
		be := bs[e.b]
		be.running--
		if k := slices.Index(be.ends, e.at); k >= 0 {
			be.ends = slices.Delete(be.ends, k, k+1)
		}
		start(e.b, e.at)
		send(e.at)
	}
	return ttfts
}

func boundP99(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(int(math.Ceil(0.99*float64(len(s))))-1, 0)]
}

// boundPooled is the pooled P99 and the mean over seeds 1..n.
func boundPooled(t testing.TB, f Fleet, n int, pol func([][]uint64) boundPolicy) (p99, mean float64) {
	return pooledOver(n, func(seed uint64) []float64 { return boundRun(t, f, seed, pol) })
}

// pooledOver is the pooled P99 and the mean of run's TTFTs over seeds
// 1..n.
func pooledOver(n int, run func(seed uint64) []float64) (p99, mean float64) {
	var all []float64
	for s := 1; s <= n; s++ {
		all = append(all, run(uint64(s))...)
	}
	sum := 0.0
	for _, x := range all {
		sum += x
	}
	return boundP99(all), sum / float64(len(all))
}

// noisyTTFT is b.ttft times a log-normal error of sigma drawn from rng.
func noisyTTFT(rng *rand.Rand, sigma float64) func(b *boundBackend, t float64, r *boundReq) float64 {
	return func(b *boundBackend, t float64, r *boundReq) float64 {
		x := b.ttft(t, r)
		if sigma > 0 {
			x *= math.Exp(sigma * rng.NormFloat64())
		}
		return x
	}
}

func load(b *boundBackend) int { return b.running + len(b.queue) }

func boundRoundRobin([][]uint64) boundPolicy {
	k := 0
	return func(_ float64, _ *boundReq, bs []*boundBackend) int { k++; return k % len(bs) }
}

// boundLeastOutstanding: fewest in flight, ties from a rotating start.
func boundLeastOutstanding([][]uint64) boundPolicy {
	k := 0
	return func(_ float64, _ *boundReq, bs []*boundBackend) int {
		k++
		best := -1
		for j := range bs {
			i := (k + j) % len(bs)
			if best < 0 || load(bs[i]) < load(bs[best]) {
				best = i
			}
		}
		return best
	}
}

// boundPrefixAffinity: the backend holding most of the prompt, else the
// least loaded (rotating ties), as the gateway's prefix-affinity policy.
func boundPrefixAffinity([][]uint64) boundPolicy {
	k := 0
	return func(_ float64, r *boundReq, bs []*boundBackend) int {
		k++
		best := -1
		for j := range bs {
			i := (k + j) % len(bs)
			if best < 0 {
				best = i
				continue
			}
			hi, hb := bs[i].hit(r.blocks), bs[best].hit(r.blocks)
			if hi > hb || hi == hb && load(bs[i]) < load(bs[best]) {
				best = i
			}
		}
		return best
	}
}

// resident counts the groups whose prefix b's cache holds to its last
// block (a prompt's blocks are touched last to first, so the LRU lets a
// prefix go from its end).
func resident(b *boundBackend, prefix [][]uint64) int {
	n := 0
	for _, p := range prefix {
		if len(p) > 0 && b.cache.Contains(p[len(p)-1]) {
			n++
		}
	}
	return n
}

// boundStatic sends every group to its backend in assign; with spill,
// a request goes elsewhere when that backend's exact TTFT (times a
// log-normal error of sigma, as an estimate would have) is lower than
// its home's and it holds part of the prompt or has room for the group
// (the groups it holds, and this one, within fill of its cache).
func boundStatic(assign []int, spill bool, sigma, fill float64) func([][]uint64) boundPolicy {
	return func(prefix [][]uint64) boundPolicy {
		est := noisyTTFT(rand.New(rand.NewPCG(7, 7)), sigma)
		return func(t float64, r *boundReq, bs []*boundBackend) int {
			h := assign[r.group]
			if !spill {
				return h
			}
			best, be := h, est(bs[h], t, r)
			for i, d := range bs {
				if i == h || d.cache == nil {
					continue
				}
				pb := len(prefix[r.group])
				if d.hit(r.blocks) == 0 && float64((resident(d, prefix)+1)*pb) > fill*float64(d.cfg.CacheBlocks) {
					continue
				}
				if e := est(d, t, r); e < be {
					best, be = i, e
				}
			}
			return best
		}
	}
}

// assignCounts gives backend i counts[i] groups, in group order.
func assignCounts(counts []int) []int {
	var a []int
	for i, c := range counts {
		for range c {
			a = append(a, i)
		}
	}
	return a
}

// speedCounts shares the groups among the backends in proportion to
// their speeds.
func speedCounts(f Fleet) []int {
	n := len(f.StandIns)
	total := 0.0
	for _, c := range f.StandIns {
		total += max(c.Speed, 1e-9)
	}
	counts := make([]int, n)
	given := 0
	for i, c := range f.StandIns {
		counts[i] = int(float64(f.Workload.Groups) * c.Speed / total)
		given += counts[i]
	}
	for i := 0; given < f.Workload.Groups; i = (i + 1) % n {
		counts[i]++
		given++
	}
	return counts
}

// bestStatic searches the groups-per-backend counts for the lowest pooled
// P99 with the policy built from them: from each of the starting counts,
// moving one group at a time while that improves it (a local search: what
// it finds is an upper bound on the best placement's P99).
func bestStatic(t testing.TB, f Fleet, seeds int, pol func([]int) func([][]uint64) boundPolicy, starts ...[]int) (counts []int, p99, mean float64) {
	p99 = math.Inf(1)
	for _, s := range starts {
		c, q, m := climb(t, f, seeds, pol, s)
		if q < p99 {
			counts, p99, mean = c, q, m
		}
	}
	return counts, p99, mean
}

func climb(t testing.TB, f Fleet, seeds int, pol func([]int) func([][]uint64) boundPolicy, counts []int) ([]int, float64, float64) {
	n := len(counts)
	p99, mean := boundPooled(t, f, seeds, pol(assignCounts(counts)))
	for improved := true; improved; {
		improved = false
		for from := range n {
			for to := range n {
				if from == to || counts[from] == 0 {
					continue
				}
				c := slices.Clone(counts)
				c[from]--
				c[to]++
				if q, m := boundPooled(t, f, seeds, pol(assignCounts(c))); q < p99-1e-9 {
					counts, p99, mean, improved = c, q, m, true
				}
			}
		}
	}
	return counts, p99, mean
}

// boundDynamic places each new prompt group (its prompt cached nowhere)
// when its first request comes, as the gateway must, and sends the
// group's later requests to the backend holding most of the prompt (the
// least loaded of those holding as much), with the exact spills of
// boundStatic. place is the new group's rule, ties from a rotating start:
//   - "room": a backend with room for the group (fill) first, then the
//     least loaded, then the fastest: the default's order (tiedBetter);
//   - "load": the least loaded, then the fastest;
//   - "roomslack": room first only among backends within one request of
//     the least loaded, then as "load";
//   - "fast": where its first request's TTFT is least.
func boundDynamic(place string, sigma, fill float64) func([][]uint64) boundPolicy {
	return func(prefix [][]uint64) boundPolicy {
		est := noisyTTFT(rand.New(rand.NewPCG(7, 7)), sigma)
		k := 0
		room := func(d *boundBackend, pb int) bool {
			return d.cache == nil || float64((resident(d, prefix)+1)*pb) <= fill*float64(d.cfg.CacheBlocks)
		}
		return func(t float64, r *boundReq, bs []*boundBackend) int {
			k++
			n := len(bs)
			pb := len(prefix[r.group])
			h := -1
			for j := range n {
				i := (k + j) % n
				if bs[i].hit(r.blocks) == 0 {
					continue
				}
				if h < 0 || bs[i].hit(r.blocks) > bs[h].hit(r.blocks) || bs[i].hit(r.blocks) == bs[h].hit(r.blocks) && load(bs[i]) < load(bs[h]) {
					h = i
				}
			}
			minLoad := math.MaxInt
			for _, b := range bs {
				minLoad = min(minLoad, load(b))
			}
			if h < 0 {
				for j := range n {
					i := (k + j) % n
					if h < 0 {
						h = i
						continue
					}
					c, b := bs[i], bs[h]
					better := false
					switch place {
					case "room":
						if room(c, pb) != room(b, pb) {
							better = room(c, pb)
						} else if load(c) != load(b) {
							better = load(c) < load(b)
						} else {
							better = c.cfg.Speed > b.cfg.Speed
						}
					case "roomslack":
						rc, rb := room(c, pb) && load(c) <= minLoad+1, room(b, pb) && load(b) <= minLoad+1
						if rc != rb {
							better = rc
						} else if load(c) != load(b) {
							better = load(c) < load(b)
						} else {
							better = c.cfg.Speed > b.cfg.Speed
						}
					case "load":
						if load(c) != load(b) {
							better = load(c) < load(b)
						} else {
							better = c.cfg.Speed > b.cfg.Speed
						}
					case "fast":
						better = est(c, t, r) < est(b, t, r)
					}
					if better {
						h = i
					}
				}
			}
			best, be := h, est(bs[h], t, r)
			for i, d := range bs {
				if i == h || d.cache == nil {
					continue
				}
				if d.hit(r.blocks) == 0 && !room(d, pb) {
					continue
				}
				if e := est(d, t, r); e < be {
					best, be = i, e
				}
			}
			return best
		}
	}
}

// TestBoundModelIsTheStandIns checks the replay against the stand-in's
// formula on requests whose TTFT is known by hand: a miss costs the
// overhead and the whole prompt's prefill, a hit its unique part, a
// request behind full slots waits for the first to end, and a drifting
// backend is slower from its drift on.
func TestBoundModelIsTheStandIns(t *testing.T) {
	c := standin.Config{BlockChars: 256, CacheBlocks: 64, Slots: 1, Overhead: 2 * time.Millisecond,
		PrefillPerKChar: 10 * time.Millisecond, DecodePerToken: 2 * time.Millisecond, Speed: 2,
		DriftAfter: 10, DriftFactor: 3}
	b := newBoundBackend(c)
	arrived := 0
	b.arrived = &arrived
	blocks := []uint64{1, 2, 3, 4}
	r := &boundReq{chars: 1100, out: 5, blocks: blocks}
	if got, want := b.ttft(0, r), (2+10*1.1)/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("miss: %v ms, want %v", got, want)
	}
	for _, k := range blocks {
		b.cache.Touch(k)
	}
	if got, want := b.ttft(0, r), (2+10*0.076)/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("hit: %v ms, want %v", got, want)
	}
	b.running, b.ends = 1, []float64{30}
	if got, want := b.ttft(10, r), 20+(2+10*0.076)/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("behind a full slot: %v ms, want %v", got, want)
	}
	b.running, b.ends = 0, nil
	arrived = 10
	if got, want := b.ttft(150, r), (2+10*0.076)/2*3; math.Abs(got-want) > 1e-9 {
		t.Errorf("after the drift: %v ms, want %v", got, want)
	}
}

// TestPlacementBounds prints, per closed-loop stand-in fleet of the
// suite and of the fourth and fifth held-out sets, what routing could reach with
// exact knowledge: round-robin, least-outstanding and prefix affinity as
// the replay runs them, the best fixed group placement found (alone, and
// with spills priced exactly, then with estimates off by a log-normal
// error of σ = 0.2 and 0.4). Run with LIVEEVAL_BOUNDS=1 (about a minute):
//
//	LIVEEVAL_BOUNDS=1 go test ./internal/gateway/liveeval -run TestPlacementBounds -v
func TestPlacementBounds(t *testing.T) {
	if os.Getenv("LIVEEVAL_BOUNDS") == "" {
		t.Skip("set LIVEEVAL_BOUNDS=1 to print the offline bounds (docs/routing-evaluation.md)")
	}
	const seeds = 8
	fleets := boundFleets()
	var out strings.Builder
	fmt.Fprintln(&out, "| fleet | round-robin | least-outstanding | prefix affinity | best fixed placement (groups per backend) | + exact spills with room | σ 0.2 | σ 0.4 |")
	fmt.Fprintln(&out, "|---|---|---|---|---|---|---|---|")
	for _, f := range fleets {
		rr, _ := boundPooled(t, f, seeds, boundRoundRobin)
		lo, _ := boundPooled(t, f, seeds, boundLeastOutstanding)
		pa, _ := boundPooled(t, f, seeds, boundPrefixAffinity)
		best := min(lo, pa)
		cell := func(p99 float64) string {
			return fmt.Sprintf("%.1f (%.2f · %.2f)", p99, p99/rr, p99/best)
		}
		counts, st, _ := bestStatic(t, f, seeds, func(a []int) func([][]uint64) boundPolicy { return boundStatic(a, false, 0, 0) }, speedCounts(f))
		sc, sp, _ := bestStatic(t, f, seeds, func(a []int) func([][]uint64) boundPolicy { return boundStatic(a, true, 0, 0.8) }, speedCounts(f), counts)
		s2, _ := boundPooled(t, f, seeds, boundStatic(assignCounts(sc), true, 0.2, 0.8))
		s4, _ := boundPooled(t, f, seeds, boundStatic(assignCounts(sc), true, 0.4, 0.8))
		fmt.Fprintf(&out, "| %s | %.1f | %.1f | %.1f | %s %v | %s %v | %s | %s |\n", f.Name, rr, lo, pa, cell(st), counts, cell(sp), sc, cell(s2), cell(s4))
	}
	t.Logf("pooled P99 ms over seeds 1–%d (÷ round-robin · ÷ the better of least-outstanding and prefix affinity):\n%s", seeds, out.String())
}

// TestPlacementBoundsDynamic is TestPlacementBounds for placements made
// as groups arrive (boundDynamic), each with exact spills and with σ 0.2
// errors: pooled P99 ÷ round-robin · ÷ the better single signal.
//
//	LIVEEVAL_BOUNDS=1 go test ./internal/gateway/liveeval -run TestPlacementBoundsDynamic -v
func TestPlacementBoundsDynamic(t *testing.T) {
	if os.Getenv("LIVEEVAL_BOUNDS") == "" {
		t.Skip("set LIVEEVAL_BOUNDS=1 to print the offline bounds (docs/routing-evaluation.md)")
	}
	const seeds = 8
	places := []string{"room", "load", "roomslack", "fast"}
	var out strings.Builder
	fmt.Fprint(&out, "| fleet |")
	for _, pl := range places {
		fmt.Fprintf(&out, " %s, exact | %s, σ 0.2 |", pl, pl)
	}
	fmt.Fprint(&out, "\n|---|")
	for range places {
		fmt.Fprint(&out, "---|---|")
	}
	fmt.Fprintln(&out)
	for _, f := range boundFleets() {
		rr, _ := boundPooled(t, f, seeds, boundRoundRobin)
		lo, _ := boundPooled(t, f, seeds, boundLeastOutstanding)
		pa, _ := boundPooled(t, f, seeds, boundPrefixAffinity)
		best := min(lo, pa)
		fmt.Fprintf(&out, "| %s |", f.Name)
		for _, pl := range places {
			for _, sg := range []float64{0, 0.2} {
				p, _ := boundPooled(t, f, seeds, boundDynamic(pl, sg, 0.8))
				fmt.Fprintf(&out, " %.2f · %.2f |", p/rr, p/best)
			}
		}
		fmt.Fprintln(&out)
	}
	t.Logf("pooled P99 over seeds 1–%d, ÷ round-robin · ÷ the better of least-outstanding and prefix affinity:\n%s", seeds, out.String())
}

// boundFleets are the closed-loop stand-in fleets of the suite and of
// held-out sets 4 and 5, with a warm-up and no unique documents: the
// ones the replay runs as the live suite does.
func boundFleets() []Fleet {
	var fleets []Fleet
	for _, f := range slices.Concat(Fleets(), unseenFleets4(), unseenFleets5()) {
		if len(f.StandIns) == 0 || f.Workload.Rate > 0 || f.Workload.LongShare > 0 || f.Workload.Warmup == 0 {
			continue
		}
		fleets = append(fleets, f)
	}
	return fleets
}

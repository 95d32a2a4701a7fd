package liveeval

import (
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
)

// unseenFleets are fleet shapes the default policy was never run on while
// it was developed: written after the picker of 2026-12-03 was frozen, to
// ask whether what it learnt on the suite's fleets holds on others
// (issue 17: the routing will be checked on fleets not in the repo). They
// are not in Fleets, so no later change is tuned on them by the suite's
// command either.
func unseenFleets() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	busy := wl
	busy.Concurrency = 16
	open := wl
	open.Concurrency, open.Rate, open.Arrival = 64, 120, "poisson"
	many := wl
	many.Groups, many.PrefixChars = 48, 2048
	return []Fleet{
		{Name: "homogeneous-large-caches", About: "4 equal stand-ins whose caches hold the working set, concurrency 16",
			StandIns: []standin.Config{sb("a", 1024, 1), sb("b", 1024, 1), sb("c", 1024, 1), sb("d", 1024, 1)}, Workload: busy, SLO: 60 * time.Millisecond},
		{Name: "one-4x", About: "one stand-in 4× faster than three others, caches of 96 blocks",
			StandIns: []standin.Config{sb("fast", 96, 4), sb("a", 96, 1), sb("b", 96, 1), sb("c", 96, 1)}, Workload: wl, SLO: 60 * time.Millisecond},
		{Name: "three-tier", About: "3×, 1× and ⅓× stand-ins, the slower the larger the cache (64, 128, 256 blocks), Poisson 120 req/s",
			StandIns: []standin.Config{sb("f", 64, 3), sb("m", 128, 1), sb("s", 256, 0.33)}, Workload: open, SLO: 100 * time.Millisecond},
		{Name: "many-groups", About: "48 groups of 2 KiB prefixes over 5 stand-ins (2×, three 1×, 0.5×) of 128 blocks",
			StandIns: []standin.Config{sb("a", 128, 2), sb("b", 128, 1), sb("c", 128, 1), sb("d", 128, 1), sb("e", 128, 0.5)}, Workload: many, SLO: 60 * time.Millisecond},
	}
}

// unseenFleets2 are a second held-out set, written on 2026-12-04 before
// that day's changes to the picker. Its first run judged them; after it,
// no-metrics-small-blocks was diagnosed and used to judge two fixes that
// were not shipped (docs/routing-evaluation.md), so that fleet is no
// longer unseen; the other four are. They vary what the suite holds fixed — block
// sizes other than the gateway's, engines that publish no metrics, slot
// counts, prefix lengths, speeds — since the stand-ins a user's fleet
// (or a checker's) behaves like are not ours.
func unseenFleets2() []Fleet {
	sb := func(name string, blockChars, cacheBlocks, slots int, speed float64) standin.Config {
		c := standinBase(name, cacheBlocks, speed)
		c.BlockChars, c.Slots = blockChars, slots
		return c
	}
	wl := baseWorkload()
	quiet := []standin.Config{sb("fast-a", 128, 160, 4, 2), sb("fast-b", 128, 160, 4, 2), sb("a", 128, 160, 4, 1), sb("b", 128, 160, 4, 1)}
	for i := range quiet {
		quiet[i].NoMetrics = true
	}
	tiers := wl
	tiers.Groups, tiers.PrefixChars, tiers.Concurrency = 20, 3072, 14
	drift := []standin.Config{sb("fast", 256, 96, 4, 2), sb("a", 256, 96, 4, 1), sb("b", 256, 96, 4, 1), sb("c", 256, 96, 4, 1)}
	// Set at 1 s until 2026-12-06, after the end of most runs of the
	// policies that beat round-robin (docs/routing-evaluation.md,
	// "Events on the requests' clock").
	drift[0].DriftAfter, drift[0].DriftFactor = 200, 4
	bursty := wl
	bursty.Groups, bursty.PrefixChars = 24, 3072
	bursty.Concurrency, bursty.Rate, bursty.Arrival, bursty.Burstiness = 48, 100, "gamma", 0.3
	var six []standin.Config
	for i, sp := range []float64{2, 1.5, 1, 1, 1, 0.75} {
		six = append(six, sb(string(rune('a'+i)), 512, 40, 2, sp))
	}
	long := wl
	long.Groups, long.PrefixChars, long.Concurrency = 6, 8192, 8
	return []Fleet{
		{Name: "no-metrics-small-blocks", About: "4 stand-ins that publish no metrics, 128-char blocks, caches of 160 blocks (20 KiB) < working set, two 2× faster",
			StandIns: quiet, Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "two-fast-3x", About: "two 3× stand-ins with 64-block caches beside three 1× with 160; 20 groups of 3 KiB, concurrency 14",
			StandIns: []standin.Config{sb("f1", 256, 64, 4, 3), sb("f2", 256, 64, 4, 3), sb("s1", 256, 160, 4, 1), sb("s2", 256, 160, 4, 1), sb("s3", 256, 160, 4, 1)},
			Workload: tiers, SLO: 50 * time.Millisecond, CacheMatters: true},
		{Name: "drift-fast", About: "a 2× stand-in 4× slower from the 200th request on beside three 1×, 96 blocks each",
			StandIns: drift, Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "bursty-six", About: "6 stand-ins (2×, 1.5×, three 1×, 0.75×) of 2 slots and 40 blocks of 512 chars; 24 groups of 3 KiB; gamma arrivals at 100 req/s (shape 0.3)",
			StandIns: six, Workload: bursty, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "long-prefix-two", About: "2 stand-ins (1×, 2.5×) of 6 slots and 128 blocks; 6 groups of 8 KiB prefixes, concurrency 8",
			StandIns: []standin.Config{sb("slow", 256, 128, 6, 1), sb("fast", 256, 128, 6, 2.5)}, Workload: long, SLO: 100 * time.Millisecond, CacheMatters: true},
	}
}

// unseenFleets3 are a third held-out set, written on 2026-12-04 (fifth
// session) with the workload knobs they need and before any run of them.
// The first two sets vary the fleets; this one varies the traffic, as a
// user's does: a few tenants sending most requests (Zipf popularity, as
// `ttft bench`'s prefix popularity "zipf"), prefixes of many lengths,
// engines that serve one request at a time (llama.cpp's single slot),
// and long answers whose decode holds the slots. Its first run found
// long-decode failing, and long-decode and single-slot then judged the
// two queue rules of the picker (docs/routing-evaluation.md), so those
// two are no longer unseen; the other three are.
func unseenFleets3() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	zipf := wl
	zipf.ZipfS = 1.1
	hot := wl
	hot.Groups, hot.ZipfS, hot.Concurrency = 8, 1.6, 16
	varied := wl
	varied.Groups, varied.PrefixChars, varied.PrefixCharsMax, varied.Concurrency = 12, 1024, 12288, 10
	single := wl
	single.Groups, single.Concurrency = 8, 6
	one := func(name string, speed float64) standin.Config {
		c := sb(name, 64, speed)
		c.Slots = 1
		return c
	}
	long := wl
	long.OutputTokens, long.Concurrency = 48, 16
	return []Fleet{
		{Name: "zipf-small-cache", About: "the small-cache fleet (96 blocks, two of four 2× faster) under Zipf group popularity (s = 1.1: the first of 16 groups sends 33 %)",
			StandIns: smallCacheStandIns(), Workload: zipf, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "zipf-hot-large-caches", About: "4 equal stand-ins whose caches hold every prefix; 8 groups, Zipf s = 1.6 (the first sends 55 %), concurrency 16",
			StandIns: []standin.Config{sb("a", 1024, 1), sb("b", 1024, 1), sb("c", 1024, 1), sb("d", 1024, 1)}, Workload: hot, SLO: 60 * time.Millisecond},
		{Name: "varied-prefixes", About: "3 stand-ins (2×, 1.5×, 1×) of 128 blocks; 12 groups whose prefixes are 1–12 KiB, concurrency 10",
			StandIns: []standin.Config{sb("a", 128, 2), sb("b", 128, 1.5), sb("c", 128, 1)}, Workload: varied, SLO: 100 * time.Millisecond, CacheMatters: true},
		{Name: "single-slot", About: "4 one-slot stand-ins (2×, three 1×) of 64 blocks; 8 groups, concurrency 6",
			StandIns: []standin.Config{one("fast", 2), one("a", 1), one("b", 1), one("c", 1)}, Workload: single, SLO: 100 * time.Millisecond, CacheMatters: true},
		{Name: "long-decode", About: "4 stand-ins (two 2×) of 128 blocks; 48-token answers hold the slots, concurrency 16",
			StandIns: []standin.Config{sb("fast-a", 128, 2), sb("fast-b", 128, 2), sb("slow-a", 128, 1), sb("slow-b", 128, 1)}, Workload: long, SLO: 80 * time.Millisecond, CacheMatters: true},
	}
}

// unseenFleets4 is a fourth set, written on 2026-12-04 after the picker
// learnt the wait for a slot from how far along the answers holding
// them are (sched's slots.go), and committed before any run of it: slots
// held by answers, in shapes the sets before did not have. Answers of
// many lengths (the wait's model assumes one mean), two slots a
// backend, more clients than slots (no policy avoids queueing), eight
// slots a backend, and one-slot backends beside four-slot ones. It was
// run on 113d972 and on the session's final tree (docs/
// routing-evaluation.md); nothing was changed for it, but its figures
// are known: a later check of the routing needs fleets not here.
func unseenFleets4() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	varied := wl
	varied.OutputTokens, varied.OutputTokensMax, varied.Concurrency = 8, 96, 14
	two := wl
	two.Groups, two.OutputTokens, two.Concurrency = 12, 24, 10
	over := wl
	over.OutputTokens, over.Concurrency = 32, 20
	eight := wl
	eight.OutputTokens, eight.Concurrency = 64, 20
	mixed := wl
	mixed.Groups, mixed.OutputTokens, mixed.Concurrency = 10, 16, 8
	return []Fleet{
		{Name: "varied-answers", About: "4 stand-ins (two 2×) of 128 blocks; answers of 8–96 tokens, concurrency 14",
			StandIns: []standin.Config{sb("fast-a", 128, 2), sb("fast-b", 128, 2), sb("slow-a", 128, 1), sb("slow-b", 128, 1)},
			Workload: varied, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "two-slots-six", About: "6 stand-ins of 2 slots (2×, 2×, 1.5×, 1×, 1×, 1×) of 64 blocks; 12 groups, 24-token answers, concurrency 10",
			StandIns: []standin.Config{withSlots(sb("a", 64, 2), 2), withSlots(sb("b", 64, 2), 2), withSlots(sb("c", 64, 1.5), 2),
				withSlots(sb("d", 64, 1), 2), withSlots(sb("e", 64, 1), 2), withSlots(sb("f", 64, 1), 2)},
			Workload: two, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "overcommitted", About: "4 equal stand-ins of 4 slots and 128 blocks; 32-token answers, concurrency 20 on 16 slots",
			StandIns: []standin.Config{sb("a", 128, 1), sb("b", 128, 1), sb("c", 128, 1), sb("d", 128, 1)},
			Workload: over, SLO: 100 * time.Millisecond, CacheMatters: true},
		{Name: "eight-slots-long", About: "3 stand-ins of 8 slots (2×, 1×, 1×) of 192 blocks; 64-token answers, concurrency 20",
			StandIns: []standin.Config{withSlots(sb("fast", 192, 2), 8), withSlots(sb("slow-a", 192, 1), 8), withSlots(sb("slow-b", 192, 1), 8)},
			Workload: eight, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "one-and-four-slots", About: "2 one-slot stand-ins at 2× beside 2 four-slot at 1×, 96 blocks; 10 groups, 16-token answers, concurrency 8",
			StandIns: []standin.Config{withSlots(sb("one-a", 96, 2), 1), withSlots(sb("one-b", 96, 2), 1), sb("four-a", 96, 1), sb("four-b", 96, 1)},
			Workload: mixed, SLO: 80 * time.Millisecond, CacheMatters: true},
	}
}

// unseenFleets5 is a fifth set, written on 2026-12-05 while the picker
// was being changed on varied-answers and long-decode (the queue
// rules of that session, docs/routing-evaluation.md) and committed
// before any run of it. It mixes what the sets before varied one at a
// time: many small backends of two slots, long unique messages after
// short prefixes (the prefill of what is not cached dominates), a fast
// backend slowing while answers hold the slots, open-loop arrivals with
// answers of many lengths, and engines that publish no metrics with
// two slots each.
func unseenFleets5() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	var ten []standin.Config
	for i := range 10 {
		sp := 1.0
		if i < 2 {
			sp = 2
		}
		ten = append(ten, withSlots(sb(string(rune('a'+i)), 48, sp), 2))
	}
	tenWl := wl
	tenWl.Groups, tenWl.PrefixChars, tenWl.OutputTokens, tenWl.Concurrency = 24, 3072, 16, 16
	suffixes := wl
	suffixes.PrefixChars, suffixes.SuffixMin, suffixes.SuffixMax, suffixes.Concurrency = 2048, 2000, 6000, 10
	drift := []standin.Config{sb("fast-a", 128, 2), sb("fast-b", 128, 2), sb("slow-a", 128, 1), sb("slow-b", 128, 1)}
	// Set at 1 s until 2026-12-06 (as drift-fast's).
	drift[0].DriftAfter, drift[0].DriftFactor = 200, 3
	driftWl := wl
	driftWl.OutputTokens, driftWl.Concurrency = 32, 14
	open := wl
	open.OutputTokens, open.OutputTokensMax = 8, 48
	open.Concurrency, open.Rate, open.Arrival = 64, 150, "poisson"
	var quiet []standin.Config
	for i, sp := range []float64{2, 2, 1, 1, 1} {
		c := withSlots(sb(string(rune('a'+i)), 96, sp), 2)
		c.NoMetrics = true
		quiet = append(quiet, c)
	}
	quietWl := wl
	quietWl.Groups, quietWl.OutputTokens, quietWl.OutputTokensMax, quietWl.Concurrency = 12, 4, 40, 9
	return []Fleet{
		{Name: "ten-small", About: "10 stand-ins of 2 slots and 48 blocks (two 2×); 24 groups of 3 KiB, 16-token answers, concurrency 16",
			StandIns: ten, Workload: tenWl, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "long-suffixes", About: "4 stand-ins (two 2×) of 128 blocks; 16 groups of 2 KiB prefixes before 2–6 KiB unique messages, concurrency 10",
			StandIns: []standin.Config{sb("fast-a", 128, 2), sb("fast-b", 128, 2), sb("slow-a", 128, 1), sb("slow-b", 128, 1)},
			Workload: suffixes, SLO: 100 * time.Millisecond, CacheMatters: true},
		{Name: "drift-long-answers", About: "4 stand-ins (two 2×) of 128 blocks, one fast one 3× slower from the 200th request on; 32-token answers, concurrency 14",
			StandIns: drift, Workload: driftWl, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "poisson-answers", About: "4 equal stand-ins of 4 slots and 128 blocks; Poisson 150 req/s, answers of 8–48 tokens",
			StandIns: []standin.Config{sb("a", 128, 1), sb("b", 128, 1), sb("c", 128, 1), sb("d", 128, 1)},
			Workload: open, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "quiet-two-slots", About: "5 stand-ins of 2 slots that publish no metrics (2×, 2×, 1×, 1×, 1×), 96 blocks; 12 groups, answers of 4–40 tokens, concurrency 9",
			StandIns: quiet, Workload: quietWl, SLO: 80 * time.Millisecond, CacheMatters: true},
	}
}

// unseenFleets6 is a sixth set, written on 2026-12-06 (fourth session)
// with the stand-in's two new parts (prefills sharing one processor, a
// backend behind a network round trip) and the source's conversations,
// and committed before any run of it. The sets before hold three things
// fixed that a user's fleet need not: what is reused is a tenant's
// prefix (here: each chat's own growing history), a request's prefill
// runs at full speed however many run beside it (here: an engine
// batching prefills into shared GPU steps, with slots to spare), and
// every backend is equally near (here: fast replicas in another zone).
func unseenFleets6() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	chat := wl
	chat.Groups, chat.PrefixChars, chat.Sessions, chat.TurnsMin, chat.TurnsMax = 8, 1024, 48, 3, 8
	chat.OutputTokens, chat.OutputTokensMax = 8, 32
	shared := func(c standin.Config, slots int) standin.Config {
		c.Slots, c.SharedPrefill = slots, true
		return c
	}
	far := func(c standin.Config, rtt time.Duration) standin.Config {
		c.Network = rtt
		return c
	}
	busy := wl
	busy.Concurrency = 16
	open := wl
	open.Groups, open.PrefixChars, open.Sessions, open.TurnsMin, open.TurnsMax = 6, 2048, 64, 2, 10
	open.OutputTokens, open.OutputTokensMax = 8, 48
	open.Concurrency, open.Rate, open.Arrival = 64, 100, "poisson"
	pair := wl
	pair.Groups, pair.PrefixChars, pair.Sessions, pair.TurnsMin, pair.TurnsMax = 4, 1024, 24, 4, 12
	pair.OutputTokens, pair.Concurrency = 16, 8
	return []Fleet{
		{Name: "chat-sessions", About: "4 stand-ins (two 2×) of 160 blocks; 48 open conversations of 3–8 turns over 8 system prompts of 1 KiB, answers of 8–32 tokens, concurrency 12",
			StandIns: []standin.Config{sb("fast-a", 160, 2), sb("fast-b", 160, 2), sb("slow-a", 160, 1), sb("slow-b", 160, 1)},
			Workload: chat, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "shared-prefill", About: "4 stand-ins (two 2×) of 16 slots whose prefills share one processor, 96 blocks; concurrency 16",
			StandIns: []standin.Config{shared(sb("fast-a", 96, 2), 16), shared(sb("fast-b", 96, 2), 16), shared(sb("slow-a", 96, 1), 16), shared(sb("slow-b", 96, 1), 16)},
			Workload: busy, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "remote-fast", About: "two 2× stand-ins 25 ms away beside two 1× near ones, 128 blocks",
			StandIns: []standin.Config{far(sb("far-a", 128, 2), 25*time.Millisecond), far(sb("far-b", 128, 2), 25*time.Millisecond), sb("near-a", 128, 1), sb("near-b", 128, 1)},
			Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "sessions-shared-poisson", About: "5 stand-ins (2×, 1.5×, 1×, 1×, 0.75×) of 8 slots sharing their prefills, 128 blocks; 64 conversations of 2–10 turns, Poisson 100 req/s, answers of 8–48 tokens",
			StandIns: []standin.Config{shared(sb("a", 128, 2), 8), shared(sb("b", 128, 1.5), 8), shared(sb("c", 128, 1), 8), shared(sb("d", 128, 1), 8), shared(sb("e", 128, 0.75), 8)},
			Workload: open, SLO: 80 * time.Millisecond, CacheMatters: true},
		{Name: "remote-sessions-two", About: "a near 1× stand-in of 8 slots and 256 blocks beside a 3× one 15 ms away of 4 slots and 96; 24 conversations of 4–12 turns, concurrency 8",
			StandIns: []standin.Config{withSlots(sb("near", 256, 1), 8), withSlots(far(sb("far", 96, 3), 15*time.Millisecond), 4)},
			Workload: pair, SLO: 60 * time.Millisecond, CacheMatters: true},
	}
}

// unseenFleets7 is a seventh set, written on 2026-12-06 (eighth session)
// with the stand-in's outages and refusals, and committed before any run
// of it. Every set before kept every backend up and answering: a user's
// fleet restarts engines (a crash, a rolling deploy), adds replicas that
// come up cold, and has engines that refuse some requests under load. A
// restart empties an engine's cache, so what the gateway believes each
// backend holds is wrong from then on until it hears otherwise (from the
// engine's metrics, or only from the cached tokens answers report where
// it publishes none).
func unseenFleets7() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	// Outages are set on the fleet's arrivals (standin.Config.UpAfter),
	// as drifts are. The runs are longer than the suite's: an outage
	// must outlast the gateway's health interval (1 s here, 5 s by
	// default) as an engine's restart (a minute) does, and the run go on
	// for as long after it, for what follows a restart to count. At the
	// default's pace (about 800 requests a second here) 600 requests
	// are 0.75 s; at round-robin's, 2 s.
	long := wl
	long.Requests = 2000
	down := func(c standin.Config, at, up int) standin.Config {
		c.DownAfter, c.UpAfter = at, up
		return c
	}
	quiet := func(cs []standin.Config) []standin.Config {
		for i := range cs {
			cs[i].NoMetrics = true
		}
		return cs
	}
	restart := smallCacheStandIns()
	restart[0] = down(restart[0], 600, 1200)
	restartQuiet := quiet(smallCacheStandIns())
	restartQuiet[0] = down(restartQuiet[0], 600, 1200)
	late := smallCacheStandIns()
	late[1] = down(late[1], 0, 600)
	var rolling []standin.Config
	for i, c := range []standin.Config{sb("fast-a", 128, 2), sb("fast-b", 128, 2), sb("slow-a", 128, 1), sb("slow-b", 128, 1)} {
		rolling = append(rolling, down(c, 300+400*i, 600+400*i))
	}
	flaky := smallCacheStandIns()
	flaky[0].ErrorShare = 0.1
	two := long
	two.Groups, two.Concurrency = 8, 6
	return []Fleet{
		{Name: "restart-fast", About: "the small-cache fleet, 2,000 scored requests; a fast stand-in down from the 600th request to the 1,200th, back with an empty cache",
			StandIns: restart, Workload: long, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "restart-no-metrics", About: "restart-fast with stand-ins that publish no metrics: the restart shows only in the cached tokens answers report",
			StandIns: restartQuiet, Workload: long, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "late-joiner", About: "the small-cache fleet, 2,000 scored requests; a fast stand-in comes up, cold, at the 600th",
			StandIns: late, Workload: long, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "rolling-restart", About: "4 stand-ins (two 2×) of 128 blocks, 2,000 scored requests; each restarted in turn, down for 300 requests, from the 300th every 400",
			StandIns: rolling, Workload: long, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "flaky-fast", About: "the small-cache fleet, 2,000 scored requests; a fast stand-in answers 10 % of requests 503 at once",
			StandIns: flaky, Workload: long, SLO: 60 * time.Millisecond, CacheMatters: true},
		{Name: "two-restart", About: "2 stand-ins (one 2×) of 96 blocks, 8 groups, 2,000 scored requests; the fast one down from the 600th request to the 1,200th",
			StandIns: []standin.Config{down(sb("fast", 96, 2), 600, 1200), sb("slow", 96, 1)},
			Workload: two, SLO: 60 * time.Millisecond, CacheMatters: true},
	}
}

// withSlots is c with n slots.
func withSlots(c standin.Config, n int) standin.Config {
	c.Slots = n
	return c
}

// TestUnseenFleets runs round-robin, the two single signals and the
// default on unseenFleets, LIVEEVAL_UNSEEN seeds each (about 30 s per
// seed here), prints the suite's tables and fails where the default's
// pooled P99 is more than 1.10× the best single signal's (the point
// estimate; the interval is printed). Opt-in, since it takes minutes:
//
//	LIVEEVAL_UNSEEN=6 go test ./internal/gateway/liveeval -run TestUnseenFleets -v -timeout 30m
//
// LIVEEVAL_UNSEEN_SET=2 to 7 runs the second to seventh set instead.
// LIVEEVAL_UNSEEN_FLEETS and LIVEEVAL_UNSEEN_POLICIES (comma-separated)
// run fewer, for comparing two builds side by side; the verdicts then
// compare the default with the single signals among those run.
func TestUnseenFleets(t *testing.T) {
	seeds := 0
	if v := os.Getenv("LIVEEVAL_UNSEEN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("LIVEEVAL_UNSEEN=%q: want a number of seeds", v)
		}
		seeds = n
	}
	if seeds == 0 {
		t.Skip("LIVEEVAL_UNSEEN gives no number of seeds")
	}
	fleets := unseenFleets()
	switch v := os.Getenv("LIVEEVAL_UNSEEN_SET"); v {
	case "", "1":
	case "2":
		fleets = unseenFleets2()
	case "3":
		fleets = unseenFleets3()
	case "4":
		fleets = unseenFleets4()
	case "5":
		fleets = unseenFleets5()
	case "6":
		fleets = unseenFleets6()
	case "7":
		fleets = unseenFleets7()
	default:
		t.Fatalf("LIVEEVAL_UNSEEN_SET=%q: want 1 to 7", v)
	}
	if v := os.Getenv("LIVEEVAL_UNSEEN_FLEETS"); v != "" {
		want := strings.Split(v, ",")
		fleets = slices.DeleteFunc(fleets, func(f Fleet) bool { return !slices.Contains(want, f.Name) })
		if len(fleets) == 0 {
			t.Fatalf("LIVEEVAL_UNSEEN_FLEETS=%q names none of the unseen fleets", v)
		}
	}
	pols := []string{sched.RoundRobin, sched.LeastOutstanding, sched.PrefixAffinity, sched.SLOPredictive}
	if v := os.Getenv("LIVEEVAL_UNSEEN_POLICIES"); v != "" {
		pols = strings.Split(v, ",")
	}
	// LIVEEVAL_UNSEEN_OUT keeps every run's file (the requests one by
	// one, as `ttft gateway live-eval --out` does) for a diagnosis.
	var st *Store
	if dir := os.Getenv("LIVEEVAL_UNSEEN_OUT"); dir != "" {
		var err error
		var ss []uint64
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			ss = append(ss, seed)
		}
		st, err = CreateStore(dir, NewSuite(Options{Fleets: fleets, Policies: pols, Seeds: ss}, ModePolicies, sched.SLOPredictive, "test", nil))
		if err != nil {
			t.Fatal(err)
		}
	}
	var rs []Result
	for _, f := range fleets {
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			for _, p := range pols {
				started := time.Now()
				r, err := RunOne(context.Background(), f, p, seed)
				if err != nil {
					t.Fatalf("%s %s seed %d: %v", f.Name, p, seed, err)
				}
				rs = append(rs, r)
				if st != nil {
					if _, err := st.WriteRun(r, RunMeta{Requests: f.Workload.Requests, Started: started, Ended: time.Now()}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	if st != nil {
		if err := st.Finish(nil); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	Format(&buf, Summarize(rs))
	buf.WriteString("\n")
	vs := CheckPooled(rs, fleets, sched.SLOPredictive, Bootstrap{})
	FormatPooledVerdicts(&buf, vs, sched.SLOPredictive, Bootstrap{})
	buf.WriteString("\n")
	FormatHostLate(&buf, rs)
	t.Log("\n" + buf.String())
	for _, v := range vs {
		if math.IsNaN(v.VsBest.Point) && os.Getenv("LIVEEVAL_UNSEEN_POLICIES") != "" {
			continue // no single signal was run
		}
		if !(v.VsBest.Point <= LimitVsBest) {
			t.Errorf("%s: the default's pooled P99 is %s of %s's", v.Fleet, FormatInterval(v.VsBest), v.Best)
		}
	}
}

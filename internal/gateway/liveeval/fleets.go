package liveeval

import (
	"fmt"
	"math"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/gateway/standin"
	"github.com/ttft-dev/ttft/internal/gguf"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/sim/serve"
)

// Workload is a shared-prefix chat workload: each request is one of
// Groups system prompts of PrefixChars characters (a tenant's instructions,
// a shared document) followed by a unique user message of SuffixMin to
// SuffixMax characters.
type Workload struct {
	Groups      int
	PrefixChars int
	// PrefixCharsMax, when above PrefixChars, draws each group's prefix
	// length uniformly from [PrefixChars, PrefixCharsMax]: tenants'
	// instructions are not all one size.
	PrefixCharsMax int
	// ZipfS, when positive, makes group k's share of requests
	// proportional to 1/(k+1)^ZipfS (as `ttft bench`'s prefix
	// popularity "zipf"): a few tenants send most of the traffic.
	// Zero: every group alike.
	ZipfS     float64
	SuffixMin int
	SuffixMax int
	// LongShare of the requests get a unique message of LongChars
	// characters instead (mixed prompt lengths: a pasted document).
	LongShare float64
	LongChars int
	// OutputTokens per request.
	OutputTokens int
	// OutputTokensMax, when above OutputTokens, draws each request's
	// answer length uniformly from [OutputTokens, OutputTokensMax]:
	// answers end where they end (at EOS, in an engine), so how long a
	// slot stays held is not the same for every request.
	OutputTokensMax int
	// Sessions, when positive, makes the traffic conversations: that many
	// are open at once and each request is the next turn of one drawn
	// at random. A turn's prompt is its group's system prompt, every
	// earlier turn of the conversation (the user's message and an answer
	// as long as that turn's token budget) and a new message, so what a
	// backend has cached is one conversation's history, not a tenant's
	// prefix. A conversation ends after TurnsMin to TurnsMax turns and a
	// new one takes its place. LongShare does not apply.
	Sessions           int
	TurnsMin, TurnsMax int
	// Warmup requests (not scored) and scored Requests.
	Warmup, Requests int
	// Closed loop of Concurrency, or open loop at Rate req/s from
	// Arrival ("poisson", "gamma" with Burstiness), at most Concurrency
	// in flight.
	Concurrency int
	Rate        float64
	Arrival     string
	Burstiness  float64
}

// Fleet is one fleet shape of the suite.
type Fleet struct {
	Name string
	// What the fleet stands for, for the report.
	About string
	// StandIns or Sim: the backends (one kind per fleet).
	StandIns []standin.Config
	Sim      []serve.Config
	// Lite are stand-ins serving LiteModel, the lighter model a route
	// with admission degrade sends what its own backends cannot serve in
	// time; only admission fleets have them.
	Lite []standin.Config
	// URLs are backends already running (real engines a test started),
	// serving ModelName, health-checked at HealthPath (the gateway's
	// default when empty) and not scraped for metrics.
	URLs       []string
	ModelName  string
	HealthPath string
	// Ollama are real engines (`ollama serve`, Options.Ollama) that Run
	// starts for the fleet's runs and resets before each; Engines are
	// they, running (or any other real engines a caller started).
	Ollama   []OllamaInstance
	Engines  Engines
	Workload Workload
	// SLO is the TTFT target the gateway is given (a route's slo_ms).
	SLO time.Duration
	// CacheMatters: prefix caching is what sets round-robin's tail here
	// (misses of shared prefixes on caches that cannot hold every group),
	// so the default policy must cut round-robin's P99 to a third. It is
	// decided from the fleet's design, before any run: false where the
	// tail comes from what no cache holds (cold starts, unique
	// documents) or where round-robin hits anyway (caches that hold the
	// working set).
	CacheMatters bool
}

// Model is the model id the fleet serves.
func (f Fleet) Model() string {
	if f.ModelName != "" {
		return f.ModelName
	}
	if len(f.Sim) > 0 {
		if f.Sim[0].ServedModelName != "" {
			return f.Sim[0].ServedModelName
		}
		return f.Sim[0].Model
	}
	return "standin"
}

// The stand-in fleets' common costs: a 4 KiB shared prefix costs 40 ms to
// prefill uncached at speed 1, a hit costs its unique part only.
func standinBase(name string, cacheBlocks int, speed float64) standin.Config {
	return standin.Config{
		Name: name, BlockChars: 256, CacheBlocks: cacheBlocks, Slots: 4,
		Overhead: 2 * time.Millisecond, PrefillPerKChar: 10 * time.Millisecond,
		DecodePerToken: 2 * time.Millisecond, Speed: speed,
	}
}

func baseWorkload() Workload {
	return Workload{Groups: 16, PrefixChars: 4096, SuffixMin: 200, SuffixMax: 1000, OutputTokens: 4,
		Warmup: 100, Requests: 400, Concurrency: 12}
}

// Fleets is the suite: the simulator's heterogeneous fleet and stand-in
// fleets of the shapes issue 17 names.
func Fleets() []Fleet {
	sb := standinBase
	wl := baseWorkload()
	var fleets []Fleet

	// Four stand-ins, LRU caches smaller than the working set (16 groups
	// × 16 blocks of prefix; each holds 96 blocks), two 2× faster.
	fleets = append(fleets, Fleet{
		Name: "small-cache", About: "4 stand-ins, LRU cache (96 blocks) < working set (256 prefix blocks), two 2× faster",
		StandIns: smallCacheStandIns(),
		Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
	fleets = append(fleets, Fleet{
		Name: "fast-small-slow-large", About: "2 fast stand-ins (2×) with small caches (48 blocks) beside 2 slow ones with large caches (1024 blocks)",
		StandIns: []standin.Config{sb("fast-a", 48, 2), sb("fast-b", 48, 2), sb("slow-a", 1024, 1), sb("slow-b", 1024, 1)},
		// The slow backends' caches hold the whole working set, so
		// round-robin hits half the time too.
		Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: false,
	})
	drift := []standin.Config{sb("a", 128, 1), sb("b", 128, 1), sb("c", 128, 1), sb("d", 128, 1)}
	// From the 200th request on: the first quarter of the scored ones.
	drift[0].DriftAfter, drift[0].DriftFactor = 200, 3
	fleets = append(fleets, Fleet{
		Name: "drift", About: "4 equal stand-ins (128 blocks), one 3× slower from the 200th request on",
		StandIns: drift, Workload: wl, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
	bursty := wl
	bursty.Concurrency, bursty.Rate, bursty.Arrival, bursty.Burstiness = 64, 150, "gamma", 0.25
	fleets = append(fleets, Fleet{
		Name: "bursty", About: "small-cache fleet under gamma arrivals (150 req/s, shape 0.25: CoV 2)",
		StandIns: smallCacheStandIns(),
		Workload: bursty, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
	cold := wl
	cold.Warmup, cold.Requests = 0, 300
	fleets = append(fleets, Fleet{
		Name: "cold-start", About: "small-cache fleet, no warm-up: 300 requests from cold",
		StandIns: smallCacheStandIns(),
		// Every group's first requests miss wherever they go: the tail is
		// cold misses, which no routing avoids.
		Workload: cold, SLO: 60 * time.Millisecond, CacheMatters: false,
	})
	mixed := wl
	mixed.LongShare, mixed.LongChars = 0.1, 12000
	fleets = append(fleets, Fleet{
		Name: "mixed-length", About: "small-cache fleet; 10% of requests carry a unique 12 k-char document",
		StandIns: smallCacheStandIns(),
		// The tail is the unique documents, which no cache holds.
		Workload: mixed, SLO: 60 * time.Millisecond, CacheMatters: false,
	})
	two := wl
	two.Groups, two.Concurrency = 8, 6
	fleets = append(fleets, Fleet{
		Name: "two", About: "2 stand-ins (one 2× faster), 96 blocks each, 8 groups",
		StandIns: []standin.Config{sb("fast", 96, 2), sb("slow", 96, 1)},
		Workload: two, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
	eight := wl
	eight.Groups, eight.Concurrency = 32, 24
	var e []standin.Config
	for i, sp := range []float64{2, 2, 1, 1, 1, 1, 0.5, 0.5} {
		e = append(e, sb(string(rune('a'+i)), 96, sp))
	}
	fleets = append(fleets, Fleet{
		Name: "eight", About: "8 stand-ins (2 at 2×, 4 at 1×, 2 at 0.5×), 96 blocks each, 32 groups",
		StandIns: e, Workload: eight, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
	// The simulator's own fleet, live: two H100s and two A10Gs.
	mk := func(gpu string) serve.Config {
		c := serve.DefaultConfig()
		c.Config = sim.Config{Model: "llama-3.1-8b", GPU: gpu, EnablePrefixCaching: true, MaxModelLen: 8192}
		c.SpinWindow = -1 // no busy-waiting: the machine is shared
		return c
	}
	simwl := wl
	simwl.Requests, simwl.Concurrency = 300, 8
	fleets = append(fleets, Fleet{
		Name: "sim-h100-a10g", About: "the simulator live: 2 × H100 + 2 × A10G replicas of Llama-3.1-8B",
		Sim:      []serve.Config{mk("h100-sxm"), mk("h100-sxm"), mk("a10g"), mk("a10g")},
		Workload: simwl, SLO: 320 * time.Millisecond, CacheMatters: true,
	})
	return fleets
}

// LiteModel is the model id of a fleet's Lite backends.
const LiteModel = "standin-lite"

// AdmissionFleets are the fleets for admission under overload (issue 17,
// item 4), run apart from Fleets because they are judged otherwise: what
// share of the requests a policy admits, and whether those keep the SLO.
//
// overload is the small-cache fleet's speeds made 16× scarcer (one slot
// instead of four, every cost 4× — the speed factors quartered) with an
// SLO 4× as long, under open-loop Poisson arrivals at a rate set from the
// fleet's own costs: FleetRates gives round-robin's and prefix affinity's
// capacities, and the rate is past both, so every policy is over
// capacity and only admission can keep the admitted requests in time.
// Its caches (1,024 blocks) hold every prefix: the overload is one of
// queues, not of cache misses, which the predictions price worst (with
// 96-block caches the admitted requests kept the SLO less often still,
// 66–69% in two trial runs). Two lighter-model stand-ins (4 slots, 4× the
// main ones' speed) take the degraded requests.
func AdmissionFleets() []Fleet {
	sb := standinBase
	w := baseWorkload()
	main := []standin.Config{sb("fast-a", 1024, 0.5), sb("fast-b", 1024, 0.5), sb("slow-a", 1024, 0.25), sb("slow-b", 1024, 0.25)}
	for i := range main {
		main[i].Slots = 1
	}
	f := Fleet{
		Name: "overload", StandIns: main, SLO: 240 * time.Millisecond,
		Lite: []standin.Config{sb("lite-a", 96, 1), sb("lite-b", 96, 1)},
	}
	for i := range f.Lite {
		f.Lite[i].Model = LiteModel
	}
	rr, affinity := FleetRates(f, w)
	w.Requests, w.Concurrency, w.Arrival = 600, 256, "poisson"
	w.Rate = math.Round(overloadFactor * affinity)
	f.Workload = w
	f.About = fmt.Sprintf("4 stand-ins (2 at 0.5×, 2 at 0.25×), 1 slot, caches holding every prefix, SLO 240 ms, Poisson arrivals at %.0f req/s (%.1f× prefix affinity's capacity, %.1f× round-robin's)",
		w.Rate, overloadFactor, w.Rate/rr)
	return []Fleet{f}
}

// overloadFactor is how far past the best routing's capacity the
// overload fleet is driven: far enough that timing noise on a loaded
// machine cannot bring it back under.
const overloadFactor = 1.6

// FleetRates estimates a stand-in fleet's capacity in requests per
// second under w from the stand-ins' own cost model: each backend serves
// Slots requests at a time, a request holding its slot for the overhead,
// the prefill of its uncached characters and its output tokens, all
// divided by the speed. Round-robin gives every backend the same share
// and caches a prefix as often as a random backend holds it (its cache's
// share of the groups' prefixes); affinity keeps each group's prefix on
// one backend, so only the unique message is uncached, and shares load
// by speed.
func FleetRates(f Fleet, w Workload) (roundRobin, affinity float64) {
	suffix := float64(w.SuffixMin+w.SuffixMax) / 2
	slowest := math.Inf(1)
	for _, c := range f.StandIns {
		if c.Slots <= 0 || c.Speed <= 0 || c.BlockChars <= 0 {
			continue // AdmissionFleets sets every field this reads
		}
		prefix := float64(w.PrefixChars+max(w.PrefixChars, w.PrefixCharsMax)) / 2
		held := math.Min(1, float64(c.CacheBlocks*c.BlockChars)/(float64(w.Groups)*prefix))
		uncachedRR := suffix + (1-held)*prefix
		cost := func(uncached float64) float64 {
			d := c.Overhead + time.Duration(uncached/1000*float64(c.PrefillPerKChar)) + time.Duration(w.OutputTokens)*c.DecodePerToken
			return d.Seconds() / c.Speed
		}
		slowest = math.Min(slowest, float64(c.Slots)/cost(uncachedRR))
		affinity += float64(c.Slots) / cost(suffix)
	}
	return slowest * float64(len(f.StandIns)), affinity
}

// PredictorFleets are the volatile-traffic fleets the switching
// predictor is judged on (issue 17, item 3): the suite's bursty and drift
// fleets, and volatile, which has both — gamma arrivals with a CoV of 2
// and one backend slowing 3× mid-run — on the small-cache fleet.
func PredictorFleets() []Fleet {
	var out []Fleet
	for _, f := range Fleets() {
		if f.Name == "bursty" || f.Name == "drift" {
			out = append(out, f)
		}
	}
	w := baseWorkload()
	w.Requests, w.Concurrency, w.Rate, w.Arrival, w.Burstiness = 600, 64, 150, "gamma", 0.25
	ss := smallCacheStandIns()
	// From the 350th request on, about 2 s into the run (it was set
	// at 2 s until 2026-12-06).
	ss[0].DriftAfter, ss[0].DriftFactor = 350, 3
	return append(out, Fleet{
		Name: "volatile", About: "small-cache fleet, gamma arrivals (150 req/s, CoV 2), a fast backend 3× slower from the 350th request on",
		StandIns: ss, Workload: w, SLO: 60 * time.Millisecond, CacheMatters: true,
	})
}

// PredictorPolicies compare the default predictor with the switching one
// under the default policy.
func PredictorPolicies() []string {
	return []string{sched.SLOPredictive, sched.SLOPredictive + "+" + sched.PredictorSwitching}
}

// FleetNames lists the suite's fleets.
func FleetNames() []string {
	var ns []string
	for _, f := range Fleets() {
		ns = append(ns, f.Name)
	}
	return ns
}

// OllamaFleets are the real-engine fleets: `ollama serve` instances on
// the CPU (Options.Ollama), each serving a generated model
// (internal/gguf) with one compute thread and four prompt-cache slots.
// Ollama's cache is a real prefix cache but a small one: a slot keeps one
// prompt's KV, and a request takes the slot holding its longest prefix
// when that is the least recently used one, else the least recently used
// slot with the longest prefix copied in (OLLAMA_MULTIUSER_CACHE). So an
// instance holds the prefixes of roughly its last four requests, and a
// prompt whose prefix is not among them pays its whole prefill. Prompts
// are a 512-character system prompt of pseudo-words per group (about 420
// tokens: the generated vocabulary splits them to ~0.8 tokens per
// character) and a unique 40–120-character message, so the shared prefix
// is most of every prompt, and prefill, which grows with the square of
// the prompt on a 64-wide model, costs several times more on a miss than
// on a hit (docs/routing-evaluation.md gives the measured figures). The
// "slow" instances serve a model with twice the layers under the same
// name, standing for hardware half as fast. The workload is small — 24
// warm-up requests (a group is left unseen by them with probability
// (7/8)^24 ≈ 4%, so a group's first prefill is seldom scored) and 60
// scored, in a closed loop of 2 — because four engines, the gateway and
// the load share two cores.
//
// Caching sets round-robin's tail by design, so the ⅓-of-round-robin
// target applies (decided before any run of these fleets): round-robin
// sends each of the eight groups to every instance, whose four slots then
// hold a request's prefix only when one of its last four requests shared
// it (about 40% for eight equally likely groups), so most requests pay a
// full prefill, the slow instances' the longest; keeping each group on
// one instance puts two groups on each, whose last four requests then
// almost always include the group's own.
func OllamaFleets() []Fleet {
	fast := gguf.DefaultConfig()
	slow := fast
	slow.Layers *= 2
	in := func(c gguf.Config) OllamaInstance { return OllamaInstance{Model: c, Parallel: 4, Threads: 1} }
	w := Workload{Groups: 8, PrefixChars: 512, SuffixMin: 40, SuffixMax: 120, OutputTokens: 4,
		Warmup: 24, Requests: 60, Concurrency: 2}
	f := func(name, about string, insts ...OllamaInstance) Fleet {
		return Fleet{Name: name, About: about, Ollama: insts, ModelName: OllamaModel, HealthPath: "/v1/models",
			Workload: w, SLO: ollamaSLO, CacheMatters: true}
	}
	// Answers that hold the slots: two slots an instance, more clients
	// than a group's home has slots, and answers whose max_tokens runs
	// from 8 to 48, so that a request at a busy home waits for an
	// answer to end (the slot tracker's wait, read against each answer's
	// budget), which the fleets above, four slots for two clients and
	// four-token answers, never make anyone do.
	two := func(c gguf.Config) OllamaInstance { return OllamaInstance{Model: c, Parallel: 2, Threads: 1} }
	answers := f("ollama-answers", "3 Ollama instances (2 fast, 1 with a 2× deeper model), 2 slots each, 6 groups, answers of 8–48 tokens, concurrency 4",
		two(fast), two(fast), two(slow))
	answers.Workload.Groups, answers.Workload.OutputTokens, answers.Workload.OutputTokensMax, answers.Workload.Concurrency = 6, 8, 48, 4
	return []Fleet{
		f("ollama", "4 Ollama instances (2 fast, 2 with a 2× deeper model), 4 prompt-cache slots each, 8 groups",
			in(fast), in(fast), in(slow), in(slow)),
		f("ollama-three", "3 Ollama instances (2 fast, 1 with a 2× deeper model), 4 prompt-cache slots each, 8 groups",
			in(fast), in(fast), in(slow)),
		answers,
	}
}

// ollamaSLO is the Ollama fleets' TTFT target: a cached prompt meets it
// on either kind of instance, a full prefill on a slow instance does not.
const ollamaSLO = 300 * time.Millisecond

// OllamaFleetNames lists the real-engine fleets.
func OllamaFleetNames() []string {
	var ns []string
	for _, f := range OllamaFleets() {
		ns = append(ns, f.Name)
	}
	return ns
}

// smallCacheStandIns is the small-cache fleet's backends, fresh for each
// fleet that varies them: two 2× faster, 96-block caches (smaller than the
// 256 blocks of the suite's shared prefixes).
func smallCacheStandIns() []standin.Config {
	sb := standinBase
	return []standin.Config{sb("fast-a", 96, 2), sb("fast-b", 96, 2), sb("slow-a", 96, 1), sb("slow-b", 96, 1)}
}

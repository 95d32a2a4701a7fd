package eval

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sim"
	"github.com/ttft-dev/ttft/internal/sloclass"
	"github.com/ttft-dev/ttft/internal/stats"
)

// Replica is one simulated backend.
type Replica struct {
	Name   string
	Config sim.Config
}

// Workload is a shared-prefix chat workload: every request starts with one
// of Groups system prompts of PrefixTokens tokens, followed by a unique
// suffix, as in multi-tenant assistants or RAG with shared instructions.
type Workload struct {
	Groups       int
	PrefixTokens int
	SuffixMin    int
	SuffixMax    int
	OutputMin    int
	OutputMax    int
}

// Options configure an evaluation.
type Options struct {
	Fleet    []Replica
	Workload Workload
	Policies []string
	// Rates are the Poisson arrival rates (requests/s) to sweep.
	Rates []float64
	// Requests per (policy, rate); the first 10% warm the predictors and
	// caches and are not scored.
	Requests int
	SLO      time.Duration
	Seed     uint64
}

// DefaultOptions is the documented evaluation: two fast and two slow
// replicas of Llama-3.1-8B (H100 and A10G), a 16-group shared-prefix chat
// workload and the chat class's SLO (320 ms P95 TTFT, package sloclass).
func DefaultOptions() Options {
	mk := func(gpu string) sim.Config {
		return sim.Config{Model: "llama-3.1-8b", GPU: gpu, EnablePrefixCaching: true, MaxModelLen: 8192}
	}
	return Options{
		Fleet: []Replica{
			{"h100-a", mk("h100-sxm")}, {"h100-b", mk("h100-sxm")},
			{"a10g-a", mk("a10g")}, {"a10g-b", mk("a10g")},
		},
		Workload: Workload{Groups: 16, PrefixTokens: 1536, SuffixMin: 64, SuffixMax: 768, OutputMin: 16, OutputMax: 128},
		Policies: sched.Policies(),
		Rates:    []float64{10, 20, 30, 40},
		Requests: 2000,
		SLO:      sloclass.Must(sloclass.Chat).TTFT,
		Seed:     1,
	}
}

// Row is one (policy, rate) result.
type Row struct {
	Policy     string
	Rate       float64
	N          int
	Mean       time.Duration
	P50        time.Duration
	P95        time.Duration
	P99        time.Duration
	Attainment float64 // share of scored requests with TTFT ≤ SLO
	Goodput    float64 // requests/s that met the SLO
	CacheHit   float64 // share of prompt tokens served from prefix caches
}

type request struct {
	at     time.Duration
	tokens []int
	blocks []uint64
	output int
}

// workload draws the requests for one rate; every policy sees the same ones.
func makeRequests(opt Options, rate float64) []request {
	rng := rand.New(rand.NewPCG(opt.Seed, uint64(rate*1000)))
	w := opt.Workload
	h := sched.NewBlockHasher(sched.DefaultBlockBytes)
	reqs := make([]request, opt.Requests)
	var buf []byte
	t := time.Duration(0)
	for i := range reqs {
		t += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		g := rng.IntN(w.Groups)
		n := w.PrefixTokens + w.SuffixMin + rng.IntN(w.SuffixMax-w.SuffixMin+1)
		toks := make([]int, n)
		for k := range toks {
			if k < w.PrefixTokens {
				toks[k] = 1 + g*100_000 + k
			} else {
				toks[k] = 5_000_000 + rng.IntN(1_000_000)
			}
		}
		// The gateway hashes prompt text; here four bytes per token stand
		// for it, so a 256-byte block is 64 tokens.
		buf = buf[:0]
		for _, tk := range toks {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(tk))
		}
		h.Reset()
		h.Text(string(buf))
		reqs[i] = request{at: t, tokens: toks, blocks: slices.Clone(h.Hashes()), output: w.OutputMin + rng.IntN(w.OutputMax-w.OutputMin+1)}
	}
	return reqs
}

// Run evaluates every policy at every rate.
func Run(ctx context.Context, opt Options) ([]Row, error) {
	var rows []Row
	for _, rate := range opt.Rates {
		reqs := makeRequests(opt, rate)
		for _, pol := range opt.Policies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := runOne(opt, pol, rate, reqs)
			if err != nil {
				return nil, fmt.Errorf("policy %s at %g req/s: %w", pol, rate, err)
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

type replica struct {
	eng    *sim.Engine
	busy   bool
	end    time.Duration
	result sim.StepResult
}

type inflight struct {
	t   *sched.Ticket
	req *request
	i   int
}

// runOne replays reqs through policy's scheduler onto the fleet's engines
// on one virtual clock, and scores the requests after the first 10%.
func runOne(opt Options, policy string, rate float64, reqs []request) (Row, error) {
	base := time.Unix(1_700_000_000, 0)
	f := &fleetRun{reqs: reqs, slo: opt.SLO, ttft: make([]time.Duration, len(reqs)), warm: len(reqs) / 10}
	if err := f.build(opt, policy, func() time.Time { return base.Add(f.now) }); err != nil {
		return Row{}, err
	}
	for i := range f.ttft {
		f.ttft[i] = -1
	}
	if err := f.run(); err != nil {
		return Row{}, err
	}
	return f.row(policy, rate), nil
}

// fleetRun is one policy's replay: the replicas, the scheduler, the clock
// and what each request measured.
type fleetRun struct {
	reqs                 []request
	slo                  time.Duration
	reps                 []*replica
	s                    *sched.Scheduler
	idx                  map[*sched.Backend]int
	now                  time.Duration
	ttft                 []time.Duration
	warm, next, done     int
	promptTok, cachedTok float64
}

// build makes a replica (engine) and a scheduler backend per fleet member.
func (f *fleetRun) build(opt Options, policy string, clock func() time.Time) error {
	var bs []*sched.Backend
	f.idx = map[*sched.Backend]int{}
	for i, r := range opt.Fleet {
		d, err := sim.Resolve(nil, r.Config)
		if err != nil {
			return fmt.Errorf("replica %s: %w", r.Name, err)
		}
		f.reps = append(f.reps, &replica{eng: sim.NewEngine(d)})
		// The prefix index's capacity mirrors the replica's KV cache, in
		// the gateway's 64-token blocks.
		capBlocks := d.NumBlocks * d.BlockSize / (sched.DefaultBlockBytes / 4)
		b := sched.NewBackend(sched.BackendSpec{Name: r.Name, PrefixBlocks: max(capBlocks, 1)})
		bs = append(bs, b)
		f.idx[b] = i
	}
	s, err := sched.New(sched.Options{Policy: policy, Now: clock, Seed: opt.Seed}, bs)
	f.s = s
	return err
}

// run advances the clock from event to event (an arrival or the earliest
// step end) until every request has finished.
func (f *fleetRun) run() error {
	for f.done < len(f.reqs) {
		ta := time.Duration(math.MaxInt64)
		if f.next < len(f.reqs) {
			ta = f.reqs[f.next].at
		}
		ri, te := -1, time.Duration(math.MaxInt64)
		for i, rp := range f.reps {
			if rp.busy && rp.end < te {
				ri, te = i, rp.end
			}
		}
		if ri < 0 && f.next >= len(f.reqs) {
			return fmt.Errorf("%d requests never finished", len(f.reqs)-f.done)
		}
		if ta <= te {
			f.now = ta
			if err := f.arrive(); err != nil {
				return err
			}
			continue
		}
		f.now = te
		f.stepEnded(f.reps[ri])
	}
	return nil
}

// arrive routes the next request and hands it to its replica's engine.
func (f *fleetRun) arrive() error {
	rq := &f.reqs[f.next]
	t, err := f.s.Pick(&sched.Request{Model: "m", PromptTokens: len(rq.tokens), Blocks: rq.blocks, SLO: f.slo, Class: sloclass.Chat})
	if err != nil {
		return err
	}
	rp := f.reps[f.idx[t.Backend]]
	seq, err := rp.eng.NewSeq(len(rq.tokens), rq.output, rq.tokens)
	if err != nil {
		return err
	}
	seq.Tag = &inflight{t: t, req: rq, i: f.next}
	rp.eng.Add(seq, f.now)
	f.next++
	if !rp.busy {
		f.step(rp)
	}
	return nil
}

// stepEnded tells the scheduler of the step's first tokens and finished
// requests, as the gateway would see them, and starts the next step.
func (f *fleetRun) stepEnded(rp *replica) {
	for _, em := range rp.result.Emits {
		fl := em.Seq.Tag.(*inflight)
		if em.First {
			fl.t.FirstToken()
			f.ttft[fl.i] = f.now - fl.req.at
			if fl.i >= f.warm {
				f.promptTok += float64(em.Seq.PromptLen)
				f.cachedTok += float64(em.Seq.CachedTokens)
			}
		}
		if em.Finished {
			fl.t.End(sched.OutcomeOK)
			f.done++
		}
	}
	f.step(rp)
}

func (f *fleetRun) step(rp *replica) {
	if !rp.eng.HasWork() {
		rp.busy = false
		return
	}
	rp.result = rp.eng.Step(f.now)
	rp.busy, rp.end = true, rp.result.End
	if rp.end <= f.now {
		// A zero-length step would stall the clock.
		rp.end = f.now + time.Microsecond
	}
}

// row scores the requests after the warm-up. Percentiles are
// stats.Quantile's, as every other ttft P95.
func (f *fleetRun) row(policy string, rate float64) Row {
	scored := f.ttft[f.warm:]
	xs := make([]float64, len(scored))
	met := 0
	for i, d := range scored {
		xs[i] = d.Seconds()
		if d <= f.slo {
			met++
		}
	}
	slices.Sort(xs)
	dur := (f.reqs[len(f.reqs)-1].at - f.reqs[f.warm].at).Seconds()
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	return Row{
		Policy: policy, Rate: rate, N: len(xs),
		Mean: secs(mean), P50: secs(stats.Quantile(xs, 0.5)), P95: secs(stats.Quantile(xs, 0.95)), P99: secs(stats.Quantile(xs, 0.99)),
		Attainment: float64(met) / float64(len(xs)),
		Goodput:    float64(met) / dur,
		CacheHit:   f.cachedTok / max(f.promptTok, 1),
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Format writes rows as a Markdown table.
func Format(w io.Writer, rows []Row, slo time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(tw, "| rate req/s\t policy\t mean ms\t P50 ms\t P95 ms\t P99 ms\t SLO %v attain\t goodput req/s\t prefix hit\t\n", slo)
	fmt.Fprintf(tw, "|%s\n", strings.Repeat("---\t", 9))
	for _, r := range rows {
		fmt.Fprintf(tw, "| %g\t %s\t %.0f\t %.0f\t %.0f\t %.0f\t %.1f%%\t %.1f\t %.0f%%\t\n",
			r.Rate, r.Policy, ms(r.Mean), ms(r.P50), ms(r.P95), ms(r.P99), 100*r.Attainment, r.Goodput, 100*r.CacheHit)
	}
	tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

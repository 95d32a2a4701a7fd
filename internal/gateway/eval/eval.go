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

func runOne(opt Options, policy string, rate float64, reqs []request) (Row, error) {
	base := time.Unix(1_700_000_000, 0)
	var now time.Duration
	clock := func() time.Time { return base.Add(now) }
	reps := make([]*replica, len(opt.Fleet))
	var bs []*sched.Backend
	for i, r := range opt.Fleet {
		d, err := sim.Resolve(nil, r.Config)
		if err != nil {
			return Row{}, fmt.Errorf("replica %s: %w", r.Name, err)
		}
		reps[i] = &replica{eng: sim.NewEngine(d)}
		// The prefix index's capacity mirrors the replica's KV cache, in
		// the gateway's 64-token blocks.
		capBlocks := d.NumBlocks * d.BlockSize / (sched.DefaultBlockBytes / 4)
		bs = append(bs, sched.NewBackend(sched.BackendSpec{Name: r.Name, PrefixBlocks: max(capBlocks, 1)}))
	}
	s, err := sched.New(sched.Options{Policy: policy, Now: clock, Seed: opt.Seed}, bs)
	if err != nil {
		return Row{}, err
	}
	idx := map[*sched.Backend]int{}
	for i, b := range bs {
		idx[b] = i
	}
	ttft := make([]time.Duration, len(reqs))
	for i := range ttft {
		ttft[i] = -1
	}
	var promptTok, cachedTok float64
	warm := len(reqs) / 10
	next := 0
	done := 0
	step := func(rp *replica) {
		if rp.eng.HasWork() {
			rp.result = rp.eng.Step(now)
			rp.busy, rp.end = true, rp.result.End
			if rp.end <= now {
				// A zero-length step would stall the clock.
				rp.end = now + time.Microsecond
			}
		} else {
			rp.busy = false
		}
	}
	for done < len(reqs) {
		// Next event: an arrival or the earliest step end.
		ta := time.Duration(math.MaxInt64)
		if next < len(reqs) {
			ta = reqs[next].at
		}
		ri, te := -1, time.Duration(math.MaxInt64)
		for i, rp := range reps {
			if rp.busy && rp.end < te {
				ri, te = i, rp.end
			}
		}
		if ri < 0 && next >= len(reqs) {
			return Row{}, fmt.Errorf("%d requests never finished", len(reqs)-done)
		}
		if ta <= te {
			now = ta
			rq := &reqs[next]
			t, err := s.Pick(&sched.Request{Model: "m", PromptTokens: len(rq.tokens), Blocks: rq.blocks, SLO: opt.SLO, Class: sloclass.Chat})
			if err != nil {
				return Row{}, err
			}
			rp := reps[idx[t.Backend]]
			seq, err := rp.eng.NewSeq(len(rq.tokens), rq.output, rq.tokens)
			if err != nil {
				return Row{}, err
			}
			seq.Tag = &inflight{t: t, req: rq, i: next}
			rp.eng.Add(seq, now)
			next++
			if !rp.busy {
				step(rp)
			}
			continue
		}
		now = te
		rp := reps[ri]
		for _, em := range rp.result.Emits {
			f := em.Seq.Tag.(*inflight)
			if em.First {
				f.t.FirstToken()
				ttft[f.i] = now - f.req.at
				if f.i >= warm {
					promptTok += float64(em.Seq.PromptLen)
					cachedTok += float64(em.Seq.CachedTokens)
				}
			}
			if em.Finished {
				f.t.End(sched.OutcomeOK)
				done++
			}
		}
		step(rp)
	}
	scored := ttft[warm:]
	xs := make([]float64, len(scored))
	met := 0
	for i, d := range scored {
		xs[i] = d.Seconds()
		if d <= opt.SLO {
			met++
		}
	}
	slices.Sort(xs)
	dur := (reqs[len(reqs)-1].at - reqs[warm].at).Seconds()
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	return Row{
		Policy: policy, Rate: rate, N: len(xs),
		Mean: secs(mean), P50: secs(quantile(xs, 0.5)), P95: secs(quantile(xs, 0.95)), P99: secs(quantile(xs, 0.99)),
		Attainment: float64(met) / float64(len(xs)),
		Goodput:    float64(met) / dur,
		CacheHit:   cachedTok / max(promptTok, 1),
	}, nil
}

// quantile is the nearest-rank quantile of sorted xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(k, 0)]
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

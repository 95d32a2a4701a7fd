package sim

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// CorpusPred is the simulator's prediction for one corpus row, for the
// figures the row publishes (zero where it publishes none).
type CorpusPred struct {
	TTFTMs, ITLMs, E2EMs, Tput float64
}

// config is the deployment a row describes.
func (r *CorpusRow) config() Config {
	c := Config{Model: r.Model, GPU: r.GPU, TensorParallelSize: r.TP, Engine: r.Profile,
		GPUMemoryUtilization: r.MemUtil, MaxModelLen: r.MaxLen, KVCacheDtype: r.KV}
	if strings.EqualFold(r.DType, "fp8") {
		c.Quantization = "fp8"
	}
	if r.MaxSeqs > 0 {
		c.MaxNumSeqs = r.MaxSeqs
	}
	if r.Engine == "vllm" && r.Sched == "v1" {
		// vLLM V1 caches prompt prefixes by default. Distinct prompts
		// never hit; a sweep that re-sends its prompts does (Sweep).
		c.EnablePrefixCaching = true
	}
	switch r.Sched {
	case "v0", "static":
		c.Scheduler = "v0"
	case "v1":
		c.Scheduler = "v1"
	}
	if r.Load == LoadBatch1 || r.Load == LoadStatic {
		// A fixed batch of known lengths: the engine was built (TensorRT-LLM)
		// or launched for exactly these, so size the context to them.
		c.MaxModelLen = max(r.MaxLen, r.Prompt+r.Output+16)
		c.AllowLongMaxModelLen = true
		c.MaxNumSeqs = max(256, int(r.Value))
		c.MaxNumBatchedTokens = max(c.MaxModelLen, int(r.Value)*r.Prompt, c.MaxNumSeqs)
	}
	return c
}

// resolveRow resolves a row's deployment. A served model whose default
// maximum length the KV cache cannot hold is retried at 8192 tokens: the
// engine would refuse to start otherwise, so the published run must have
// used a shorter one.
func resolveRow(cat *Catalog, r *CorpusRow) (*Deployment, error) {
	cfg := r.config()
	d, err := Resolve(cat, cfg)
	if err != nil && cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 8192
		d, err = Resolve(cat, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("corpus line %d (%s %s %s tp%d): %w", r.Line, r.Source, r.Model, r.GPU, r.TP, err)
	}
	if r.Frontend == "offline" {
		// Offline benchmarks (TensorRT-LLM's session benchmark, vLLM's
		// benchmark_latency/throughput) call the engine directly.
		d.Profile.APIOverheadMs, d.Profile.APIInflightMs = 0, 0
	}
	return d, nil
}

// predictRow predicts a row on a resolved deployment.
func predictRow(ctx context.Context, d *Deployment, r *CorpusRow) (CorpusPred, error) {
	switch r.Load {
	case LoadBatch1:
		ttft := float64(d.APIDelay(0))/1e6 + d.PrefillTime(r.Prompt, 0).Total*1e3
		return CorpusPred{TTFTMs: ttft}, nil
	case LoadStatic:
		return predictStatic(d, r), nil
	default:
		return predictServed(ctx, d, r)
	}
}

// predictStatic times one static batch: B prompts prefilled in one step,
// then output−1 decode steps of the whole batch (TensorRT-LLM's session
// benchmark, vLLM's benchmark_latency).
func predictStatic(d *Deployment, r *CorpusRow) CorpusPred {
	B, P, O := int(r.Value), r.Prompt, r.Output
	fb, fp := float64(B), float64(P)
	pre := d.stepTime(stepLoad{tokens: B * P, seqs: B, attn: fb * fp * fp / 2, prefill: true}).Total
	e2e := pre
	for k := 1; k < O; k++ {
		e2e += d.DecodeTime(B, P+k).Total
	}
	p := CorpusPred{TTFTMs: pre * 1e3, E2EMs: e2e * 1e3}
	if O > 1 {
		p.ITLMs = (e2e - pre) / float64(O-1) * 1e3
	}
	p.Tput = throughput(r, fb, fb*float64(O), e2e)
	return p
}

// throughput converts requests and output tokens over seconds to the
// row's unit.
func throughput(r *CorpusRow, reqs, outTok, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	switch r.TputUnit {
	case "req_s":
		return reqs / secs
	case "out_tok_s_gpu":
		return outTok / secs / float64(r.TP)
	default:
		return outTok / secs
	}
}

// predictServed runs a served load (closed loop, open loop, burst) through
// the offline runner, the same engine and front end as `ttft sim run`.
func predictServed(ctx context.Context, d *Deployment, r *CorpusRow) (CorpusPred, error) {
	n := r.Requests
	opt := RunOptions{Seed: 1 + r.Draw}
	switch r.Load {
	case LoadClosed:
		c := int(r.Value)
		if n <= 0 {
			n = max(40, 20*c)
		}
		opt.Concurrency = c
		// As the published sweeps ran: `vllm bench serve --max-concurrency
		// C` (and benchmark_serving.py before it) creates every request's
		// task at once and lets C through a semaphore, so the first C
		// requests reach the server together, and every request, the first
		// wave included, is in the reported median (no warm-up round). The
		// first wave's prefills share steps; with outputs of fixed length
		// the waves stay close for the whole run, as they do in the
		// simulator (a deterministic engine keeps them exactly together).
		// A `ttft bench --warmup W` run leaves its first W out instead.
		opt.Warmup = r.Warmup
	case LoadRate:
		opt.Rate = r.Value
	case LoadBurst:
		if n <= 0 {
			n = int(r.Value)
		}
		opt.NextGap = func() time.Duration { return 0 }
	}
	if n <= 0 {
		n = 200
	}
	opt.Requests = n
	if len(r.PriorRates) > 0 {
		// The server ran the sweep's higher rates first with the same
		// prompts: replay them on the engine this row then runs on, so
		// its prefix cache holds what theirs left (all of it, or what
		// later blocks did not evict).
		opt.Engine = NewEngine(d)
		for _, rate := range r.PriorRates {
			src, err := rowSource(d, r, n)
			if err != nil {
				return CorpusPred{}, err
			}
			prior := RunOptions{Seed: opt.Seed, Rate: rate, Requests: n, Engine: opt.Engine}
			if _, err := Run(ctx, d, src, prior, func(*record.Record) error { return nil }); err != nil {
				return CorpusPred{}, fmt.Errorf("corpus line %d, earlier run at %g req/s: %w", r.Line, rate, err)
			}
		}
	}
	src, err := rowSource(d, r, n+opt.Warmup)
	if err != nil {
		return CorpusPred{}, err
	}
	var ttft, itl []float64
	var outTok float64
	var done int
	var first, last time.Time
	st, err := Run(ctx, d, src, opt, func(rec *record.Record) error {
		if !rec.OK() || rec.Warmup {
			return nil
		}
		done++
		ttft = append(ttft, rec.TTFTMs)
		outTok += float64(rec.OutputTokens())
		switch r.ITLStat {
		case "p50_tpot", "mean_tpot":
			if rec.TPOTMs > 0 {
				itl = append(itl, rec.TPOTMs)
			}
		default:
			itl = append(itl, rec.ITLMs...)
		}
		if first.IsZero() || rec.Sent.Before(first) {
			first = rec.Sent
		}
		if rec.End.After(last) {
			last = rec.End
		}
		return nil
	})
	if err != nil {
		return CorpusPred{}, fmt.Errorf("corpus line %d: %w", r.Line, err)
	}
	if done == 0 {
		return CorpusPred{}, fmt.Errorf("corpus line %d: no request succeeded", r.Line)
	}
	p := CorpusPred{TTFTMs: stat(ttft, r.TTFTStat), ITLMs: stat(itl, r.ITLStat)}
	secs := st.Virtual.Seconds()
	if opt.Warmup > 0 && !first.IsZero() {
		// Closed loop: the measured window starts with the first measured
		// request.
		secs = last.Sub(first).Seconds()
	}
	p.Tput = throughput(r, float64(done), outTok, secs)
	return p, nil
}

// rowSource is the request stream a row's lengths column describes.
func rowSource(d *Deployment, r *CorpusRow, n int) (workload.Source, error) {
	kind, capTok, err := parseLengths(r.Lengths)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "geom":
		src := &EOSLengthSource{MeanPrompt: r.Prompt, MeanOutput: r.Output, Geometric: true, MaxPrompt: min(4*r.Prompt, d.MaxModelLen/2), Requests: n, Seed: uint64(r.Line) + r.Draw}
		if r.Sweep != "" {
			// Every run of the sweep sent the same prompts.
			src.Seed, src.Tokens = r.SweepSeed+r.Draw, true
		}
		return src, nil
	case "uniform":
		return &EOSLengthSource{MeanPrompt: r.Prompt, MeanOutput: r.Output, Uniform: true, Requests: n, Seed: uint64(r.Line) + r.Draw}, nil
	case "eos":
		return &EOSLengthSource{MeanPrompt: r.Prompt, MeanOutput: r.Output, EOSCap: capTok, Requests: n, Seed: uint64(r.Line) + r.Draw}, nil
	}
	return &LengthSource{PromptTokens: r.Prompt, MaxTokens: r.Output, MinTokens: r.Output, Requests: n}, nil
}

// stat is the mean, the median or the P90, as a row publishes.
func stat(xs []float64, which string) float64 {
	if len(xs) == 0 {
		return 0
	}
	if which == "p90" {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		return s[min(len(s)-1, int(0.9*float64(len(s))))]
	}
	if strings.HasPrefix(which, "mean") {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	return medianOf(xs)
}

// logErr is ln(pred/measured), 0 when either is missing.
func logErr(pred, meas float64) (float64, bool) {
	if pred <= 0 || meas <= 0 {
		return 0, false
	}
	return math.Log(pred / meas), true
}

// SustainableRate is the highest Poisson rate (req/s) at which the
// deployment and workload of row keep their P90 TTFT within sloP90Ms, to
// within 5 %: the planner's question ("what load does one replica carry
// within the SLO") asked of a published deployment, whose own sweep
// brackets the answer. The search runs the row's own request count and
// length mix at each rate; it gives up above maxRate.
func SustainableRate(ctx context.Context, cat *Catalog, row CorpusRow, sloP90Ms, maxRate float64) (float64, error) {
	row.Load, row.TTFTStat = LoadRate, "p90"
	// The planner's question is about a fresh server and prompts it has
	// not seen: no earlier runs of the published sweep warm its cache.
	row.Sweep, row.PriorRates = "", nil
	d, err := resolveRow(cat, &row)
	if err != nil {
		return 0, err
	}
	meets := func(rate float64) (bool, error) {
		r := row
		r.Value = rate
		p, err := predictServed(ctx, d, &r)
		if err != nil {
			return false, err
		}
		return p.TTFTMs <= sloP90Ms, nil
	}
	lo, hi := 0.0, 0.25
	for {
		ok, err := meets(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		if lo = hi; hi >= maxRate {
			return maxRate, nil
		}
		hi = math.Min(2*hi, maxRate)
	}
	for hi-lo > 0.05*hi {
		mid := (lo + hi) / 2
		ok, err := meets(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// CapacityCheck is the planner's question asked of one published
// deployment: the highest Poisson rate one replica carries within a P90
// TTFT limit, simulated, beside the bracket the deployment's own published
// sweep gives (the highest measured rate within the limit and the lowest
// beyond it).
type CapacityCheck struct {
	Row        CorpusRow // the deployment and workload (its first corpus row)
	SLOP90Ms   float64
	PubLo      float64 // highest published rate whose P90 TTFT met the limit
	PubHi      float64 // lowest published rate that missed it (0: none measured)
	MaxRate    float64 // search cap
	Simulated  float64 // SustainableRate
	Assessment string  // inside, above, below, or consistent (no upper bracket)
}

// capacityDeployment is one deployment PublishedCapacity checks.
type capacityDeployment struct {
	model, gpu  string
	slo, lo, hi float64
}

// publishedCapacity lists the deployments checked: IOG's vLLM 0.8.5 sweeps
// (ShareGPT lengths, 200 requests, Poisson 1–32 req/s), whose P90 TTFT per
// rate is published, with the limit each is asked about.
func publishedCapacity() []capacityDeployment {
	return []capacityDeployment{
		{"llama-3-8b", "rtx-4090", 200, 16, 32},
		{"llama-3-8b", "h100-pcie", 100, 32, 0},
		{"llama-3.1-70b", "h100-pcie", 500, 16, 32},
		{"llama-3-70b", "h100-pcie", 500, 1, 4},
	}
}

// PublishedCapacity runs SustainableRate on each published deployment of
// the corpus rows (DefaultCorpus when rows is nil) and says where the
// answer falls against the published bracket. `ttft sim validate --plan`
// prints it; TestSustainableRatePublished bounds it.
func PublishedCapacity(ctx context.Context, cat *Catalog, rows []CorpusRow) ([]CapacityCheck, error) {
	if rows == nil {
		var err error
		if rows, err = DefaultCorpus(); err != nil {
			return nil, err
		}
	}
	const maxRate = 64
	var out []CapacityCheck
	for _, pc := range publishedCapacity() {
		var row *CorpusRow
		for i := range rows {
			if r := &rows[i]; r.Source == "iog" && r.Model == pc.model && r.GPU == pc.gpu {
				row = r
				break
			}
		}
		if row == nil {
			return nil, fmt.Errorf("published capacity: no iog row for %s on %s", pc.model, pc.gpu)
		}
		got, err := SustainableRate(ctx, cat, *row, pc.slo, maxRate)
		if err != nil {
			return nil, fmt.Errorf("published capacity of %s on %s: %w", pc.model, pc.gpu, err)
		}
		c := CapacityCheck{Row: *row, SLOP90Ms: pc.slo, PubLo: pc.lo, PubHi: pc.hi, MaxRate: maxRate, Simulated: got}
		switch {
		case got < pc.lo:
			c.Assessment = "below"
		case pc.hi == 0:
			c.Assessment = "consistent"
		case got >= pc.hi:
			c.Assessment = "above"
		default:
			c.Assessment = "inside"
		}
		out = append(out, c)
	}
	return out, nil
}

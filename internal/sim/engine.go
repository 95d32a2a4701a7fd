package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ttft-dev/ttft/internal/workload"
)

// Seq is one request inside the engine.
type Seq struct {
	ID        uint64
	PromptLen int
	MaxTokens int
	// Arrival is when the engine could first schedule it (engine time).
	Arrival time.Duration

	// Output counts generated tokens; CachedTokens the prompt tokens served
	// from the prefix cache at first scheduling.
	Output       int
	CachedTokens int
	Preemptions  int
	// SkippedTokens are prompt tokens covered by blocks that score-based
	// eviction (evict:F) dropped after an earlier turn: neither recomputed
	// nor attended to. RetainedTokens, set when the sequence finishes with
	// prefix caching on, are the tokens' worth of its blocks (prompt and
	// reply) left in the cache for a next turn that re-sends this
	// conversation (after eviction).
	SkippedTokens  int
	RetainedTokens int
	// FirstScheduled and FirstToken are engine times (valid when Started /
	// Output > 0).
	FirstScheduled time.Duration
	FirstTokenAt   time.Duration
	Started        bool
	Finished       bool
	FinishReason   string
	// EOS: the reply ends with an end-of-sequence token once it has
	// MaxTokens tokens (its natural length: the client set no limit and
	// did not ignore EOS), so it finishes with reason "stop"; otherwise
	// MaxTokens is a limit and the reason is "length", as it is whenever
	// the sequence reaches the maximum model length.
	EOS bool

	// Tag is the driver's own data (the HTTP stream, the offline record).
	Tag any

	// hashes are the block hash chain: the prompt's full blocks (the first
	// promptBlocks, what a new or preempted sequence looks up), then, with
	// chain set, those its output completes (see outChain).
	hashes          []uint64
	promptBlocks    int
	chain           *outChain
	numComputed     int
	blocks          []int32
	numHashedBlocks int
	numReleased     int // leading block slots released by a sliding window
	skipped         int // tokens of s.blocks' evicted (-1) slots, while allocated
	specAcc         float64
	aborted         bool
	// noEvict: the driver knows this request is not a conversation turn
	// (the offline runner: no Session), so evict:F leaves its blocks alone.
	noEvict bool
}

func (s *Seq) numTokens() int { return s.PromptLen + s.Output }

// Emit is what one step produced for one sequence, at the step's end.
type Emit struct {
	Seq      *Seq
	Tokens   int  // new output tokens (more than one with speculative decoding)
	First    bool // these include the first output token
	Finished bool
	// Drafted is the number of draft tokens this step verified
	// (speculative decoding; 0 otherwise): Tokens−1 of them were
	// accepted, the last token being the target model's own.
	Drafted int
}

// StepResult describes one engine step.
type StepResult struct {
	Start, End time.Duration
	Breakdown  StepBreakdown
	Tokens     int // tokens computed
	Seqs       int
	Preempted  int
	Emits      []Emit // valid until the next Step
}

// Engine is the vLLM-v1-like scheduler and KV cache of one replica. It is
// not safe for concurrent use: each driver owns one on one goroutine.
type Engine struct {
	d       *Deployment
	kv      *kvCache
	waiting []*Seq // FCFS; preempted sequences go back to the front
	wHead   int
	running []*Seq
	rng     *rand.Rand
	specE   float64

	emits   []Emit
	batch   []sched
	nextID  uint64
	stats   EngineStats
	aborted int

	// evicted holds the hashes of blocks dropped by evict:F (nil
	// under other policies): a later prompt whose prefix chain runs
	// through them skips them instead of stopping there.
	evicted  map[uint64]struct{}
	evictBuf []evictCand
	// words tokenises replies for the output blocks' hashes (nil: the
	// default tokenizer's).
	words *OutputTokens
	// decodesSincePrefill counts decode-only steps since the last
	// prefill step (v0 scheduler), for the profile's waiting policy.
	decodesSincePrefill int
	// noOutputCache caches prompt blocks only (the simulator before output
	// caching), for tests that compare the two.
	noOutputCache bool
	// SGLang's admission state (profile InitNewTokenRatio > 0): the share
	// of running requests' remaining output reserved, whether the last
	// prefill pass ran out of room (batch_is_full: no new pass until a
	// running request leaves), and the request whose prompt is being
	// prefilled in chunks (PrefillChunks).
	newTokenRatio float64
	batchFull     bool
	chunked       *Seq
}

type sched struct {
	s *Seq
	n int
}

// EngineStats are cumulative counters (vLLM's names in comments).
type EngineStats struct {
	Steps          int64
	PromptTokens   int64 // vllm:prompt_tokens_total
	GenTokens      int64 // vllm:generation_tokens_total
	Preemptions    int64 // vllm:num_preemptions_total
	PrefixQueries  int64 // vllm:prefix_cache_queries_total (tokens)
	PrefixHits     int64 // vllm:prefix_cache_hits_total (tokens)
	BusyTime       time.Duration
	Finished       int64
	ComputedTokens int64
}

// NewEngine builds an engine for a resolved deployment.
func NewEngine(d *Deployment) *Engine {
	e := &Engine{
		d:   d,
		kv:  newKVCache(d.NumBlocks, d.BlockSize),
		rng: rand.New(rand.NewPCG(uint64(d.Config.Seed), 0x7474667473696d)),
	}
	if d.Evict > 0 {
		e.evicted = make(map[uint64]struct{})
	}
	if k := d.Config.Speculative.NumSpeculativeTokens; k > 0 {
		a := d.Config.Speculative.Acceptance
		// Expected tokens per verification step: 1 + a + a² + … + a^k.
		e.specE = (1 - math.Pow(a, float64(k+1))) / (1 - a)
	}
	return e
}

// Deployment returns the engine's configuration.
func (e *Engine) Deployment() *Deployment { return e.d }

// Stats returns the cumulative counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// NumRunning and NumWaiting are vLLM's running/waiting gauges.
func (e *Engine) NumRunning() int { return len(e.running) }
func (e *Engine) NumWaiting() int { return len(e.waiting) - e.wHead }

// KVUsage is the fraction of KV blocks held.
func (e *Engine) KVUsage() float64 { return e.kv.usage() }

// HasWork reports whether a step would do anything.
func (e *Engine) HasWork() bool { return len(e.running) > 0 || e.NumWaiting() > 0 }

// NewSeq validates a request and makes its sequence. tokens, when known,
// are the prompt's token IDs (used for prefix-cache hashing); otherwise the
// prompt never shares a prefix.
func (e *Engine) NewSeq(promptLen, maxTokens int, tokens []int) (*Seq, error) {
	e.nextID++
	return newSeq(e.d, e.nextID, promptLen, maxTokens, tokens, e.words, !e.noOutputCache)
}

// SetOutputTokenizer names the tokenizer a session source re-tokenises
// replies with (workload.SessionOptions.Tokenizer), so that the blocks a
// reply fills hash as the next turn's prompt will; by default it is
// workload.DefaultTokenizer, as for session sources. Call it before NewSeq.
func (e *Engine) SetOutputTokenizer(tok workload.Tokenizer) {
	e.words = nil
	if tok != nil {
		e.words = newOutputTokens(tok)
	}
}

// NewSeq is Engine.NewSeq for callers off the engine's goroutine; id must be
// unique within the engine.
//
// With the prompt's tokens known, the blocks the output fills are cached too
// (as vLLM does), hashed as the prompt followed by the reply re-tokenised
// by the default tokenizer: what a next turn re-sending this conversation
// as token IDs carries (workload.Sessions). A driver whose next turn forms
// its prompt otherwise re-bases the chain with Seq.ChainOutput (the live
// server does, for chat prompts).
func NewSeq(d *Deployment, id uint64, promptLen, maxTokens int, tokens []int) (*Seq, error) {
	return newSeq(d, id, promptLen, maxTokens, tokens, nil, true)
}

func newSeq(d *Deployment, id uint64, promptLen, maxTokens int, tokens []int, words *OutputTokens, cacheOutput bool) (*Seq, error) {
	if promptLen <= 0 {
		return nil, fmt.Errorf("prompt must have at least one token")
	}
	if promptLen >= d.MaxModelLen {
		return nil, &LengthError{Prompt: promptLen, Max: d.MaxModelLen}
	}
	if maxTokens <= 0 {
		maxTokens = 1
	}
	if promptLen+maxTokens > d.MaxModelLen {
		maxTokens = d.MaxModelLen - promptLen
	}
	s := &Seq{ID: id, PromptLen: promptLen, MaxTokens: maxTokens}
	if d.Config.EnablePrefixCaching {
		if len(tokens) >= promptLen {
			s.hashes = blockHashes(tokens[:promptLen], d.BlockSize)
			s.promptBlocks = len(s.hashes)
			if words == nil {
				words = defaultOutputTokens()
			}
			if cacheOutput {
				s.setChain(tokens[:promptLen], s.hashes, words, d.BlockSize)
			}
		} else {
			// Unknown tokens never share a prefix, so no later prompt
			// could reach blocks chained after them: output stays uncached.
			s.hashes = syntheticHashes(id, promptLen, d.BlockSize)
			s.promptBlocks = len(s.hashes)
		}
	}
	return s, nil
}

// LengthError is a prompt at or over the maximum model length; the live
// server answers it with HTTP 400 as vLLM does.
type LengthError struct{ Prompt, Max int }

func (l *LengthError) Error() string {
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages. Please reduce the length of the messages.", l.Max, l.Prompt)
}

// Add queues a sequence that became schedulable at engine time at.
func (e *Engine) Add(s *Seq, at time.Duration) {
	if !e.HasWork() {
		// SGLang re-initialises its estimate whenever the server idles.
		e.newTokenRatio = e.d.Profile.InitNewTokenRatio
	}
	s.Arrival = at
	e.waiting = append(e.waiting, s)
}

// Abort drops a sequence (client gone) at the next step.
func (e *Engine) Abort(s *Seq) {
	if !s.Finished && !s.aborted {
		s.aborted = true
		e.aborted++
	}
}

func (e *Engine) dropAborted() {
	if e.aborted == 0 {
		return
	}
	keep := e.running[:0]
	for _, s := range e.running {
		if s.aborted {
			if s == e.chunked {
				e.chunked = nil
			}
			e.batchFull = false
			e.kv.free(s)
			s.Finished, s.FinishReason = true, "abort"
			continue
		}
		keep = append(keep, s)
	}
	clear(e.running[len(keep):])
	e.running = keep
	w := e.waiting[:e.wHead]
	for _, s := range e.waiting[e.wHead:] {
		if s.aborted {
			s.Finished, s.FinishReason = true, "abort"
			continue
		}
		w = append(w, s)
	}
	clear(e.waiting[len(w):])
	e.waiting = w
	e.aborted = 0
}

func (e *Engine) popWaiting() *Seq {
	s := e.waiting[e.wHead]
	e.waiting[e.wHead] = nil
	e.wHead++
	if e.wHead == len(e.waiting) {
		e.waiting, e.wHead = e.waiting[:0], 0
	} else if e.wHead > 1024 && e.wHead*2 > len(e.waiting) {
		n := copy(e.waiting, e.waiting[e.wHead:])
		clear(e.waiting[n:])
		e.waiting, e.wHead = e.waiting[:n], 0
	}
	return s
}

func (e *Engine) pushWaitingFront(s *Seq) {
	if e.wHead > 0 {
		e.wHead--
		e.waiting[e.wHead] = s
		return
	}
	e.waiting = append(e.waiting, nil)
	copy(e.waiting[1:], e.waiting)
	e.waiting[0] = s
}

// preempt frees a running sequence's KV and puts it back at the front of
// the queue to be recomputed (prompt plus output so far).
func (e *Engine) preempt(s *Seq) {
	e.kv.free(s)
	s.numComputed = 0
	s.specAcc = 0
	s.Preemptions++
	e.stats.Preemptions++
	e.pushWaitingFront(s)
}

// Step schedules and times one batch starting at now. Its effects (tokens,
// finished sequences, freed blocks) take place at End; callers deliver
// Emits then and must not call Step again before End.
func (e *Engine) Step(now time.Duration) StepResult {
	e.dropAborted()
	e.batch = e.batch[:0]
	e.emits = e.emits[:0]
	preempted := e.schedule(now)
	l := e.batchLoad()
	bd, dur := e.stepDuration(l)
	end := now + dur
	e.apply(end)
	e.stats.Steps++
	e.stats.BusyTime += dur
	e.stats.PrefixQueries, e.stats.PrefixHits = e.kv.queries, e.kv.hits
	return StepResult{Start: now, End: end, Breakdown: bd, Tokens: l.tokens, Seqs: l.seqs, Preempted: preempted, Emits: e.emits}
}

// schedule fills e.batch for a step starting at now, within the token
// budget, by the deployment's scheduler, and returns how many running
// sequences it preempted.
func (e *Engine) schedule(now time.Duration) (preempted int) {
	d := e.d
	budget := d.MaxNumBatchedTokens
	if d.Config.Scheduler == "v0" && d.Profile.InitNewTokenRatio > 0 {
		return e.scheduleSGLang(now, budget)
	}
	if d.Config.Scheduler == "v0" {
		// vLLM ≤ 0.6 default: a step prefills whole waiting prompts if any
		// fit, and only otherwise decodes the running ones.
		if pb := e.prefillBudget(budget); e.prefillAllowed(pb) {
			e.schedWaiting(now, pb, false)
		}
		if len(e.batch) == 0 {
			_, preempted = e.schedRunning(budget)
			e.decodesSincePrefill++
		} else {
			e.decodesSincePrefill = 0
		}
		return preempted
	}
	// vLLM v1: running first, then waiting, unless this step preempted.
	budget, preempted = e.schedRunning(budget)
	if preempted == 0 {
		e.schedWaiting(now, budget, !d.Config.DisableChunkedPrefill)
	}
	return preempted
}

// prefillBudget is the token budget of a v0 prefill batch: the step's, or
// the profile's PrefillBatchTokens where that is smaller (TGI's
// max_batch_prefill_tokens, which its router applies to the prompts it
// collects for a prefill, apart from the decodes). A first waiting prompt
// longer than the cap is given a budget of its own length, so it runs
// alone instead of waiting for ever (TGI refuses to start with
// max_input_tokens above the cap, so a real server never meets one). A
// deployment that sets its own budget (--max-num-batched-tokens, TGI's
// --max-batch-prefill-tokens) overrides the profile's cap.
func (e *Engine) prefillBudget(budget int) int {
	c := e.d.Profile.PrefillBatchTokens
	if c <= 0 || c >= budget || e.d.Config.MaxNumBatchedTokens > 0 {
		return budget
	}
	if e.NumWaiting() > 0 {
		s := e.waiting[e.wHead]
		if n := s.numTokens() - s.numComputed; n > c {
			return min(n, budget)
		}
	}
	return c
}

// prefillAllowed applies the profile's waiting policy (TGI's router):
// with sequences decoding, a prefill batch starts only when the prompts
// it would take (FCFS, whole, within budget) number at least
// WaitingServedRatio × the running sequences, or once MaxWaitingTokens
// decode steps have run since the last prefill. Without the policy, or
// with nothing running, it always may.
func (e *Engine) prefillAllowed(budget int) bool {
	p := &e.d.Profile
	if p.WaitingServedRatio <= 0 || len(e.running) == 0 || e.NumWaiting() == 0 {
		return true
	}
	if p.MaxWaitingTokens > 0 && e.decodesSincePrefill >= p.MaxWaitingTokens {
		return true
	}
	need := int(math.Floor(float64(len(e.running)) * p.WaitingServedRatio))
	// TGI's router collects the batch within both its prefill budget and
	// what is left of its total token budget (each request's prompt and
	// max_new_tokens reserved), then compares its size with need.
	headroom := -1
	if p.GuaranteedNoEvict {
		headroom = e.noEvictHeadroom()
	}
	fit := 0
	for _, s := range e.waiting[e.wHead:] {
		n := s.numTokens() - s.numComputed
		if n > budget || fit >= need {
			break
		}
		if headroom >= 0 {
			full := e.blocksToFinish(s)
			if full > headroom {
				break
			}
			headroom -= full
		}
		budget -= n
		fit++
	}
	return fit >= need
}

// schedRunning batches the running sequences, in order, while the budget
// lasts, preempting from the back when the KV cache is full. It returns
// the budget left and the preemptions.
func (e *Engine) schedRunning(budget int) (left, preempted int) {
	k := e.d.Config.Speculative.NumSpeculativeTokens
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := s.numTokens() - s.numComputed
		if k > 0 && n == 1 {
			// Speculative decoding: verify k draft tokens, no more than
			// the output still to come.
			n = 1 + k
			if rem := s.MaxTokens - s.Output; n > rem+1 {
				n = rem + 1
			}
		}
		if n > budget {
			n = budget
		}
		ok, p := e.makeRoom(s, s.numComputed+n)
		preempted += p
		if !ok {
			break
		}
		e.batch = append(e.batch, sched{s, n})
		budget -= n
	}
	return budget, preempted
}

// makeRoom allocates s's blocks for total tokens, preempting running
// sequences from the back (the most recently admitted first) until they
// fit. ok is false when s itself had to go.
func (e *Engine) makeRoom(s *Seq, total int) (ok bool, preempted int) {
	for !e.kv.allocate(s, total) {
		victim := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		e.preempt(victim)
		preempted++
		if victim == s {
			return false, preempted
		}
	}
	return true, preempted
}

// schedWaiting admits waiting sequences FCFS into the batch while the
// sequence limit, the budget and the KV cache allow; without chunk, only
// prompts that fit the budget whole. It returns the budget left.
func (e *Engine) schedWaiting(now time.Duration, budget int, chunk bool) int {
	d := e.d
	noEvict := d.Profile.GuaranteedNoEvict
	headroom := 0
	if noEvict {
		headroom = e.noEvictHeadroom()
	}
	watermark := 0
	if len(e.running) > 0 {
		// vLLM would refuse outright a prompt that only an idle cache
		// holds; here it runs alone rather than wait forever.
		watermark = int(d.Profile.KVWatermark * float64(d.NumBlocks))
	}
	for e.NumWaiting() > 0 && len(e.running) < d.MaxNumSeqs && budget > 0 {
		s := e.waiting[e.wHead]
		hit, covered := e.cachedPrefix(s)
		n := s.numTokens() - covered*d.BlockSize
		if n > budget {
			if !chunk {
				break
			}
			n = budget
		}
		// Check room before touching refcounts: hit blocks sitting in
		// the free queue stop being free once taken. Evicted slots
		// take no block.
		need := (covered*d.BlockSize+n+d.BlockSize-1)/d.BlockSize - covered
		if need+e.freeAmongHits(s.hashes[:covered])+watermark > e.kv.numFree() {
			break
		}
		if noEvict {
			// The whole request must fit beside what the running ones
			// still need to finish.
			full := e.blocksToFinish(s) - covered + e.freeAmongHits(s.hashes[:covered])
			if full > headroom {
				break
			}
			headroom -= full
		}
		e.popWaiting()
		e.start(s, now, hit, covered, n)
		budget -= n
	}
	return budget
}

// blocksToFinish is the blocks s holds when it ends at max_tokens (or the
// model's maximum length).
func (e *Engine) blocksToFinish(s *Seq) int {
	bs := e.d.BlockSize
	return (min(s.PromptLen+s.MaxTokens, e.d.MaxModelLen) + bs - 1) / bs
}

// noEvictHeadroom is the free blocks less those the running sequences
// still need to reach their ends (TensorRT-LLM's GUARANTEED_NO_EVICT
// accounting): what a new request may reserve in full.
func (e *Engine) noEvictHeadroom() int {
	free := e.kv.numFree()
	for _, s := range e.running {
		if more := e.blocksToFinish(s) - len(s.blocks); more > 0 {
			free -= more
		}
	}
	return free
}

// cachedPrefix returns covered, the leading prompt blocks of s needing no
// compute, of which hit are cached and covered−hit were evicted (evict:F).
// Only prompt blocks are looked up: a sequence preempted and recomputed
// does not take back its own output blocks (vLLM does; left out so that
// single-turn runs time as before).
func (e *Engine) cachedPrefix(s *Seq) (hit, covered int) {
	ph := s.hashes[:s.promptBlocks]
	if s.numComputed != 0 || len(ph) == 0 {
		return 0, 0
	}
	if e.evicted != nil {
		covered, hit = e.kv.cover(ph, s.numTokens(), e.evicted)
		return hit, covered
	}
	hit = e.kv.lookup(ph, s.numTokens())
	return hit, hit
}

// start runs s, just taken from the waiting queue, from its covered
// prefix: it takes the cached blocks, allocates those for n new tokens and
// batches them. The first time, it counts the prefix-cache query and marks
// s scheduled at now.
func (e *Engine) start(s *Seq, now time.Duration, hit, covered, n int) {
	d := e.d
	if !s.Started {
		if d.Config.EnablePrefixCaching {
			e.kv.queries += int64(s.PromptLen)
			e.kv.hits += int64(hit * d.BlockSize)
		}
		s.CachedTokens = hit * d.BlockSize
		s.SkippedTokens = (covered - hit) * d.BlockSize
		e.stats.PromptTokens += int64(s.PromptLen)
		s.Started = true
		s.FirstScheduled = now
	}
	e.kv.acquireCached(s, covered)
	s.numComputed = covered * d.BlockSize
	s.skipped = (covered - hit) * d.BlockSize
	if !e.kv.allocate(s, s.numComputed+n) {
		panic("sim: KV allocation failed after room check") // invariant
	}
	e.running = append(e.running, s)
	e.batch = append(e.batch, sched{s, n})
}

// batchLoad is what the roofline needs to know of the batch.
func (e *Engine) batchLoad() stepLoad {
	w := float64(e.d.Window)
	var l stepLoad
	for _, b := range e.batch {
		// Context attended to and read: the computed tokens less those
		// whose blocks eviction dropped (the kept subset, as compress's
		// fewer entries).
		c := float64(b.s.numComputed - b.s.skipped)
		n := float64(b.n)
		l.tokens += b.n
		if w > 0 {
			// Sliding window: each new token attends to at most W.
			l.attn += n * math.Min(c+n/2, w)
			c = math.Min(c, w)
		} else {
			l.attn += n * (c + n/2)
		}
		l.ctxRead += c
		if b.s.numComputed == b.s.numTokens()-1 {
			l.decodes++
			l.draftCtx += c
		} else {
			l.prefill = true
		}
	}
	l.seqs = len(e.batch)
	return l
}

// stepDuration times a batch of load l: the roofline, with jitter when
// configured; a non-empty batch takes at least a nanosecond.
func (e *Engine) stepDuration(l stepLoad) (StepBreakdown, time.Duration) {
	bd := e.d.stepTime(l)
	if j := e.d.Config.Jitter; j > 0 && bd.Total > 0 {
		f := 1 + j*e.rng.NormFloat64()
		bd.Total *= math.Max(0.5, math.Min(f, 2))
	}
	dur := time.Duration(bd.Total * 1e9)
	if dur <= 0 && len(e.batch) > 0 {
		dur = 1
	}
	return bd, dur
}

// apply commits the batch at the step's end: computed tokens, outputs,
// prefix-cache commits and finished sequences.
func (e *Engine) apply(end time.Duration) {
	finished := false
	for _, b := range e.batch {
		if e.advance(b.s, b.n, end) {
			finished = true
		}
	}
	if finished {
		e.batchFull = false // a request left: SGLang tries a prefill again
		keep := e.running[:0]
		for _, s := range e.running {
			if !s.Finished {
				keep = append(keep, s)
			}
		}
		clear(e.running[len(keep):])
		e.running = keep
	}
}

// advance applies n computed tokens of s at end and emits what they
// produced; it reports whether s finished.
func (e *Engine) advance(s *Seq, n int, end time.Duration) (finished bool) {
	d := e.d
	drafted := 0
	if d.Config.Speculative.NumSpeculativeTokens > 0 && s.numComputed == s.numTokens()-1 {
		drafted = n - 1 // a verification step: the draft tokens after the last one
	}
	produced := e.compute(s, n)
	e.stats.ComputedTokens += int64(n)
	if s.chain != nil && produced > 0 {
		s.extendChain(d.BlockSize)
	}
	if len(s.hashes) > 0 {
		e.kv.commit(s)
	}
	if d.Window > 0 {
		e.kv.slide(s, d.Window)
	}
	if produced == 0 {
		return false
	}
	e.stats.GenTokens += int64(produced)
	first := s.Output == produced && s.FirstTokenAt == 0
	if first {
		s.FirstTokenAt = end
	}
	em := Emit{Seq: s, Tokens: produced, First: first, Drafted: drafted}
	if s.Output >= s.MaxTokens || s.numTokens() >= d.MaxModelLen {
		s.Finished, s.FinishReason = true, "length"
		if s.EOS && s.numTokens() < d.MaxModelLen {
			s.FinishReason = "stop"
		}
		em.Finished = true
		e.retire(s)
		finished = true
		e.stats.Finished++
	}
	e.emits = append(e.emits, em)
	return finished
}

// compute advances s by n computed tokens and returns the output tokens
// they produced: a prefill chunk produces one when it completes the
// prompt, a decode one, a speculative verification those accepted.
func (e *Engine) compute(s *Seq, n int) (produced int) {
	decoding := s.numComputed == s.numTokens()-1
	if decoding && e.d.Config.Speculative.NumSpeculativeTokens > 0 {
		e.specAcc(s)
		produced = int(s.specAcc)
		s.specAcc -= float64(produced)
		produced = max(1, min(produced, n))
		if rem := s.MaxTokens - s.Output; produced > rem {
			produced = rem
		}
		s.numComputed += produced
		s.Output += produced
		return produced
	}
	s.numComputed += n
	if s.numComputed >= s.numTokens() {
		produced = 1
		s.Output++
	}
	return produced
}

func (e *Engine) specAcc(s *Seq) { s.specAcc += e.specE }

// freeAmongHits counts cached blocks that are in the free queue and would
// leave it when taken as hits.
func (e *Engine) freeAmongHits(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if b, ok := e.kv.cache[h]; ok && e.kv.inFree(b) {
			n++
		}
	}
	return n
}

// evictCand is a retained block that score-based eviction may drop.
type evictCand struct {
	score, hash uint64
}

// retire frees a finished sequence's blocks. Its full blocks, prompt and
// reply (see outChain), stay in the prefix cache (LRU), where the
// conversation's next turn, re-sending this prompt and the reply as its
// prefix, finds them; RetainedTokens counts them. Under evict:F the
// fraction F of them (rounded to whole blocks) with the lowest attention
// scores is dropped first: reply blocks are candidates like prompt blocks,
// since the reply is history for the next turn (the session model's
// held = (held + the turn's tokens) × (1 − F) counts it too).
//
// Attention scores are not simulated: a block's score is a fixed
// pseudo-random function of its hash, so the choice is deterministic and a
// block that survived one turn's eviction tends to survive the next (as
// accumulated-attention heavy hitters do in H2O); only how many blocks go
// matters for timing and memory. A dropped block's hash is remembered in
// e.evicted, and the next turn's prompt maps onto the cache as: kept blocks
// are prefix hits, dropped blocks are skipped — not recomputed and not
// attended to (the model attends to the kept subset, as with compress) —
// and only the turn's new tokens (the new user message, and the reply's
// partial last block) are prefilled. The dropped blocks' memory is freed
// at once, at the head of the free queue (reused first).
func (e *Engine) retire(s *Seq) {
	if len(s.hashes) == 0 {
		e.kv.free(s)
		return
	}
	k := e.kv
	cands := e.evictBuf[:0]
	for j := 0; j < s.numHashedBlocks && j < len(s.blocks); j++ {
		if s.blocks[j] < 0 {
			continue // evicted earlier or out of a sliding window
		}
		h := s.hashes[j]
		if _, ok := k.cache[h]; ok {
			cands = append(cands, evictCand{score: mix64(h ^ 0x73636f7265), hash: h})
		}
	}
	drop := 0
	if e.evicted != nil && !s.noEvict {
		drop = int(math.Round(e.d.Evict * float64(len(cands))))
	}
	var dropped []int32
	if drop > 0 {
		slices.SortFunc(cands, func(a, b evictCand) int { return cmp.Compare(a.score, b.score) })
		for _, c := range cands[:drop] {
			b := k.cache[c.hash]
			delete(k.cache, c.hash)
			k.hashed[b] = false
			e.evicted[c.hash] = struct{}{}
			dropped = append(dropped, b)
		}
	}
	s.RetainedTokens = (len(cands) - drop) * e.d.BlockSize
	e.evictBuf = cands[:0]
	k.free(s)
	for _, b := range dropped {
		if k.queue.Contains(b) {
			// At the front of the free queue: the next block reused.
			k.queue.MoveToFront(b)
		}
	}
}

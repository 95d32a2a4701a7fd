package sim

import (
	"slices"
	"time"
)

// clipMaxNewTokens is SGLang's CLIP_MAX_NEW_TOKENS_ESTIMATION (default
// 4096): a request's max_tokens counts at most this much in the admission
// estimate, so a huge limit does not block admission (it still decodes to
// its limit).
const clipMaxNewTokens = 4096

// scheduleSGLang is SGLang's event loop step (Scheduler.get_next_batch_to_run
// without --enable-mixed-chunk): a prefill batch whenever a chunked prompt
// is in progress or requests wait and the last pass did not run out of
// room; otherwise a decode step of every running request, after checking
// that each has room for one more token (retracting some when not).
func (e *Engine) scheduleSGLang(now time.Duration, budget int) (preempted int) {
	if len(e.running) == 0 {
		// An empty running batch is never full (update_running_batch).
		e.batchFull = false
	}
	if e.chunked != nil || (!e.batchFull && e.NumWaiting() > 0) {
		e.sglangPrefill(now, budget)
	}
	if len(e.batch) > 0 {
		return 0
	}
	if len(e.running) == 0 {
		return 0
	}
	if e.decodeBlocks() > e.kv.numFree() {
		preempted = e.retractDecode()
	} else {
		p := &e.d.Profile
		decay := 0.0
		if p.NewTokenRatioDecaySteps > 0 {
			decay = (p.InitNewTokenRatio - p.MinNewTokenRatio) / p.NewTokenRatioDecaySteps
		}
		e.newTokenRatio = max(e.newTokenRatio-decay, p.MinNewTokenRatio)
	}
	_, p := e.schedRunning(budget)
	return preempted + p
}

// reservedOutput is the KV tokens SGLang's PrefillAdder holds back for a
// running request: its output still to come (clipped) × new_token_ratio.
func (e *Engine) reservedOutput(s *Seq) float64 {
	return float64(min(max(s.MaxTokens-s.Output, 0), clipMaxNewTokens)) * e.newTokenRatio
}

// sglangPrefill forms one prefill batch as SGLang's PrefillAdder does: the
// chunked prompt in progress first, then waiting requests FCFS while the
// token budget (chunked_prefill_size) lasts, the request limit allows and
// each request's prompt plus clipped max_tokens fits in the free KV tokens
// less the running requests' reservations and those of the requests taken
// before it in this pass. A request that does not fit ends the pass and
// marks the batch full until a running request leaves. A prompt longer than
// what is left of the budget is cut (PrefillChunks) and continued in the
// next steps.
func (e *Engine) sglangPrefill(now time.Duration, budget int) {
	d := e.d
	bs := d.BlockSize
	if c := e.chunked; c != nil {
		n := min(c.numTokens()-c.numComputed, budget)
		if !e.kv.allocate(c, c.numComputed+n) {
			// The others grew into its room: give it back to the queue
			// (recomputed later) rather than stall.
			e.removeRunning(c)
			e.chunked = nil
			e.preempt(c)
			return
		}
		e.batch = append(e.batch, sched{c, n})
		budget -= n
		if c.numComputed+n < c.numTokens() {
			return
		}
		e.chunked = nil
	}
	if e.batchFull {
		return
	}
	rem := float64(e.kv.numFree() * bs)
	for _, s := range e.running {
		rem -= e.reservedOutput(s)
	}
	chunk := d.Profile.PrefillChunks
	for e.NumWaiting() > 0 && budget > 0 {
		if len(e.running) >= d.MaxNumSeqs {
			e.batchFull = true
			break
		}
		s := e.waiting[e.wHead]
		hit, covered := e.cachedPrefix(s)
		ext := s.numTokens() - covered*bs
		maxNew := min(max(s.MaxTokens-s.Output, 0), clipMaxNewTokens)
		alone := len(e.running) == 0 && len(e.batch) == 0
		if float64(ext+maxNew) >= rem && !alone {
			// NO_TOKEN. (Alone, SGLang would have refused a prompt its
			// cache cannot hold at all; here it runs.)
			e.batchFull = true
			break
		}
		n := ext
		if n > budget {
			if !chunk {
				break
			}
			n = budget
		}
		need := (covered*bs+n+bs-1)/bs - covered
		if need+e.freeAmongHits(s.hashes[:covered]) > e.kv.numFree() {
			e.batchFull = true
			break
		}
		e.popWaiting()
		e.start(s, now, hit, covered, n)
		budget -= n
		if n < ext {
			e.chunked = s
			break
		}
		rem -= float64(ext + maxNew)
	}
}

// decodeBlocks is the free blocks the running requests need for one more
// token each.
func (e *Engine) decodeBlocks() int {
	bs := e.d.BlockSize
	need := 0
	for _, s := range e.running {
		if (s.numComputed+1+bs-1)/bs > len(s.blocks) {
			need++
		}
	}
	return need
}

// retractDecode is SGLang's ScheduleBatch.retract_decode: with no room for
// the next token, running requests are retracted — those with the fewest
// output tokens first (then the longest prompts) — until the rest have
// room for RetractDecodeSteps more tokens each (at least one is retracted;
// the last is kept). Retracted requests free their KV and go to the back
// of the queue, to be recomputed; new_token_ratio becomes the remaining
// requests' (outputs so far + RetractDecodeSteps each) / their max_tokens.
func (e *Engine) retractDecode() (retracted int) {
	p := &e.d.Profile
	steps := max(p.RetractDecodeSteps, 1)
	bs := e.d.BlockSize
	// Keep order: most outputs first, ties by shorter prompt; victims are
	// taken from the end.
	slices.SortStableFunc(e.running, func(a, b *Seq) int {
		if a.Output != b.Output {
			return b.Output - a.Output
		}
		return a.PromptLen - b.PromptLen
	})
	for first := true; len(e.running) > 1 && (first || e.kv.numFree()*bs < len(e.running)*steps); first = false {
		v := e.running[len(e.running)-1]
		e.running[len(e.running)-1] = nil
		e.running = e.running[:len(e.running)-1]
		e.kv.free(v)
		v.numComputed = 0
		v.specAcc = 0
		v.Preemptions++
		e.stats.Preemptions++
		e.waiting = append(e.waiting, v)
		retracted++
	}
	e.batchFull = false
	var out, maxNew int
	for _, s := range e.running {
		out += s.Output
		maxNew += s.MaxTokens
	}
	if maxNew > 0 {
		e.newTokenRatio = min(1, float64(out+steps*len(e.running))/float64(maxNew))
	}
	return retracted
}

// removeRunning drops s from the running list.
func (e *Engine) removeRunning(s *Seq) {
	if i := slices.Index(e.running, s); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
}

package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Retention is how a multi-turn session's KV cache is kept between turns
// (article §3.3). The simulator models the memory and the timing effects
// only: what each policy costs in answer quality is out of its reach.
//
//   - none: nothing is kept; every turn re-prefills the whole history.
//   - full: the whole history stays cached (vLLM's prefix cache with the
//     session's blocks still resident); a turn prefills only its new tokens.
//   - sliding:W: attention and the cache cover the last W tokens only
//     (Mistral-style sliding window); older blocks are freed.
//   - compress:R: each turn's KV is compressed at its end to 1/R of its
//     tokens (token merging or eviction, e.g. H2O/SnapKV-style), so the
//     next turns read and attend to R times fewer entries.
//   - evict:F: score-based eviction drops the fraction F of the held blocks
//     with the lowest attention scores after every turn (the article's
//     threshold 0.02 corresponds to some F that depends on the model).
//
// SimulateSession is the isolated one-session view of all five. The engine
// (Config.KVRetention) serves full, sliding:W, compress:R (as KV stored at
// 1/R of its bytes) and evict:F (see Engine.retire for how a turn's
// re-sent history maps onto the evicted cache).
type Retention struct {
	Kind   string  // none, full, sliding, compress, evict
	Window int     // sliding
	Ratio  float64 // compress, > 1
	Evict  float64 // evict, in (0, 1)
}

// ParseRetention reads "none", "full", "sliding:W", "compress:R" or
// "evict:F".
func ParseRetention(s string) (Retention, error) {
	kind, arg, hasArg := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	r := Retention{Kind: kind}
	bad := func(what string) (Retention, error) {
		return Retention{}, fmt.Errorf("kv retention %q: %s (known: none, full, sliding:W, compress:R, evict:F)", s, what)
	}
	switch kind {
	case "none", "full":
		if hasArg {
			return bad("takes no argument")
		}
	case "sliding":
		w, err := strconv.Atoi(arg)
		if err != nil || w <= 0 {
			return bad("window W must be a positive token count")
		}
		r.Window = w
	case "compress":
		x, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(x >= 1) || math.IsInf(x, 0) {
			return bad("ratio R must be a number ≥ 1")
		}
		r.Ratio = x
	case "evict":
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(f >= 0 && f < 1) {
			return bad("fraction F must be in [0, 1)")
		}
		r.Evict = f
	default:
		return bad("unknown policy")
	}
	return r, nil
}

// String is the form ParseRetention reads.
func (r Retention) String() string {
	switch r.Kind {
	case "sliding":
		return fmt.Sprintf("sliding:%d", r.Window)
	case "compress":
		return "compress:" + strconv.FormatFloat(r.Ratio, 'g', -1, 64)
	case "evict":
		return "evict:" + strconv.FormatFloat(r.Evict, 'g', -1, 64)
	}
	return r.Kind
}

// TurnSpec is one turn of a session: the new prompt tokens (user message
// and chat template) and the reply's length.
type TurnSpec struct {
	UserTokens, OutputTokens int
}

// TurnResult is one turn as the policy serves it.
type TurnResult struct {
	Turn int
	// History is the conversation's length before this turn; Attended the
	// KV entries (tokens' worth) the new tokens attend to; Prefilled the
	// tokens computed before the first output token.
	History, Attended, Prefilled int
	TTFT                         time.Duration
	// HeldTokens and SessionKVBytes are the session's KV after the turn
	// (tokens' worth, and bytes per GPU including a draft model's KV).
	HeldTokens     float64
	SessionKVBytes float64
}

// SimulateSession serves one session's turns back to back on an otherwise
// idle replica (batch 1) under a retention policy: TTFT is the API delay
// plus the chunked prefill of the turn's new tokens over the held context,
// timed by the same roofline as the engine. It is the isolated-session view
// of §3.3; load effects come from the engine (ttft sim run).
func (d *Deployment) SimulateSession(r Retention, turns []TurnSpec) ([]TurnResult, error) {
	if _, err := ParseRetention(r.String()); err != nil {
		return nil, err
	}
	if d.Window > 0 || (d.Config.KVRetention != "" && !strings.EqualFold(d.Config.KVRetention, "full")) {
		return nil, fmt.Errorf("SimulateSession applies its own policy; resolve the deployment without kv_retention (got %q)", d.Config.KVRetention)
	}
	out := make([]TurnResult, 0, len(turns))
	history := 0
	held := 0.0 // KV entries kept from previous turns
	for i, t := range turns {
		if t.UserTokens <= 0 || t.OutputTokens < 0 {
			return nil, fmt.Errorf("turn %d: user tokens must be positive and output tokens not negative, got %d and %d", i+1, t.UserTokens, t.OutputTokens)
		}
		res := TurnResult{Turn: i + 1, History: history}
		ctx, prefill := held, t.UserTokens
		if r.Kind == "none" {
			ctx, prefill = 0, history+t.UserTokens
		}
		if history+t.UserTokens+t.OutputTokens > d.MaxModelLen && r.Kind != "sliding" {
			return nil, fmt.Errorf("turn %d: session of %d tokens exceeds max model length %d", i+1, history+t.UserTokens+t.OutputTokens, d.MaxModelLen)
		}
		res.Attended, res.Prefilled = int(math.Round(ctx)), prefill
		// Chunked prefill: each chunk attends to what is held plus the
		// chunks before it (bounded by the window for sliding).
		var total float64
		c := ctx
		for left := prefill; left > 0; {
			n := min(left, d.MaxNumBatchedTokens)
			att := c
			if r.Kind == "sliding" {
				att = math.Min(c, float64(r.Window))
			}
			total += d.PrefillTime(n, int(math.Round(att))).Total
			c += float64(n)
			left -= n
		}
		res.TTFT = d.APIDelay(0) + time.Duration(total*1e9)

		history += t.UserTokens + t.OutputTokens
		turnTokens := float64(t.UserTokens + t.OutputTokens)
		switch r.Kind {
		case "none":
			held = 0
		case "full":
			held = float64(history)
		case "sliding":
			held = math.Min(float64(history), float64(r.Window))
		case "compress":
			held += turnTokens / r.Ratio
		case "evict":
			held = (held + turnTokens) * (1 - r.Evict)
		}
		res.HeldTokens = held
		res.SessionKVBytes = held * (d.KVBytesTok + d.DraftKVBytesTok)
		out = append(out, res)
	}
	return out, nil
}

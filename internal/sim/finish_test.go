package sim

import (
	"testing"
	"time"
)

// runToEnd steps e from time 0 until nothing is left.
func runToEnd(e *Engine) []Emit {
	var all []Emit
	now := time.Duration(0)
	for e.HasWork() {
		res := e.Step(now)
		all = append(all, res.Emits...)
		now = res.End
	}
	return all
}

// TestFinishReasons: a sequence ending at its natural length (EOS) finishes
// with "stop", one ending at a limit or at the maximum model length with
// "length", even when it would have ended at EOS there.
func TestFinishReasons(t *testing.T) {
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", MaxModelLen: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prompt, max int
		eos         bool
		want        string
	}{
		{100, 8, false, "length"},
		{100, 8, true, "stop"},
		{4090, 8, true, "length"}, // capped at max_model_len: 6 tokens
	} {
		e := NewEngine(d)
		s, err := e.NewSeq(tc.prompt, tc.max, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.EOS = tc.eos
		e.Add(s, 0)
		runToEnd(e)
		if !s.Finished || s.FinishReason != tc.want {
			t.Errorf("prompt %d max %d eos %v: finished %v %q after %d tokens, want %q", tc.prompt, tc.max, tc.eos, s.Finished, s.FinishReason, s.Output, tc.want)
		}
	}
}

// TestEmitDrafted: with speculative decoding every decode step reports the
// draft tokens it verified (at most k, at most the output left), and the
// accepted ones (Tokens−1) never exceed them; prefill emits none.
func TestEmitDrafted(t *testing.T) {
	const k = 4
	d, err := Resolve(nil, Config{Model: "llama-3.1-8b", GPU: "h100-sxm", MaxModelLen: 4096, Speculative: SpecConfig{NumSpeculativeTokens: k, Acceptance: 0.7}})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(d)
	s, err := e.NewSeq(300, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Add(s, 0)
	out := 0
	for _, em := range runToEnd(e) {
		if em.First {
			if em.Drafted != 0 || em.Tokens != 1 {
				t.Errorf("prefill emit: %d tokens, %d drafted", em.Tokens, em.Drafted)
			}
		} else if em.Drafted < 1 || em.Drafted > min(k, s.MaxTokens-out) || em.Tokens-1 > em.Drafted {
			t.Errorf("decode emit after %d tokens: %d tokens, %d drafted", out, em.Tokens, em.Drafted)
		}
		out += em.Tokens
	}
	if out != 50 {
		t.Errorf("%d tokens, want 50", out)
	}
}

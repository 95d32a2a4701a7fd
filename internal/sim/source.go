package sim

import (
	"context"
	"io"

	"github.com/ttft-dev/ttft/internal/workload"
)

// fixedSource yields n requests of fixed prompt and output lengths with
// unique prompts (no prefix sharing).
type fixedSource struct {
	n, i, prompt, out int
}

func (f *fixedSource) Next(ctx context.Context) (*workload.Request, error) {
	if f.i >= f.n {
		return nil, io.EOF
	}
	f.i++
	return &workload.Request{Index: f.i - 1, PromptTokens: f.prompt, MaxTokens: f.out, MinTokens: f.out}, nil
}

// LengthSource yields requests by length only, for simulations that need no
// text: each prompt is unique from its first token (no prefix sharing), or,
// with Same, every prompt is the same token sequence (prefix caches hit).
// It is equivalent, for the engine, to a fixed-length text workload and
// costs nothing per request. Requests > 0 stops after that many.
type LengthSource struct {
	PromptTokens, MaxTokens, MinTokens int
	Same                               bool
	Requests                           int
	i                                  int
	shared                             []int
}

// Next implements workload.Source.
func (l *LengthSource) Next(ctx context.Context) (*workload.Request, error) {
	if l.Requests > 0 && l.i >= l.Requests {
		return nil, io.EOF
	}
	r := &workload.Request{Index: l.i, PromptTokens: l.PromptTokens, MaxTokens: l.MaxTokens, MinTokens: l.MinTokens}
	if l.Same {
		if l.shared == nil {
			l.shared = make([]int, l.PromptTokens)
			for i := range l.shared {
				l.shared[i] = int(mix64(uint64(i)) % 100000)
			}
		}
		r.Tokens = l.shared
	}
	l.i++
	return r, nil
}

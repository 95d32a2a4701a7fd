package workload

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
)

// FixedOptions configures NewFixed.
type FixedOptions struct {
	// PromptTokens is the exact prompt length under Tokenizer.
	PromptTokens int
	// MaxTokens caps the output; MinTokens > 0 asks for at least that many
	// (vLLM min_tokens; set it to MaxTokens to force the output length).
	MaxTokens int
	MinTokens int
	// Tokenizer counts prompt tokens; nil means DefaultTokenizer().
	Tokenizer Tokenizer
	// Seed makes the prompts reproducible.
	Seed int64
	// Chat fills Request.Messages with one user message; Prompt is always
	// filled with the same text for completions APIs.
	Chat bool
	// SamePrompt sends one prompt for every request (prefix caches will hit);
	// by default every request gets its own random words from the first
	// token on, so no two prompts share a cacheable prefix.
	SamePrompt bool
	// Requests stops the source after this many requests; 0 means unlimited
	// (the runner decides when to stop).
	Requests int
	// Scenario labels the requests.
	Scenario string
	// PromptScale, when not 0 or 1, makes PromptTokens a length in the
	// server's tokens, one local token making PromptScale of them (see
	// GenOptions.PromptScale).
	PromptScale float64
}

// Fixed yields prompts of exactly PromptTokens tokens. Safe for concurrent use.
type Fixed struct {
	opt FixedOptions
	gen *PromptGen

	mu   sync.Mutex
	next int
	same *Request
}

// NewFixed returns a fixed-length source.
func NewFixed(opt FixedOptions) (*Fixed, error) {
	if opt.PromptTokens < 1 {
		return nil, fmt.Errorf("fixed workload: prompt tokens must be at least 1, got %d", opt.PromptTokens)
	}
	if opt.MaxTokens < 1 {
		return nil, fmt.Errorf("fixed workload: max tokens must be at least 1, got %d", opt.MaxTokens)
	}
	if opt.MinTokens < 0 || opt.MinTokens > opt.MaxTokens {
		return nil, fmt.Errorf("fixed workload: min tokens %d must be between 0 and max tokens %d", opt.MinTokens, opt.MaxTokens)
	}
	if opt.Requests < 0 {
		return nil, fmt.Errorf("fixed workload: requests %d is negative", opt.Requests)
	}
	if opt.Tokenizer == nil {
		opt.Tokenizer = DefaultTokenizer()
	}
	gen, err := NewPromptGen(opt.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("fixed workload: %w", err)
	}
	return &Fixed{opt: opt, gen: gen}, nil
}

// Next returns the next request, or io.EOF after Requests requests.
func (f *Fixed) Next(ctx context.Context) (*Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	i := f.next
	if f.opt.Requests > 0 && i >= f.opt.Requests {
		f.mu.Unlock()
		return nil, io.EOF
	}
	f.next++
	same := f.same
	f.mu.Unlock()

	if f.opt.SamePrompt && same != nil {
		r := *same
		r.Index = i
		r.Messages = append([]Message(nil), same.Messages...)
		return &r, nil
	}
	key := uint64(i)
	if f.opt.SamePrompt {
		key = 0
	}
	// One generator per request index: the prompt of request i does not
	// depend on how many goroutines asked before it.
	rng := rand.New(rand.NewPCG(uint64(f.opt.Seed), key))
	local := localLength(f.opt.PromptTokens, f.opt.PromptScale)
	text, ids, err := f.gen.Text(rng, local)
	if err != nil {
		return nil, fmt.Errorf("fixed workload: request %d: %w", i, err)
	}
	r := &Request{
		Index:        i,
		Prompt:       text,
		Tokens:       ids,
		PromptTokens: recordedLength(len(ids), f.opt.PromptTokens, local, f.opt.PromptScale),
		MaxTokens:    f.opt.MaxTokens,
		MinTokens:    f.opt.MinTokens,
		Scenario:     f.opt.Scenario,
	}
	if f.opt.Chat {
		r.Messages = []Message{{Role: "user", Content: text}}
	}
	if f.opt.SamePrompt {
		f.mu.Lock()
		if f.same == nil {
			f.same = r
		}
		f.mu.Unlock()
		c := *r
		c.Messages = append([]Message(nil), r.Messages...)
		return &c, nil
	}
	return r, nil
}

package liveeval

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/workload"
)

// source yields the workload's requests: request i is a function of the
// seed and i alone, so every policy gets the identical sequence.
type source struct {
	w        Workload
	seed     uint64
	prefixes []string
	// cum is the groups' cumulative popularity when it is skewed (nil:
	// uniform, drawn as before the skew existed so that the suite's
	// sequences stay what they were).
	cum []float64
	i   int
	// sessions are the open conversations when w.Sessions > 0.
	sessions []*conversation
	opened   int
}

// conversation is one multi-turn chat: its group, the turns so far and
// how many are left.
type conversation struct {
	id      int
	group   int
	left    int
	history []workload.Message
}

func newSource(w Workload, seed uint64) *source {
	s := &source{w: w, seed: seed}
	rng := rand.New(rand.NewPCG(seed, 0x70726566)) // "pref"
	for range w.Groups {
		n := w.PrefixChars
		if w.PrefixCharsMax > w.PrefixChars {
			n += rng.IntN(w.PrefixCharsMax - w.PrefixChars + 1)
		}
		s.prefixes = append(s.prefixes, words(rng, n))
	}
	if w.ZipfS > 0 {
		s.cum = workload.ZipfCDF(w.Groups, w.ZipfS)
	}
	return s
}

// words is n characters of pseudo-words (lower-case, 2–8 letters), so
// that a real tokenizer (the simulator's) sees text of ordinary density.
func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 8)
	for b.Len() < n {
		for range 2 + rng.IntN(7) {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// Next returns the next request; the runner numbers warm-up and scored
// requests in one sequence.
func (s *source) Next(ctx context.Context) (*workload.Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	i := s.i
	s.i++
	rng := rand.New(rand.NewPCG(s.seed, uint64(i)+1))
	if s.w.Sessions > 0 {
		return s.nextTurn(rng), nil
	}
	g := s.group(rng)
	n := s.w.SuffixMin + rng.IntN(s.w.SuffixMax-s.w.SuffixMin+1)
	if s.w.LongShare > 0 && rng.Float64() < s.w.LongShare {
		n = s.w.LongChars
	}
	user := words(rng, n)
	out := s.w.OutputTokens
	if s.w.OutputTokensMax > out {
		// Drawn last, so that the other draws stay what they were.
		out += rng.IntN(s.w.OutputTokensMax - out + 1)
	}
	return &workload.Request{
		Messages: []workload.Message{
			{Role: "system", Content: s.prefixes[g]},
			{Role: "user", Content: user},
		},
		PromptTokens: (len(s.prefixes[g]) + n) / 4,
		MaxTokens:    out,
		Group:        groupLabel(g),
	}, nil
}

// group draws a group by the workload's popularity.
func (s *source) group(rng *rand.Rand) int {
	if s.cum != nil {
		return workload.PickCDF(s.cum, rng.Float64())
	}
	return rng.IntN(s.w.Groups)
}

// nextTurn is the next turn of a conversation drawn from the open ones;
// one that has ended is replaced first.
func (s *source) nextTurn(rng *rand.Rand) *workload.Request {
	if s.sessions == nil {
		s.sessions = make([]*conversation, s.w.Sessions)
	}
	k := rng.IntN(len(s.sessions))
	c := s.sessions[k]
	if c == nil || c.left == 0 {
		turns := max(s.w.TurnsMin, 1)
		if s.w.TurnsMax > turns {
			turns += rng.IntN(s.w.TurnsMax - turns + 1)
		}
		c = &conversation{id: s.opened, group: s.group(rng), left: turns}
		s.opened++
		s.sessions[k] = c
	}
	n := s.w.SuffixMin + rng.IntN(s.w.SuffixMax-s.w.SuffixMin+1)
	out := s.w.OutputTokens
	if s.w.OutputTokensMax > out {
		out += rng.IntN(s.w.OutputTokensMax - out + 1)
	}
	user := workload.Message{Role: "user", Content: words(rng, n)}
	msgs := make([]workload.Message, 0, len(c.history)+2)
	msgs = append(msgs, workload.Message{Role: "system", Content: s.prefixes[c.group]})
	msgs = append(msgs, c.history...)
	msgs = append(msgs, user)
	chars := 0
	for _, m := range msgs {
		chars += len(m.Content)
	}
	// The answer the next turn carries stands for what the model said:
	// about four characters a token of the turn's budget.
	c.history = append(c.history, user, workload.Message{Role: "assistant", Content: words(rng, 4*out)})
	c.left--
	return &workload.Request{
		Messages:     msgs,
		PromptTokens: chars / 4,
		MaxTokens:    out,
		Group:        groupLabel(c.group),
		Session:      "s" + strconv.Itoa(c.id),
		Turn:         len(c.history) / 2,
	}
}

// groupLabel names prompt group g: A to Z, then A1 to Z1, and so on.
func groupLabel(g int) string {
	l := string(rune('A' + g%26))
	if g >= 26 {
		l += strconv.Itoa(g / 26)
	}
	return l
}

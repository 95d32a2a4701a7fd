package gguf

import (
	"fmt"
	"strings"
)

// Tokenize reproduces llama.cpp's SentencePiece ("llama"/SPM) tokenizer for
// this vocabulary: a space is prepended (add_space_prefix), spaces become
// "▁", the text is split into UTF-8 characters, adjacent symbols are merged
// highest score first (ties: leftmost) while their concatenation is a piece,
// and any symbol left that is not a piece falls back to byte tokens. With
// addBOS the <s> id comes first, as engines do for a prompt's first part.
// Control-token text in the input is not treated specially (the templates
// written here contain none).
func (v *Vocab) Tokenize(text string, addBOS bool) []int {
	var out []int
	if addBOS {
		out = append(out, BOSID)
	}
	if text == "" {
		return out
	}
	if !v.noSpacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", spaceMark)
	// Symbols over the text: a doubly linked list of byte ranges.
	type symbol struct {
		prev, next int
		start, n   int
	}
	var syms []symbol
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		syms = append(syms, symbol{prev: len(syms) - 1, next: len(syms) + 1, start: off, n: n})
		off += n
	}
	syms[len(syms)-1].next = -1
	q := &bigramQueue{}
	*q = make(bigramQueue, 0, len(syms))
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start : syms[r].start+syms[r].n]
		if id, ok := v.index[s]; ok {
			q.push(bigram{left: l, right: r, score: v.Scores[id], size: len(s)})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for len(*q) > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // outdated: one side was merged meanwhile
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i >= 0; i = syms[i].next {
		s := text[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := v.index[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			switch {
			case v.byteIDs == nil:
				out = append(out, 3+int(s[j])) // <0xXX> follow the three control tokens
			case v.byteIDs[s[j]] >= 0:
				out = append(out, v.byteIDs[s[j]])
			default:
				out = append(out, UnkID) // no byte fallback: llama.cpp emits <unk>
			}
		}
	}
	return out
}

// Decode turns ids back into text: "▁" becomes a space, byte tokens their
// byte, control tokens nothing.
func (v *Vocab) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id >= len(v.Tokens) {
			continue
		}
		switch v.Types[id] {
		case TokenControl, TokenUnknown, TokenUnused:
		case TokenByte:
			var x byte
			fmt.Sscanf(v.Tokens[id], "<0x%02X>", &x)
			b.WriteByte(x)
		default:
			b.WriteString(strings.ReplaceAll(v.Tokens[id], spaceMark, " "))
		}
	}
	return b.String()
}

// utf8Len is the sequence length announced by a UTF-8 leading byte, as
// llama.cpp computes it (continuation or invalid bytes count as one).
func utf8Len(c byte) int {
	switch {
	case c < 0xC0:
		return 1
	case c < 0xE0:
		return 2
	case c < 0xF0:
		return 3
	}
	return 4
}

type bigram struct {
	left, right int
	score       float32
	size        int
}

// bigramQueue is a binary max-heap on score; ties go to the leftmost pair
// (llama.cpp's llm_bigram_spm ordering). Hand-rolled to avoid boxing every
// bigram in an interface, which dominated tokenizing time.
type bigramQueue []bigram

func (q bigramQueue) less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}

func (q *bigramQueue) push(b bigram) {
	*q = append(*q, b)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *bigramQueue) pop() bigram {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < n && h.less(l, best) {
			best = l
		}
		if r := l + 1; r < n && h.less(r, best) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}

package serve

import (
	"fmt"
	"strings"

	"github.com/ttft-dev/ttft/internal/sim"
)

// A reply's words are a function of its prompt (textKey), not of the
// request's arrival order, so that every replica answers one prompt alike
// and a request that continues a cut-off answer (the gateway's mid-stream
// continuation) gets what the unbroken answer would have had next: word i
// of the prompt's reply is sim.OutputWord(key, i), and a continuation whose
// prompt carries the first k words produces words k, k+1, … of that reply.
//
// Continuations are recognised as vLLM takes them:
//   - chat: continue_final_message true (with add_generation_prompt false):
//     the final assistant message is the start of the answer. The reply's
//     key is the prompt without that message;
//   - completions: the prompt ends with the answer so far. A completions
//     prompt carries no marker, so a trailing run of output words is
//     recognised when the text before it keys exactly those words.

// fnvOffset and fnvPrime are FNV-1a's 64-bit parameters: a hash that
// every process computes alike (no per-process seed, unlike maphash), so
// that replicas in different processes agree.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnvAdd extends an FNV-1a state with s.
func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// textKey is the key of the reply to a prompt text.
func textKey(text string) uint64 { return fnvAdd(fnvOffset, text) }

// idsKey is the key of the reply to a prompt given as token IDs.
func idsKey(ids []int) uint64 {
	h := uint64(fnvOffset)
	for _, id := range ids {
		h ^= uint64(id)
		h *= fnvPrime
	}
	return h
}

// continuation is where a request's reply starts within its prompt's
// reply: skip whole words were delivered, then partial bytes of the next
// (an answer cut inside a word, which only a client splitting words could
// send). The zero value is a reply from its start.
type continuation struct {
	skip, partial int
}

// matchWords measures how much of the reply keyed key prefix holds: whole
// words, then the start of the next. ok is false when prefix is not the
// start of that reply.
func matchWords(key uint64, prefix string) (c continuation, ok bool) {
	for len(prefix) > 0 {
		w := sim.OutputWord(key, c.skip)
		switch {
		case strings.HasPrefix(prefix, w):
			prefix = prefix[len(w):]
			c.skip++
		case strings.HasPrefix(w, prefix):
			c.partial = len(prefix)
			return c, true
		default:
			return continuation{}, false
		}
	}
	return c, true
}

// maxContinuedWords bounds the trailing words a completions prompt is
// searched for: longer answers are continued from their last words' key
// only if those fit (a continuation is then a fresh reply, still coherent).
const maxContinuedWords = 8192

// completionContinuation finds the answer so far at the end of a
// completions prompt: the longest trailing run of words " w1 w2 …" that the
// text before it keys (sim.OutputWord(textKey(before), 0..)). It returns
// the reply's key and where it resumes; without such a run, the prompt's
// own key and the zero continuation.
func completionContinuation(text string) (uint64, continuation) {
	// Word starts from the end: each piece is a space and lowercase
	// letters, as every output word is.
	var starts []int
	end := len(text)
	for len(starts) < maxContinuedWords {
		i := strings.LastIndexByte(text[:end], ' ')
		if i < 0 || i == end-1 || !lowerLetters(text[i+1:end]) {
			break
		}
		starts = append(starts, i)
		end = i
	}
	if len(starts) == 0 {
		return textKey(text), continuation{}
	}
	// Keys of each candidate "before" text, from the shortest up: one
	// pass over the prompt.
	keys := make([]uint64, len(starts))
	h := fnvAdd(fnvOffset, text[:starts[len(starts)-1]])
	for j := len(starts) - 1; j >= 0; j-- {
		keys[j] = h
		if j > 0 {
			h = fnvAdd(h, text[starts[j]:starts[j-1]])
		}
	}
	// The longest run first; a wrong split fails on its first word but
	// for one chance in 50 per word.
	for j := len(starts) - 1; j >= 0; j-- {
		if c, ok := matchWords(keys[j], text[starts[j]:]); ok && c.partial == 0 {
			return keys[j], c
		}
	}
	return textKey(text), continuation{}
}

func lowerLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// chatContinuation reads a chat request's continuation flags: with
// continue_final_message the final message must be the assistant's, and
// add_generation_prompt must not also be true (vLLM refuses both). It
// returns the final message's text (the answer so far) and whether the
// request continues it.
func chatContinuation(req *generateRequest) (prefix string, cont bool, refused *apiError) {
	if !req.ContinueFinalMessage {
		return "", false, nil
	}
	if req.AddGenerationPrompt != nil && *req.AddGenerationPrompt {
		return "", false, badRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "assistant" {
		return "", false, badRequest(fmt.Sprintf("continue_final_message needs the final message to be the assistant's, not %q", last.Role))
	}
	t, err := messageText(last)
	if err != nil {
		return "", false, badRequest(fmt.Sprintf("messages[%d]: %v", len(req.Messages)-1, err))
	}
	return t, true, nil
}

// word is the text of output token i of this reply: word skip+i of the
// prompt's reply, the first one less what the prompt already had of it.
func (o *responder) word(i int) string {
	w := sim.OutputWord(o.seq.ID, o.cont.skip+i)
	if i == 0 && o.cont.partial > 0 {
		return w[o.cont.partial:]
	}
	return w
}

// text is the reply's first n tokens.
func (o *responder) text(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(o.word(i))
	}
	return b.String()
}

// replyKey is the key of a request's reply words and where this reply
// starts within them; ids are the prompt's tokens, those of a continued
// chat answer re-made as the prompt followed by the answer's own tokens
// (what the unbroken answer's next token would have attended to). text and
// ids are the request's prompt (Server.prompt).
func (s *Server) replyKey(req *generateRequest, chat bool, text string, ids []int) (uint64, continuation, []int, *apiError) {
	if !chat {
		if len(req.Prompt) > 0 && req.Prompt[0] == '[' && text == "" {
			return idsKey(ids), continuation{}, ids, nil // token IDs: no text to continue
		}
		key, cont := completionContinuation(text)
		return key, cont, ids, nil
	}
	prefix, continued, refused := chatContinuation(req)
	if refused != nil || !continued {
		return textKey(text), continuation{}, ids, refused
	}
	// The prompt before the final message: its text is what the prompt's
	// own text was joined from (Server.prompt), less the final part.
	before := strings.TrimSuffix(text, prefix)
	before = strings.TrimSuffix(before, "\n")
	if c, ok := matchWords(textKey(before), prefix); ok {
		return textKey(before), c, append(s.tok.Encode(before), s.tok.Encode(prefix)...), nil
	}
	return textKey(text), continuation{}, ids, nil
}

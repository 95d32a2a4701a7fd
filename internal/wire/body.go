package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ttft-dev/ttft/internal/jsonscan"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Requester builds the HTTP requests of one run. What is the same for every
// request (the URL, the headers, the body's fixed fields and --extra-body's
// values) is prepared once; a request's body is then written by appending
// bytes, not through a map and encoding/json: at 1,000 streams the map
// build and its reflection were ≈ 5 % of the client's CPU. The bytes are
// what encoding/json wrote for that map (keys sorted, --extra-body's keys
// replacing ours), which TestBodyTemplateMatches and FuzzBodyTemplate check
// against bodyMap, the map version kept as the reference. Safe for
// concurrent use.
type Requester struct {
	api    API
	url    string
	header http.Header
	opt    RequestOptions // for bodyMap
	// slots are the body's possible keys in encoding/json's order; a
	// request writes those it has.
	slots []bodySlot
	fixed int // bytes of the fixed slots, to size a body
	// viaMap: an --extra-body value encoding/json refuses, or a
	// --max-tokens-key naming another of our fields: every body goes
	// through bodyMap, for its exact answer.
	viaMap bool
}

// bodySlot is one key of the body: its encoding (`"key":`) and what
// follows it.
type bodySlot struct {
	name  string
	key   []byte
	field bodyField
	raw   []byte // bodyFixed: the value's JSON
}

type bodyField uint8

const (
	bodyFixed     bodyField = iota // the same for every request (model, stream, temperature, stream_options, --extra-body)
	bodyMessages                   // the conversation (Anthropic's without its system messages)
	bodySystem                     // Anthropic's system prompt, when there is one
	bodyMaxTokens                  // Anthropic: always (1024 by default); OpenAI: when the request caps its output
	bodyPrompt                     // completions' prompt
	bodyMinTokens                  // when the request forces its length
	bodyIgnoreEOS                  // with min_tokens
)

// NewRequester prepares the requests of a run against base (see BaseURL)
// with opt, which it copies.
func NewRequester(api API, base string, opt *RequestOptions) *Requester {
	// Cloned so that every value slice is full (cap = len): requests share
	// them, and an Add to a request's header then copies, never writes
	// into another request's.
	q := &Requester{api: api, url: base + api.Path(), header: requestHeader(api, opt).Clone(), opt: *opt}
	ours := map[string]bodySlot{
		"model":  {field: bodyFixed, raw: jsonscan.AppendStringStd(nil, opt.Model)},
		"stream": {field: bodyFixed, raw: []byte("true")},
	}
	if !opt.NoTemperature {
		raw, ok := appendFloat(nil, opt.Temperature)
		q.viaMap = q.viaMap || !ok
		ours["temperature"] = bodySlot{field: bodyFixed, raw: raw}
	}
	add := func(key string, s bodySlot) {
		if _, clash := ours[key]; clash {
			q.viaMap = true // bodyMap's order of assignment decides
		}
		ours[key] = s
	}
	switch api {
	case Anthropic:
		add("system", bodySlot{field: bodySystem})
		add("messages", bodySlot{field: bodyMessages})
		add("max_tokens", bodySlot{field: bodyMaxTokens})
	default:
		if api == OpenAICompletions {
			add("prompt", bodySlot{field: bodyPrompt})
		} else {
			add("messages", bodySlot{field: bodyMessages})
		}
		add(opt.maxTokensField(), bodySlot{field: bodyMaxTokens})
		if !opt.NoUsage {
			add("stream_options", bodySlot{field: bodyFixed, raw: []byte(`{"include_usage":true}`)})
		}
		add("min_tokens", bodySlot{field: bodyMinTokens})
		add("ignore_eos", bodySlot{field: bodyIgnoreEOS})
	}
	for k, v := range opt.ExtraBody {
		raw, err := json.Marshal(v) // as the map would encode it
		if err != nil {
			q.viaMap = true
		}
		ours[k] = bodySlot{field: bodyFixed, raw: raw}
	}
	for k, s := range ours {
		s.name, s.key = k, append(jsonscan.AppendStringStd(nil, k), ':')
		q.slots = append(q.slots, s)
		if s.field == bodyFixed {
			q.fixed += len(s.key) + len(s.raw) + 1
		}
	}
	// encoding/json writes a map's keys sorted as strings.
	slices.SortFunc(q.slots, func(a, b bodySlot) int { return strings.Compare(a.name, b.name) })
	return q
}

// New builds the HTTP request for req.
func (q *Requester) New(ctx context.Context, req *workload.Request) (*http.Request, error) {
	body, err := q.AppendBody(nil, req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, q.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	// The values are shared, read-only (see NewRequester); room for the
	// caller's X-Request-Id. (Header.Clone copied them all, and
	// http.Client.Do copies the header again.)
	h := make(http.Header, len(q.header)+1)
	for k, v := range q.header {
		h[k] = v
	}
	hr.Header = h
	return hr, nil
}

// AppendBody appends req's JSON body to b (see Body).
func (q *Requester) AppendBody(b []byte, req *workload.Request) ([]byte, error) {
	if q.viaMap {
		body, err := bodyMap(q.api, req, &q.opt)
		return append(b, body...), err
	}
	msgs := req.Messages
	var one [1]workload.Message
	if len(msgs) == 0 && req.Prompt != "" {
		one[0] = workload.Message{Role: "user", Content: req.Prompt}
		msgs = one[:]
	}
	if b == nil {
		n := q.fixed + 64 + 2*len(req.Prompt)
		for i := range msgs {
			n += len(msgs[i].Content) + 32
		}
		b = make([]byte, 0, n+n/8)
	}
	b = append(b, '{')
	first := true
	for i := range q.slots {
		s := &q.slots[i]
		mark := len(b)
		if !first {
			b = append(b, ',')
		}
		b = append(b, s.key...)
		switch s.field {
		case bodyFixed:
			b = append(b, s.raw...)
		case bodyMessages:
			b = q.appendMessages(b, msgs, req.Messages == nil && req.Prompt == "")
		case bodySystem:
			var ok bool
			if b, ok = appendSystem(b, msgs); !ok {
				b = b[:mark]
				continue
			}
		case bodyMaxTokens:
			n := req.MaxTokens
			if q.api == Anthropic && n <= 0 {
				n = 1024 // required by the Messages API
			} else if n <= 0 {
				b = b[:mark]
				continue
			}
			b = strconv.AppendInt(b, int64(n), 10)
		case bodyPrompt:
			b = jsonscan.AppendStringStd(b, completionPrompt(req, msgs))
		case bodyMinTokens, bodyIgnoreEOS:
			// vLLM and SGLang extensions that force the output length;
			// only sent when asked, since hosted APIs reject unknown
			// fields.
			if req.MinTokens <= 0 {
				b = b[:mark]
				continue
			}
			if s.field == bodyIgnoreEOS {
				b = append(b, "true"...)
			} else {
				b = strconv.AppendInt(b, int64(req.MinTokens), 10)
			}
		}
		first = false
	}
	return append(b, '}'), nil
}

// appendMessages writes the conversation as TextMessages; Anthropic's
// leaves out the system messages (a list, never null), OpenAI's is null
// when the workload gave neither messages nor a prompt.
func (q *Requester) appendMessages(b []byte, msgs []workload.Message, null bool) []byte {
	if null && q.api != Anthropic {
		return append(b, "null"...)
	}
	b = append(b, '[')
	n := 0
	for i := range msgs {
		m := &msgs[i]
		if q.api == Anthropic && m.Role == "system" {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"role":`...)
		b = jsonscan.AppendStringStd(b, m.Role)
		b = append(b, `,"content":`...)
		b = jsonscan.AppendStringStd(b, m.Content)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendSystem writes Anthropic's system prompt, the system messages
// joined by blank lines; false when there is none.
func appendSystem(b []byte, msgs []workload.Message) ([]byte, bool) {
	var sys []string
	for i := range msgs {
		if msgs[i].Role == "system" {
			sys = append(sys, msgs[i].Content)
		}
	}
	if len(sys) == 0 {
		return b, false
	}
	return jsonscan.AppendStringStd(b, strings.Join(sys, "\n\n")), true
}

// appendFloat appends a float64 as encoding/json does (the shortest
// decimal that reads back the same, exponent form only below 1e-6 or from
// 1e21, the exponent's leading zero dropped); false for NaN and ±Inf,
// which encoding/json refuses.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BadLinePolicy says what a parser does with a malformed record.
type BadLinePolicy string

const (
	BadLineStop BadLinePolicy = "stop" // the first malformed record is an error
	BadLineSkip BadLinePolicy = "skip" // malformed records are counted and skipped
)

// ParseBadLinePolicy reads --on-bad-line.
func ParseBadLinePolicy(s string) (BadLinePolicy, error) {
	switch BadLinePolicy(s) {
	case BadLineStop, BadLineSkip:
		return BadLinePolicy(s), nil
	case "":
		return BadLineStop, nil
	}
	return "", fmt.Errorf("--on-bad-line %q: want skip or stop", s)
}

// LineError is a malformed record at file:line.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Entry is one dataset or trace record before prompt generation. Either
// Messages (text given) or InputTokens (length given, text synthesised).
type Entry struct {
	Line         int
	Messages     []Message
	InputTokens  int
	OutputTokens int // 0: unknown (the source's default applies)
	// At is the trace timestamp relative to the first record (traces only).
	At    time.Duration
	HasAt bool
	// HashIDs are Mooncake block hashes: equal IDs mean equal content.
	HashIDs []int
	// Reply is a recorded answer (ShareGPT) whose token count, under the
	// run's tokenizer, is the output length. It is not sent.
	Reply string
}

// Dataset is a parsed dataset or trace.
type Dataset struct {
	File    string
	Format  string
	Entries []Entry
	// Skipped lists the malformed records skipped under BadLineSkip.
	Skipped []*LineError
	// Unusable counts well-formed records with nothing to send (ShareGPT
	// conversations without a human turn).
	Unusable int
}

// badLine applies the policy to one malformed record.
func (d *Dataset) badLine(policy BadLinePolicy, line int, err error) error {
	le := &LineError{File: d.File, Line: line, Err: err}
	if policy == BadLineSkip {
		d.Skipped = append(d.Skipped, le)
		return nil
	}
	return le
}

// DetectFormat guesses a file's format from its name and first bytes:
// "azure" (CSV with TIMESTAMP,ContextTokens,GeneratedTokens), "mooncake"
// (JSONL with input_length), "sharegpt" (a JSON array) or "jsonl".
func DetectFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading dataset: %w", err)
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	head = bytes.TrimLeft(head[:n], " \t\r\n\ufeff")
	switch {
	case bytes.HasPrefix(head, []byte("[")):
		return "sharegpt", nil
	case bytes.HasPrefix(head, []byte("{")):
		first, _, _ := bytes.Cut(head, []byte("\n"))
		if bytes.Contains(first, []byte(`"input_length"`)) {
			return "mooncake", nil
		}
		return "jsonl", nil
	case bytes.Contains(bytes.ToLower(head), []byte("contexttokens")):
		return "azure", nil
	}
	return "", fmt.Errorf("%s: cannot tell the format (want a ShareGPT JSON array, JSONL, an Azure trace CSV or a Mooncake JSONL); name it with --dataset-format", path)
}

// LoadDataset parses path in format ("" = detect).
func LoadDataset(path, format string, policy BadLinePolicy) (*Dataset, error) {
	if format == "" || format == "auto" {
		var err error
		if format, err = DetectFormat(path); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading dataset: %w", err)
	}
	defer f.Close()
	d := &Dataset{File: path, Format: format}
	switch format {
	case "sharegpt":
		err = d.parseShareGPT(f, policy)
	case "jsonl":
		err = d.parseJSONL(f, policy)
	case "azure":
		err = d.parseAzure(f, policy)
	case "mooncake":
		err = d.parseMooncake(f, policy)
	default:
		return nil, fmt.Errorf("dataset format %q: want auto, sharegpt, jsonl, azure or mooncake", format)
	}
	if err != nil {
		return nil, err
	}
	if len(d.Entries) == 0 {
		return nil, fmt.Errorf("%s: no usable records (%d malformed skipped)", path, len(d.Skipped))
	}
	return d, nil
}

// lineReader yields lines with their numbers, without a line-length limit.
func eachLine(r io.Reader, fn func(line int, b []byte) error) error {
	br := bufio.NewReaderSize(r, 1<<16)
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			if e := fn(n, bytes.TrimRight(b, "\r\n")); e != nil {
				return e
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading line %d: %w", n, err)
		}
	}
}

func (d *Dataset) parseJSONL(r io.Reader, policy BadLinePolicy) error {
	return eachLine(r, func(line int, b []byte) error {
		if len(bytes.TrimSpace(b)) == 0 {
			return nil
		}
		var rec struct {
			Prompt       *string   `json:"prompt"`
			Messages     []Message `json:"messages"`
			OutputTokens *int      `json:"output_tokens"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return d.badLine(policy, line, fmt.Errorf("not a JSON object: %v", err))
		}
		e := Entry{Line: line}
		switch {
		case rec.Prompt != nil && rec.Messages != nil:
			return d.badLine(policy, line, errors.New("has both prompt and messages"))
		case rec.Prompt != nil:
			if *rec.Prompt == "" {
				return d.badLine(policy, line, errors.New("prompt is empty"))
			}
			e.Messages = []Message{{Role: "user", Content: *rec.Prompt}}
		case len(rec.Messages) > 0:
			for i, m := range rec.Messages {
				if m.Role == "" {
					return d.badLine(policy, line, fmt.Errorf("messages[%d] has no role", i))
				}
			}
			e.Messages = rec.Messages
		default:
			return d.badLine(policy, line, errors.New("needs prompt or messages"))
		}
		if rec.OutputTokens != nil {
			if *rec.OutputTokens < 1 {
				return d.badLine(policy, line, fmt.Errorf("output_tokens %d must be at least 1", *rec.OutputTokens))
			}
			e.OutputTokens = *rec.OutputTokens
		}
		d.Entries = append(d.Entries, e)
		return nil
	})
}

// parseShareGPT reads the ShareGPT layout: a JSON array of
// {"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}. As in
// vLLM's benchmark, the first human turn is the prompt and the length of the
// reply after it is the output length.
func (d *Dataset) parseShareGPT(r io.Reader, policy BadLinePolicy) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("reading %s: %w", d.File, err)
	}
	lineAt := func(off int64) int { return 1 + bytes.Count(data[:min(int(off), len(data))], []byte("\n")) }
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('[') {
		return &LineError{File: d.File, Line: lineAt(dec.InputOffset()), Err: errors.New("a ShareGPT file is a JSON array of conversations")}
	}
	for dec.More() {
		start := dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			// Syntax errors leave the decoder unusable: always stop.
			return &LineError{File: d.File, Line: lineAt(dec.InputOffset()), Err: fmt.Errorf("malformed JSON: %v", err)}
		}
		j := int(start)
		for j < len(data) && strings.IndexByte(" \t\r\n,", data[j]) >= 0 {
			j++
		}
		line := lineAt(int64(j))
		var conv struct {
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
		}
		if err := json.Unmarshal(raw, &conv); err != nil {
			if e := d.badLine(policy, line, fmt.Errorf("not a conversation object: %v", err)); e != nil {
				return e
			}
			continue
		}
		var prompt, reply string
		found := false
		for i, t := range conv.Conversations {
			if (t.From == "human" || t.From == "user") && t.Value != "" {
				prompt = t.Value
				if i+1 < len(conv.Conversations) {
					reply = conv.Conversations[i+1].Value
				}
				found = true
				break
			}
		}
		if !found {
			// Conversations without a human turn are common in ShareGPT
			// dumps; they are well-formed, just unusable (vLLM drops them too).
			d.Unusable++
			continue
		}
		d.Entries = append(d.Entries, Entry{Line: line, Messages: []Message{{Role: "user", Content: prompt}}, Reply: reply})
	}
	return nil
}

// parseAzure reads the Azure LLM inference trace CSV:
// TIMESTAMP,ContextTokens,GeneratedTokens with TIMESTAMP like
// "2023-11-16 18:15:46.6805900".
func (d *Dataset) parseAzure(r io.Reader, policy BadLinePolicy) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return &LineError{File: d.File, Line: 1, Err: fmt.Errorf("reading header: %v", err)}
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	ti, ok1 := col["timestamp"]
	ci, ok2 := col["contexttokens"]
	gi, ok3 := col["generatedtokens"]
	if !ok1 || !ok2 || !ok3 {
		return &LineError{File: d.File, Line: 1, Err: fmt.Errorf("header %q lacks TIMESTAMP, ContextTokens, GeneratedTokens", strings.Join(header, ","))}
	}
	var t0 time.Time
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				if e := d.badLine(policy, pe.Line, pe.Err); e != nil {
					return e
				}
				continue
			}
			return fmt.Errorf("reading %s: %w", d.File, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) <= max(ti, ci, gi) {
			if e := d.badLine(policy, line, fmt.Errorf("%d fields, want %d", len(rec), len(header))); e != nil {
				return e
			}
			continue
		}
		ts, err := parseAzureTime(rec[ti])
		if err != nil {
			if e := d.badLine(policy, line, fmt.Errorf("TIMESTAMP %q: %v", rec[ti], err)); e != nil {
				return e
			}
			continue
		}
		ctx, err1 := strconv.Atoi(strings.TrimSpace(rec[ci]))
		gen, err2 := strconv.Atoi(strings.TrimSpace(rec[gi]))
		if err1 != nil || err2 != nil || ctx < 1 || gen < 0 {
			if e := d.badLine(policy, line, fmt.Errorf("ContextTokens %q / GeneratedTokens %q are not valid counts", rec[ci], rec[gi])); e != nil {
				return e
			}
			continue
		}
		if t0.IsZero() {
			t0 = ts
		}
		if ts.Before(t0) {
			if e := d.badLine(policy, line, fmt.Errorf("TIMESTAMP %s goes back before the first record", rec[ti])); e != nil {
				return e
			}
			continue
		}
		d.Entries = append(d.Entries, Entry{Line: line, InputTokens: ctx, OutputTokens: max(gen, 1), At: ts.Sub(t0), HasAt: true})
	}
}

func parseAzureTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want YYYY-MM-DD HH:MM:SS.fffffff")
}

// parseMooncake reads Mooncake-style JSONL:
// {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}.
func (d *Dataset) parseMooncake(r io.Reader, policy BadLinePolicy) error {
	first := true
	var t0 float64
	return eachLine(r, func(line int, b []byte) error {
		if len(bytes.TrimSpace(b)) == 0 {
			return nil
		}
		var rec struct {
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
			HashIDs      []int    `json:"hash_ids"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return d.badLine(policy, line, fmt.Errorf("not a JSON object: %v", err))
		}
		if rec.Timestamp == nil || rec.InputLength == nil || rec.OutputLength == nil {
			return d.badLine(policy, line, errors.New("needs timestamp, input_length and output_length"))
		}
		if *rec.InputLength < 1 || *rec.OutputLength < 0 || math.IsNaN(*rec.Timestamp) || math.IsInf(*rec.Timestamp, 0) {
			return d.badLine(policy, line, fmt.Errorf("input_length %d / output_length %d / timestamp %v out of range", *rec.InputLength, *rec.OutputLength, *rec.Timestamp))
		}
		if first {
			t0, first = *rec.Timestamp, false
		}
		if *rec.Timestamp < t0 {
			return d.badLine(policy, line, fmt.Errorf("timestamp %v goes back before the first record", *rec.Timestamp))
		}
		d.Entries = append(d.Entries, Entry{
			Line: line, InputTokens: *rec.InputLength, OutputTokens: max(*rec.OutputLength, 1),
			At: time.Duration((*rec.Timestamp - t0) * float64(time.Millisecond)), HasAt: true, HashIDs: rec.HashIDs,
		})
		return nil
	})
}

// ReplayOptions configures a dataset or trace source.
type ReplayOptions struct {
	Tokenizer Tokenizer // nil: DefaultTokenizer()
	Seed      int64
	Scenario  string
	// DefaultOutput is used where a record has no output length.
	DefaultOutput int
	// MaxOutput caps record output lengths (0 = none).
	MaxOutput int
	// ForceOutput sets MinTokens to the output length so the server
	// generates exactly as many tokens as the record did.
	ForceOutput bool
	// TimeScale multiplies trace offsets (0.5 replays twice as fast; 0 = 1).
	TimeScale float64
	// MaxRate caps the replay rate: consecutive sends are at least 1/MaxRate
	// apart, later ones shifting (0 = no cap).
	MaxRate float64
	// IgnoreTimestamps drops the trace's schedule (the runner's load applies).
	IgnoreTimestamps bool
	// BlockTokens is the Mooncake hash block size (default 512).
	BlockTokens int
	// Loop restarts the dataset at its end instead of returning io.EOF
	// (datasets only; traces end).
	Loop bool
}

// Replay is a Source over a Dataset.
type Replay struct {
	ds  *Dataset
	opt ReplayOptions
	gen *PromptGen
	at  []time.Duration

	mu     sync.Mutex
	next   int
	blocks map[int][]string // Mooncake hash id -> block words
}

// NewReplay returns a source that replays ds.
func NewReplay(ds *Dataset, opt ReplayOptions) (*Replay, error) {
	if opt.Tokenizer == nil {
		opt.Tokenizer = DefaultTokenizer()
	}
	if opt.DefaultOutput < 1 {
		return nil, fmt.Errorf("replay: default output tokens must be at least 1, got %d", opt.DefaultOutput)
	}
	if opt.TimeScale == 0 {
		opt.TimeScale = 1
	}
	if !(opt.TimeScale > 0) || opt.MaxRate < 0 || opt.MaxOutput < 0 {
		return nil, fmt.Errorf("replay: time scale must be > 0 and max rate, max output >= 0")
	}
	if opt.BlockTokens == 0 {
		opt.BlockTokens = 512
	}
	gen, err := NewPromptGen(opt.Tokenizer)
	if err != nil {
		return nil, err
	}
	r := &Replay{ds: ds, opt: opt, gen: gen, blocks: map[int][]string{}}
	// Schedule: scale, then enforce the rate cap in order.
	r.at = make([]time.Duration, len(ds.Entries))
	var prev time.Duration
	for i, e := range ds.Entries {
		at := time.Duration(float64(e.At) * opt.TimeScale)
		if i > 0 && opt.MaxRate > 0 {
			if min := prev + time.Duration(float64(time.Second)/opt.MaxRate); at < min {
				at = min
			}
		}
		r.at[i], prev = at, at
	}
	return r, nil
}

// Next returns the next record as a request, or io.EOF at the end.
func (r *Replay) Next(ctx context.Context) (*Request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	i := r.next
	n := len(r.ds.Entries)
	if i >= n && !(r.opt.Loop && !r.isTrace()) {
		r.mu.Unlock()
		return nil, io.EOF
	}
	r.next++
	r.mu.Unlock()
	e := r.ds.Entries[i%n]
	req := &Request{Index: i, Scenario: r.opt.Scenario}
	if e.HasAt && !r.opt.IgnoreTimestamps {
		req.At, req.HasAt = r.at[i], true
	}
	out := e.OutputTokens
	if len(e.Messages) > 0 {
		msgs := e.Messages
		if out == 0 && e.Reply != "" {
			out = r.opt.Tokenizer.Count(e.Reply)
		}
		req.Messages = msgs
		for _, m := range msgs {
			ids := r.opt.Tokenizer.Encode(m.Content)
			req.Tokens = append(req.Tokens, ids...)
		}
		req.PromptTokens = len(req.Tokens)
		if len(msgs) == 1 {
			req.Prompt = msgs[0].Content
		}
	} else {
		text, ids, err := r.synth(e, i)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", r.ds.File, e.Line, err)
		}
		req.Prompt, req.Tokens, req.PromptTokens = text, ids, len(ids)
		req.Messages = []Message{{Role: "user", Content: text}}
	}
	if out < 1 {
		out = r.opt.DefaultOutput
	}
	if r.opt.MaxOutput > 0 && out > r.opt.MaxOutput {
		out = r.opt.MaxOutput
	}
	req.MaxTokens = out
	if r.opt.ForceOutput {
		req.MinTokens = out
	}
	return req, nil
}

// Skip passes over the next record without building its prompt.
func (r *Replay) Skip(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next >= len(r.ds.Entries) && !(r.opt.Loop && !r.isTrace()) {
		return io.EOF
	}
	r.next++
	return nil
}

// OwnsSchedule reports whether the replay keeps a trace's timestamps.
func (r *Replay) OwnsSchedule() bool {
	return !r.opt.IgnoreTimestamps && len(r.ds.Entries) > 0 && r.ds.Entries[0].HasAt
}

func (r *Replay) isTrace() bool { return r.ds.Format == "azure" || r.ds.Format == "mooncake" }

// synth builds a prompt of exactly e.InputTokens tokens. With hash IDs,
// block k's words are a function of its hash, so records sharing leading
// hashes share a token prefix, as in the original trace.
func (r *Replay) synth(e Entry, i int) (string, []int, error) {
	rng := rand.New(rand.NewPCG(uint64(r.opt.Seed), 0x7265706c_00000000|uint64(i)))
	if len(e.HashIDs) == 0 {
		return r.gen.Text(rng, e.InputTokens)
	}
	var b strings.Builder
	left := e.InputTokens
	for _, h := range e.HashIDs {
		if left == 0 {
			break
		}
		words := r.block(h)
		k := min(left, len(words))
		for _, w := range words[:k] {
			b.WriteString(w)
		}
		left -= k
	}
	prefix := b.String()
	text, ids, err := r.gen.Extend(rng, prefix, e.InputTokens-left, left)
	if err != nil {
		// A tokenizer that merges across block boundaries: fall back to
		// an unshared prompt of the right length.
		return r.gen.Text(rng, e.InputTokens)
	}
	return text, ids, nil
}

func (r *Replay) block(h int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.blocks[h]; ok {
		return w
	}
	rng := rand.New(rand.NewPCG(uint64(r.opt.Seed), 0x626c6b00_00000000^uint64(h)))
	w := r.gen.spacedWords(rng, r.opt.BlockTokens)
	if len(r.blocks) > 100_000 {
		clear(r.blocks)
	}
	r.blocks[h] = w
	return w
}

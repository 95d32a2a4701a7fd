package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// probeTarget sends one short request before a run, as vLLM's benchmark
// does, so that a wrong --model, key, path or body field is reported once,
// with the server's own message, instead of failing every request of a
// stored run. Only answers that no retry can change stop the run: 4xx other
// than 408 and 429. A busy (429, 5xx) or slow server is left to the run,
// which records what happens.
//
// It returns the answer's HTTP status (0: no answer).
func probeTarget(ctx context.Context, client *http.Client, api wire.API, base string, reqOpt wire.RequestOptions, runID string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: "Hi"}}, Prompt: "Hi", PromptTokens: 1, MaxTokens: 1}
	hr, err := wire.NewRequest(ctx, api, base, req, &reqOpt)
	if err != nil {
		return 0, usageErr("building the check request: %v", err)
	}
	hr.Header.Set("X-Request-Id", runID+"-probe")
	resp, err := client.Do(hr)
	if err != nil {
		return 0, nil // unreachable targets were refused already; the run records the rest
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if s := resp.StatusCode; s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests {
		return s, usageErr("the target refused a one-token check request (%s %s, model %q): HTTP %d: %s; nothing was run (--no-probe skips this check)",
			hr.Method, hr.URL.Redacted(), reqOpt.Model, s, strings.Join(strings.Fields(string(body)), " "))
	}
	return resp.StatusCode, nil
}

// probeTimeout bounds the check request: the run's first-token limit, at
// most a minute, as a cold engine may load a model first.
func probeTimeout(ttft time.Duration) time.Duration {
	if ttft <= 0 || ttft > time.Minute {
		return time.Minute
	}
	return ttft
}

// Prompt-length calibration: --prompt-tokens means the server's tokens
// (--prompt-length-basis server, the default against a --target), as users
// of vllm bench expect, while prompts are built with a local tokenizer that
// need not be the model's (cl100k_base by default). Before the run the
// server counts an anchor text and the anchor followed by chunks of the
// prompt generator's word list, through its /tokenize endpoint where it has
// one (vLLM, ttft sim serve), else by the prompt usage of one-token requests
// (Ollama, llama.cpp, hosted APIs). Each difference is a chunk's count in
// the server's tokens, free of the constant BOS and chat-template tokens,
// so the user's message holds the asked length and the template adds its
// few tokens on top, as in vllm bench. Prompts draw their words uniformly
// from that list, so measuring all of it (or, through usage, as much as
// calibUsageRequests allow) leaves no sampling error in the mean; single
// prompts still vary by their own words (a few percent when the tokenizers
// differ a lot).
const (
	calibAnchorTokens   = 32
	calibTokenizeWords  = 512  // words per /tokenize chunk (all chunks measured)
	calibUsageFirst     = 128  // words in the first usage chunk, for a rough ratio
	calibUsageServerMax = 1536 // server tokens per usage request: below Ollama's default 2,048 context
	calibUsageRequests  = 12   // usage chunks at most
)

// promptCalibration is what the calibration measured.
type promptCalibration struct {
	// Via is "/tokenize" or "usage".
	Via string
	// Scale is the server's tokens per local token (1: they agree).
	Scale float64
	// Local and Server are the measured chunks' total lengths.
	Local, Server int
	// Words and Requests say how much was measured.
	Words, Requests int
}

// checkPromptBasis validates --prompt-length-basis.
func checkPromptBasis(b string) error {
	if b != "server" && b != "local" {
		return usageErr("--prompt-length-basis must be server or local, got %q", b)
	}
	return nil
}

// alignPromptLengths calibrates prompt lengths against the target and, when
// the server counts differently from the local tokenizer, rebuilds the
// workload so that prompts have the asked length in the server's tokens. It
// prints what it found. Workloads other than generated prompts (datasets,
// sessions) keep their local lengths.
func (b *benchRun) alignPromptLengths(ctx context.Context, reqOpt wire.RequestOptions, tok workload.Tokenizer) (workload.Tokenizer, error) {
	o := b.o
	if o.PromptBasis == "local" || o.Target == "" {
		return tok, nil
	}
	switch b.src.(type) {
	case *workload.Fixed, *workload.Generated:
	default:
		return tok, nil
	}
	say := func(format string, a ...any) {
		if !o.Quiet {
			fmt.Fprintf(b.env.Stderr, "ttft bench: prompt lengths: "+format+"\n", a...)
		}
	}
	switch {
	case o.NoProbe:
		// --no-probe: no request reaches the target before the run.
		say("not calibrated (--no-probe); --prompt-tokens counts %s tokens", tok.Name())
		return tok, nil
	case b.probeStatus < 200 || b.probeStatus > 299:
		// A busy or failing server is left to the run, unburdened.
		say("not calibrated: the check request got no successful answer; --prompt-tokens counts %s tokens", tok.Name())
		return tok, nil
	}
	cal, err := calibratePrompts(ctx, b.tgt.client, b.api, b.tgt.base, reqOpt, tok, b.runID, probeTimeout(o.TTFTTimeout))
	if err != nil {
		say("not calibrated against the server (%v); --prompt-tokens counts %s tokens", err, tok.Name())
		return tok, nil
	}
	if b.tgt.server != nil {
		// Kept in the manifest, so a stored run says how its prompt
		// lengths relate to the server's tokens.
		b.tgt.server["prompt_calibration"] = map[string]any{
			"via": cal.Via, "server_tokens_per_local_token": cal.Scale, "tokenizer": tok.Name(),
			"server_tokens": cal.Server, "local_tokens": cal.Local, "words": cal.Words, "requests": cal.Requests,
		}
	}
	if cal.Scale == 1 {
		say("the server (%s) counts prompts as %s does (%d words measured); no adjustment", cal.Via, tok.Name(), cal.Words)
		return tok, nil
	}
	o.work.promptScale = cal.Scale
	src, scenario, tok2, err := o.workload(b.env)
	if err != nil {
		return nil, err
	}
	b.src, b.scenario = src, scenario
	say("the server (%s) counts %.3f tokens per %s token (%d for %d, over %d words in %d requests); prompts are built with ~%d %s tokens so that the server sees %d (--prompt-length-basis local turns this off)",
		cal.Via, cal.Scale, tok.Name(), cal.Server, cal.Local, cal.Words, cal.Requests,
		max(1, int(math.Round(float64(o.work.PromptTokens)/cal.Scale))), tok.Name(), o.work.PromptTokens)
	return tok2, nil
}

// calibratePrompts measures how the server counts the prompt generator's
// words (see the comment on the constants above).
func calibratePrompts(ctx context.Context, client *http.Client, api wire.API, base string, reqOpt wire.RequestOptions, tok workload.Tokenizer, runID string, timeout time.Duration) (*promptCalibration, error) {
	gen, err := workload.NewPromptGen(tok)
	if err != nil {
		return nil, err
	}
	// A seed of its own: the calibration texts share no prefix with the
	// run's prompts, so they warm no prefix cache for the run.
	anchor, _, err := gen.Text(rand.New(rand.NewPCG(0x63616c69, 0)), calibAnchorTokens)
	if err != nil {
		return nil, err
	}
	words := gen.SpacedWords(0x63616c69)
	cal := &promptCalibration{Via: "/tokenize"}
	n := 0
	measure := func(text string, localTokens int) (int, error) {
		if cal.Via == "/tokenize" {
			return tokenizeCount(ctx, client, base, reqOpt, text, timeout)
		}
		n++
		// Like the check request's, the id ends in "-probe": every request
		// before the run is told apart from the run's own that way.
		c, err := usageCount(ctx, client, api, base, reqOpt, text, localTokens, fmt.Sprintf("%s-calibration%d-probe", runID, n), timeout)
		if err != nil && ctx.Err() == nil {
			// One retry: a stream cut once should not cost the run its
			// calibration.
			n++
			c, err = usageCount(ctx, client, api, base, reqOpt, text, localTokens, fmt.Sprintf("%s-calibration%d-probe", runID, n), timeout)
		}
		return c, err
	}
	localBase := len(tok.Encode(anchor))
	serverBase, err := measure(anchor, localBase)
	if err != nil {
		cal.Via = "usage"
		if serverBase, err = measure(anchor, localBase); err != nil {
			return nil, err
		}
	}
	chunk := calibTokenizeWords
	if cal.Via == "usage" {
		chunk = calibUsageFirst
	}
	for i := 0; i < len(words) && (cal.Via == "/tokenize" || cal.Requests < calibUsageRequests); {
		j := min(i+chunk, len(words))
		text := anchor + strings.Join(words[i:j], "")
		local := len(tok.Encode(text)) - localBase
		c, err := measure(text, localBase+local)
		if err != nil {
			return nil, err
		}
		if c <= serverBase {
			return nil, fmt.Errorf("the server counted %d tokens for a text of %d, and %d after %d more words", serverBase, localBase, c, j-i)
		}
		cal.Local += local
		cal.Server += c - serverBase
		cal.Words += j - i
		cal.Requests++
		i = j
		if cal.Via == "usage" && cal.Server == cal.Local {
			// Exact agreement over a whole chunk: the same tokenizer
			// (ttft's own simulator, a model made by ttft model synth);
			// spare the server the rest.
			break
		}
		if cal.Via == "usage" {
			// Size the next chunks to the ratio seen so far, keeping each
			// request well inside a small context window.
			r := float64(cal.Server) / float64(cal.Local)
			chunk = max(64, min(1024, int(calibUsageServerMax/r)))
		}
	}
	cal.Requests++ // the anchor
	if cal.Local <= 0 {
		return nil, fmt.Errorf("nothing measured")
	}
	if cal.Server == cal.Local {
		cal.Scale = 1
		return cal, nil
	}
	cal.Scale = float64(cal.Server) / float64(cal.Local)
	// A real tokenizer makes between a fifth and ten tokens of a common
	// English word; outside that the counts are not prompt lengths (a
	// server whose usage is cached or estimated).
	if cal.Scale < 0.2 || cal.Scale > 10 {
		return nil, fmt.Errorf("the server counted %d tokens where %s counts %d, an implausible ratio", cal.Server, tok.Name(), cal.Local)
	}
	return cal, nil
}

// tokenizeCount asks the server's /tokenize (vLLM's) for a prompt's count.
func tokenizeCount(ctx context.Context, client *http.Client, base string, reqOpt wire.RequestOptions, text string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": reqOpt.Model, "prompt": text})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	hr.Header.Set("Content-Type", "application/json")
	for k, vs := range reqOpt.Headers {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if reqOpt.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+reqOpt.APIKey)
	}
	resp, err := client.Do(hr)
	if err != nil {
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("reading /tokenize: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /tokenize: HTTP %d", resp.StatusCode)
	}
	return parseTokenizeCount(data)
}

// parseTokenizeCount reads vLLM's /tokenize answer: count, else the length
// of tokens.
func parseTokenizeCount(data []byte) (int, error) {
	var r struct {
		Count  *int  `json:"count"`
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, fmt.Errorf("/tokenize answer is not JSON: %w", err)
	}
	switch {
	case r.Count != nil && *r.Count > 0:
		return *r.Count, nil
	case r.Count == nil && len(r.Tokens) > 0:
		return len(r.Tokens), nil
	}
	return 0, fmt.Errorf("/tokenize answer has no positive count")
}

// usageCount sends a one-token request with text as the user message and
// returns the prompt usage the server reports.
func usageCount(ctx context.Context, client *http.Client, api wire.API, base string, reqOpt wire.RequestOptions, text string, n int, id string, timeout time.Duration) (int, error) {
	if reqOpt.NoUsage {
		return 0, fmt.Errorf("the server has no /tokenize and --no-usage asks for no usage")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &workload.Request{Messages: []workload.Message{{Role: "user", Content: text}}, Prompt: text, PromptTokens: n, MaxTokens: 1}
	hr, err := wire.NewRequest(ctx, api, base, req, &reqOpt)
	if err != nil {
		return 0, err
	}
	hr.Header.Set("X-Request-Id", id)
	resp, err := client.Do(hr)
	if err != nil {
		return 0, fmt.Errorf("calibration request: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, fmt.Errorf("reading the calibration answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("calibration request: HTTP %d", resp.StatusCode)
	}
	u, ok := promptUsage(data)
	if !ok {
		return 0, fmt.Errorf("the server reported no prompt usage")
	}
	return u, nil
}

// usageRe finds prompt-usage fields in a stream or a whole answer: OpenAI's
// prompt_tokens, Anthropic's input_tokens.
var usageRe = regexp.MustCompile(`"(?:prompt_tokens|input_tokens)"\s*:\s*([0-9]+)`)

// promptUsage is the last positive prompt usage in an answer (a stream's
// final usage chunk; Anthropic's message_start).
func promptUsage(data []byte) (int, bool) {
	best := 0
	for _, m := range usageRe.FindAllSubmatch(data, -1) {
		if n, err := strconv.Atoi(string(m[1])); err == nil && n > 0 {
			best = n
		}
	}
	return best, best > 0
}

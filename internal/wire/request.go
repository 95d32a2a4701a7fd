package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ttft-dev/ttft/internal/workload"
)

// API names a wire protocol.
type API string

const (
	OpenAIChat        API = "openai-chat"
	OpenAICompletions API = "openai-completions"
	Anthropic         API = "anthropic"
)

// ParseAPI validates an --api value.
func ParseAPI(s string) (API, error) {
	switch a := API(s); a {
	case OpenAIChat, OpenAICompletions, Anthropic:
		return a, nil
	}
	return "", fmt.Errorf("unknown API %q (want openai-chat, openai-completions or anthropic)", s)
}

// Provider is the API's family, as the GenAI semantic conventions name
// providers (gen_ai.provider.name) and the gateway names backend APIs:
// "openai" for both OpenAI APIs, "anthropic"; any other value as it is.
func (a API) Provider() string {
	switch a {
	case OpenAIChat, OpenAICompletions:
		return "openai"
	case Anthropic:
		return "anthropic"
	}
	return string(a)
}

// AnthropicVersion is sent as the anthropic-version header.
const AnthropicVersion = "2023-06-01"

// RequestOptions are the per-run settings of every request.
type RequestOptions struct {
	Model string
	// Temperature is sent unless NoTemperature (some reasoning models refuse it).
	Temperature   float64
	NoTemperature bool
	// APIKey goes in Authorization: Bearer (OpenAI) or x-api-key (Anthropic).
	APIKey string
	// Headers are added to every request (--header).
	Headers http.Header
	// NoUsage drops stream_options.include_usage for servers that reject it.
	NoUsage bool
	// ExtraBody is merged into the JSON body (--extra-body).
	ExtraBody map[string]any
	// MaxTokensField names the OpenAI output cap: "max_tokens" (default,
	// what vLLM, SGLang, TGI, llama.cpp and Ollama read) or
	// "max_completion_tokens" (OpenAI's reasoning models refuse the former).
	MaxTokensField string
}

// BaseURL normalises a target: scheme and host, with any trailing "/" and
// "/v1" removed, so both "http://h:8000" and "http://h:8000/v1/" work.
func BaseURL(target string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(target))
	if err != nil {
		return "", fmt.Errorf("target %q is not a URL: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("target %q must start with http:// or https://", target)
	}
	if u.Host == "" {
		return "", fmt.Errorf("target %q has no host", target)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path = p
	u.RawQuery, u.Fragment = "", ""
	return strings.TrimRight(u.String(), "/"), nil
}

// Path is the endpoint path of an API under the base URL.
func (a API) Path() string {
	switch a {
	case OpenAICompletions:
		return "/v1/completions"
	case Anthropic:
		return "/v1/messages"
	default:
		return "/v1/chat/completions"
	}
}

// Body builds the JSON body for req: what encoding/json writes for a map of
// the body's fields (so keys sorted, and --extra-body's keys replacing
// ours), written by a template (body.go). The messages are the workload's
// own, whose JSON is TextMessage's.
func Body(api API, req *workload.Request, opt *RequestOptions) ([]byte, error) {
	return NewRequester(api, "", opt).AppendBody(nil, req)
}

// bodyMap is Body the way it was first written, through a map and
// encoding/json: the reference the template must match
// (TestBodyTemplateMatches, FuzzBodyTemplate), and its answer (an error)
// whenever an --extra-body value cannot be encoded.
func bodyMap(api API, req *workload.Request, opt *RequestOptions) ([]byte, error) {
	m := make(map[string]any, 10)
	m["model"] = opt.Model
	m["stream"] = true
	if !opt.NoTemperature {
		m["temperature"] = opt.Temperature
	}
	msgs := req.Messages
	if len(msgs) == 0 && req.Prompt != "" {
		msgs = []workload.Message{{Role: "user", Content: req.Prompt}}
	}
	switch api {
	case Anthropic:
		var system []string
		conv := make([]workload.Message, 0, len(msgs))
		for _, mm := range msgs {
			if mm.Role == "system" {
				system = append(system, mm.Content)
				continue
			}
			conv = append(conv, mm)
		}
		if len(system) > 0 {
			m["system"] = strings.Join(system, "\n\n")
		}
		m["messages"] = conv
		maxTok := req.MaxTokens
		if maxTok <= 0 {
			maxTok = 1024 // required by the Messages API
		}
		m["max_tokens"] = maxTok
	case OpenAICompletions:
		m["prompt"] = completionPrompt(req, msgs)
		openAICommon(m, req, opt)
	default:
		m["messages"] = msgs
		openAICommon(m, req, opt)
	}
	for k, v := range opt.ExtraBody {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding request body: %w", err)
	}
	return b, nil
}

// completionPrompt is a completions request's prompt: the workload's, or
// its messages' contents joined by blank lines.
func completionPrompt(req *workload.Request, msgs []workload.Message) string {
	if req.Prompt != "" {
		return req.Prompt
	}
	var b strings.Builder
	for i, mm := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(mm.Content)
	}
	return b.String()
}

func openAICommon(m map[string]any, req *workload.Request, opt *RequestOptions) {
	if req.MaxTokens > 0 {
		m[opt.maxTokensField()] = req.MaxTokens
	}
	if !opt.NoUsage {
		m["stream_options"] = StreamOptions{IncludeUsage: true}
	}
	if req.MinTokens > 0 {
		// vLLM and SGLang extensions that force the output length; only sent
		// when asked, since hosted APIs reject unknown fields.
		m["min_tokens"] = req.MinTokens
		m["ignore_eos"] = true
	}
}

// maxTokensField is the OpenAI output cap's name.
func (opt *RequestOptions) maxTokensField() string {
	if opt.MaxTokensField == "" {
		return "max_tokens"
	}
	return opt.MaxTokensField
}

// NewRequest builds the HTTP request for req against base (see BaseURL).
// A run builds a Requester once instead.
func NewRequest(ctx context.Context, api API, base string, req *workload.Request, opt *RequestOptions) (*http.Request, error) {
	return NewRequester(api, base, opt).New(ctx, req)
}

// requestHeader is the header every request of a run carries.
func requestHeader(api API, opt *RequestOptions) http.Header {
	h := make(http.Header, 4+len(opt.Headers))
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	// Compression would delay events until a compressor flushes.
	h.Set("Accept-Encoding", "identity")
	for k, vs := range opt.Headers {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if opt.APIKey != "" {
		if api == Anthropic {
			h.Set("x-api-key", opt.APIKey)
		} else {
			h.Set("Authorization", "Bearer "+opt.APIKey)
		}
	}
	if api == Anthropic && h.Get("anthropic-version") == "" {
		h.Set("anthropic-version", AnthropicVersion)
	}
	return h
}

// workload.Message is sent as a TextMessage: same fields (this conversion
// compiles only while it is so) and same JSON (TestTextMessageJSON).
var _ = TextMessage(workload.Message{})

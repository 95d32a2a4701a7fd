package wire

import (
	"bytes"
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

// Body builds the JSON body for req. It is a map, not one of the request
// types of shapes.go, because --extra-body merges any key into it; the
// messages are the workload's own, whose JSON is TextMessage's.
func Body(api API, req *workload.Request, opt *RequestOptions) ([]byte, error) {
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
		prompt := req.Prompt
		if prompt == "" {
			var b strings.Builder
			for i, mm := range msgs {
				if i > 0 {
					b.WriteString("\n\n")
				}
				b.WriteString(mm.Content)
			}
			prompt = b.String()
		}
		m["prompt"] = prompt
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

func openAICommon(m map[string]any, req *workload.Request, opt *RequestOptions) {
	if req.MaxTokens > 0 {
		field := opt.MaxTokensField
		if field == "" {
			field = "max_tokens"
		}
		m[field] = req.MaxTokens
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

// NewRequest builds the HTTP request for req against base (see BaseURL).
func NewRequest(ctx context.Context, api API, base string, req *workload.Request, opt *RequestOptions) (*http.Request, error) {
	body, err := Body(api, req, opt)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, base+api.Path(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	// Compression would delay events until a compressor flushes.
	hr.Header.Set("Accept-Encoding", "identity")
	for k, vs := range opt.Headers {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	if opt.APIKey != "" {
		if api == Anthropic {
			hr.Header.Set("x-api-key", opt.APIKey)
		} else {
			hr.Header.Set("Authorization", "Bearer "+opt.APIKey)
		}
	}
	if api == Anthropic && hr.Header.Get("anthropic-version") == "" {
		hr.Header.Set("anthropic-version", AnthropicVersion)
	}
	return hr, nil
}

// workload.Message is sent as a TextMessage: same fields (this conversion
// compiles only while it is so) and same JSON (TestTextMessageJSON).
var _ = TextMessage(workload.Message{})

package enginetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/gguf"
	"github.com/ttft-dev/ttft/internal/testutil"
	"github.com/ttft-dev/ttft/internal/wire"
)

// HowToGet tells a user how to install the engine the tests need.
const HowToGet = "go install github.com/ollama/ollama@v0.6.5 (about 6 minutes; or run .ci/install-ollama.sh); or set TTFT_OLLAMA to the binary"

// Binary finds ollama (TTFT_OLLAMA, then PATH), skipping the test with a
// clear message when absent, failing it under CI.
func Binary(t testing.TB) string {
	t.Helper()
	return testutil.Binary(t, "TTFT_OLLAMA", "ollama", HowToGet)
}

// Ollama is a running `ollama serve` owned by a test.
type Ollama struct {
	Bin  string
	Host string // 127.0.0.1:PORT
	URL  string // http://127.0.0.1:PORT
	Dir  string
	Log  string // server log path
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs `ollama serve` on a free 127.0.0.1 port with HOME and
// OLLAMA_MODELS in a temp dir, one request slot (so KV-cache reuse is
// deterministic) and models kept loaded, and waits until it answers. It is
// stopped (with its runner processes) when the test ends.
func Start(t testing.TB, bin string) *Ollama {
	t.Helper()
	dir := t.TempDir()
	// The free port is picked by binding and closing it, so another process
	// may take it before ollama binds: try a fresh one then.
	for attempt := 1; ; attempt++ {
		o, portTaken := startOnce(t, bin, dir, attempt)
		if o != nil {
			return o
		}
		if !portTaken || attempt == 3 {
			t.Fatal("ollama serve did not start (see above)")
		}
	}
}

// startOnce starts one server; nil and true when its port was taken.
func startOnce(t testing.TB, bin, dir string, attempt int) (*Ollama, bool) {
	t.Helper()
	port := freePort(t)
	o := &Ollama{Bin: bin, Host: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, Log: filepath.Join(dir, fmt.Sprintf("serve.%d.log", attempt)), done: make(chan struct{})}
	o.URL = "http://" + o.Host
	logf, err := os.Create(o.Log)
	if err != nil {
		t.Fatal(err)
	}
	o.cmd = exec.Command(bin, "serve")
	o.cmd.Env = o.env()
	o.cmd.Stdout, o.cmd.Stderr = logf, logf
	// Own process group: the server starts runner subprocesses, and they
	// must die with it.
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := o.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s serve: %v", bin, err)
	}
	go func() { o.cmd.Wait(); logf.Close(); close(o.done) }()
	t.Cleanup(o.stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(o.URL + "/api/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return o, false
			}
		}
		select {
		case <-o.done:
			tail := o.LogTail()
			if strings.Contains(tail, "address already in use") {
				t.Logf("port %d was taken before ollama bound it; retrying", port)
				return nil, true
			}
			t.Errorf("ollama serve exited early:\n%s", tail)
			return nil, false
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Errorf("ollama serve did not answer on %s within 60s:\n%s", o.URL, o.LogTail())
			return nil, false
		}
	}
}

func (o *Ollama) env() []string {
	keep := []string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OLLAMA_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		keep = append(keep, kv)
	}
	return append(keep,
		"HOME="+o.Dir,
		"OLLAMA_HOST="+o.Host,
		"OLLAMA_MODELS="+filepath.Join(o.Dir, "models"),
		"OLLAMA_NUM_PARALLEL=1",
		"OLLAMA_MAX_LOADED_MODELS=1",
		"OLLAMA_KEEP_ALIVE=1h",
		"OLLAMA_NOPRUNE=1",
	)
}

func (o *Ollama) stop() {
	if o.cmd.Process == nil {
		return
	}
	pgid := o.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-o.done
	}
	// Runners that outlived the server share its process group.
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// Requests counts the POSTs to path in the server's access log.
func (o *Ollama) Requests(path string) int {
	b, _ := os.ReadFile(o.Log)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "POST") && strings.Contains(line, `"`+path+`"`) {
			n++
		}
	}
	return n
}

// LogTail is the end of the server log, for failure messages.
func (o *Ollama) LogTail() string {
	b, _ := os.ReadFile(o.Log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Create synthesizes a model with c, writes its Modelfile and runs
// `ollama create name`. It returns the model's vocabulary, whose Tokenize
// predicts the engine's prompt token counts.
func (o *Ollama) Create(t testing.TB, name string, c gguf.Config) *gguf.Vocab {
	t.Helper()
	path := filepath.Join(o.Dir, name+".gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := gguf.Synth(f, c)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("synthesizing %s: %v", path, err)
	}
	mf := filepath.Join(o.Dir, name+".Modelfile")
	// One compute thread: ggml's worker threads spin on barriers, and on a
	// small oversubscribed CI machine a descheduled partner thread made
	// prefill ~10x slower and erratic (measured: 100-token prompts 870 ms
	// with 2 threads, 80 ms with 1, at load average 20 on 2 cores).
	text := gguf.Modelfile(path, c) + "PARAMETER num_thread 1\n"
	if err := os.WriteFile(mf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Bin, "create", name, "-f", mf)
	cmd.Env = o.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create %s: %v\n%s\nserver log:\n%s", name, err, out, o.LogTail())
	}
	return v
}

// Message is a chat message in both APIs (native and OpenAI-compatible).
type Message = wire.TextMessage

// NativeResult is /api/chat's final answer; durations are nanoseconds.
type NativeResult struct {
	Message            Message `json:"message"`
	Done               bool    `json:"done"`
	DoneReason         string  `json:"done_reason"`
	TotalDuration      int64   `json:"total_duration"`
	LoadDuration       int64   `json:"load_duration"`
	PromptEvalCount    int     `json:"prompt_eval_count"`
	PromptEvalDuration int64   `json:"prompt_eval_duration"`
	EvalCount          int     `json:"eval_count"`
	EvalDuration       int64   `json:"eval_duration"`
}

// Chat sends a non-streaming native /api/chat request.
func (o *Ollama) Chat(ctx context.Context, model string, msgs []Message, maxTokens int) (*NativeResult, error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "messages": msgs, "stream": false,
		"options": map[string]any{"num_predict": maxTokens, "seed": 1},
	})
	resp, err := post(ctx, o.URL+"/api/chat", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r NativeResult
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("decoding /api/chat answer: %w", err)
	}
	if !r.Done {
		return nil, fmt.Errorf("/api/chat answer not done: %+v", r)
	}
	return &r, nil
}

// StreamResult is what a client sees of one OpenAI-compatible stream.
type StreamResult struct {
	TTFT          time.Duration // send to first non-empty content delta
	E2E           time.Duration
	ContentChunks int // chunks carrying non-empty content
	Text          string
	FinishReason  string
	PromptTokens  int // usage
	OutputTokens  int // usage
	SawDone       bool
}

// StreamChat sends a streaming /v1/chat/completions request with usage and
// times the first content token as a client would.
func (o *Ollama) StreamChat(ctx context.Context, model string, msgs []Message, maxTokens int) (*StreamResult, error) {
	return StreamChat(ctx, o.URL, model, msgs, maxTokens)
}

// StreamChat is Ollama.StreamChat against any OpenAI-compatible base URL
// (a gateway in front of engines, say).
func StreamChat(ctx context.Context, baseURL, model string, msgs []Message, maxTokens int) (*StreamResult, error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "messages": msgs, "stream": true, "max_tokens": maxTokens, "seed": 1,
		"stream_options": map[string]any{"include_usage": true},
	})
	start := time.Now()
	resp, err := post(ctx, baseURL+"/v1/chat/completions", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readOpenAIStream(resp.Body, start)
}

func readOpenAIStream(r io.Reader, start time.Time) (*StreamResult, error) {
	var res StreamResult
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			res.SawDone = true
			break
		}
		var chunk wire.ChatCompletionChunk
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return nil, fmt.Errorf("decoding stream chunk %q: %w", data, err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				if res.ContentChunks == 0 {
					res.TTFT = time.Since(start)
				}
				res.ContentChunks++
				text.WriteString(c.Delta.Content)
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				res.FinishReason = *c.FinishReason
			}
		}
		if chunk.Usage != nil {
			res.PromptTokens, res.OutputTokens = chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	res.E2E = time.Since(start)
	res.Text = text.String()
	return &res, nil
}

func post(ctx context.Context, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		resp.Body.Close()
		return nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return resp, nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Words returns n vocabulary words drawn with a seed: under the synthesized
// vocabulary each is exactly one token, so n words are n prompt tokens.
func Words(v *gguf.Vocab, n int, seed uint64) string {
	words := v.Words()
	s := seed*0x9E3779B97F4A7C15 + 1
	out := make([]string, n)
	for i := range out {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		out[i] = words[s%uint64(len(words))]
	}
	return strings.Join(out, " ")
}

// StreamNative sends a streaming native /api/chat request and returns the
// client's TTFT (first non-empty content line) with the engine's own final
// timings for the same request.
func (o *Ollama) StreamNative(ctx context.Context, model string, msgs []Message, maxTokens int) (time.Duration, *NativeResult, error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "messages": msgs, "stream": true,
		"options": map[string]any{"num_predict": maxTokens, "seed": 1},
	})
	start := time.Now()
	resp, err := post(ctx, o.URL+"/api/chat", body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var ttft time.Duration
	dec := json.NewDecoder(resp.Body)
	for {
		var r NativeResult
		if err := dec.Decode(&r); err != nil {
			return 0, nil, fmt.Errorf("decoding /api/chat stream: %w", err)
		}
		if ttft == 0 && r.Message.Content != "" {
			ttft = time.Since(start)
		}
		if r.Done {
			return ttft, &r, nil
		}
	}
}

package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/gguf"
	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/workload"
)

// smallVocabTokenizer is the tokenizer of a synthesized GGUF model with a
// vocabulary too small to hold most words whole: under it a cl100k_base
// word is about three tokens, as with Ollama's small models.
func smallVocabTokenizer(t *testing.T) workload.Tokenizer {
	t.Helper()
	tok, _ := ggufTokenizer(t, 600)
	return tok
}

// ggufTokenizer writes the tokenizer of a synthesized model with a
// vocabulary of size tokens as a GGUF file and loads it.
func ggufTokenizer(t *testing.T, size int) (workload.Tokenizer, string) {
	t.Helper()
	c := gguf.DefaultConfig()
	c.Vocab = size
	v, err := gguf.NewVocab(c.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "small.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(f, c.Metadata(v), nil, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tok, err := workload.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok, path
}

// withoutTokenize serves base with /tokenize answering 404, as engines
// without it do (Ollama, llama.cpp), so that calibration falls back to the
// prompt usage of real requests.
func withoutTokenize(t *testing.T, base string) string {
	t.Helper()
	u, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			http.NotFound(w, r)
			return
		}
		// The body is read whole first, as any LLM gateway does: Go's
		// HTTP/1 server closes an unread request body once the response
		// headers go out, and a transport still copying it upstream then
		// tears the upstream connection down mid-stream (golang/go#40747),
		// a rare cut that has nothing to do with ttft bench.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// TestBenchPromptLengthBasis runs ttft bench --prompt-tokens 500 against a
// simulator whose tokenizer makes ~3 tokens of each local one: with the
// server basis (through /tokenize, and through usage when the server has no
// /tokenize) the server must see 500 tokens within 3 %; with the local
// basis it sees far more, which is what the calibration corrects.
func TestBenchPromptLengthBasis(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := serve.DefaultConfig()
	cfg.Tokenizer = smallVocabTokenizer(t)
	srv, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const asked = 500
	for _, tc := range []struct {
		name, basis string
		noTokenize  bool
		wantSaid    string
		within      bool // usage within 3 % of asked
	}{
		{"tokenize", "server", false, "the server (/tokenize) counts", true},
		{"usage", "server", true, "the server (usage) counts", true},
		{"local", "local", false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := srv.URL()
			if tc.noTokenize {
				target = withoutTokenize(t, target)
			}
			out := t.TempDir()
			args := []string{"bench", "--target", target, "--model", srv.ModelName(), "--prompt-tokens", "500", "--max-tokens", "4",
				"--requests", "3", "--concurrency", "1", "--out", out, "--no-store", "--no-progress", "--prompt-length-basis", tc.basis}
			var stdout, stderr bytes.Buffer
			if code := Main(ctx, Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
			}
			for _, l := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(l, "prompt lengths:") {
					t.Log(l)
				}
			}
			if tc.wantSaid != "" && !strings.Contains(stderr.String(), tc.wantSaid) {
				t.Errorf("stderr does not report the calibration %q:\n%s", tc.wantSaid, stderr.String())
			}
			if tc.wantSaid == "" && strings.Contains(stderr.String(), "prompt lengths:") {
				t.Errorf("the local basis calibrated:\n%s", stderr.String())
			}
			man, err := os.ReadFile(filepath.Join(out, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(man), `"prompt_calibration"`); got != (tc.basis == "server") {
				t.Errorf("manifest has prompt_calibration: %v, want %v", got, tc.basis == "server")
			}
			recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range recs {
				if r.Warmup {
					continue
				}
				n++
				u := r.PromptTokensUsage
				off := float64(u-asked) / asked
				t.Logf("request %d: server prompt tokens %d, recorded prompt_tokens %d", r.Index, u, r.PromptTokens)
				switch {
				case tc.within && (off > 0.03 || off < -0.03):
					t.Errorf("request %d: the server saw %d prompt tokens, want %d within 3%%", r.Index, u, asked)
				case tc.within && r.PromptTokens != asked:
					t.Errorf("request %d: recorded prompt_tokens %d, want the asked %d", r.Index, r.PromptTokens, asked)
				case !tc.within && u < 2*asked:
					t.Errorf("request %d: local basis, the server saw %d tokens; the test's tokenizer should make that well over %d", r.Index, u, 2*asked)
				}
			}
			if n != 3 {
				t.Errorf("%d measured records, want 3", n)
			}
		})
	}
}

func TestParseTokenizeCount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // 0: an error
	}{
		{`{"count":5,"tokens":[1,2,3,4,5],"max_model_len":8192}`, 5},
		{`{"tokens":[7,8]}`, 2},
		{`{"count":0,"tokens":[]}`, 0},
		{`{"detail":"Not Found"}`, 0},
		{`not json`, 0},
		{`{"count":"5"}`, 0},
	} {
		got, err := parseTokenizeCount([]byte(tc.in))
		if (err != nil) != (tc.want == 0) || got != tc.want {
			t.Errorf("parseTokenizeCount(%s) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestPromptUsage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // 0: none
	}{
		{"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":512,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", 512},
		{`{"usage":{"prompt_tokens": 17, "completion_tokens": 1}}`, 17},
		{"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":44,\"output_tokens\":1}}}\n\n", 44},
		{"data: {\"usage\":null}\n\ndata: [DONE]\n", 0},
		{`{"usage":{"prompt_tokens":0}}`, 0},
	} {
		got, ok := promptUsage([]byte(tc.in))
		if ok != (tc.want > 0) || got != tc.want {
			t.Errorf("promptUsage(%q) = %d, %v; want %d", tc.in, got, ok, tc.want)
		}
	}
}

func FuzzParseTokenizeCount(f *testing.F) {
	f.Add([]byte(`{"count":5,"tokens":[1,2,3,4,5]}`))
	f.Add([]byte(`{"tokens":[1]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := parseTokenizeCount(data)
		if err == nil && n <= 0 {
			t.Fatalf("accepted a count of %d", n)
		}
	})
}

func FuzzPromptUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":12}}`))
	f.Add([]byte(`"input_tokens": 3`))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := promptUsage(data)
		if ok != (n > 0) {
			t.Fatalf("promptUsage = %d, %v", n, ok)
		}
	})
}

func TestPromptBasisFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), Env{Args: []string{"bench", "--prompt-length-basis", "words", "--no-store"}, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	if code != ExitUsage || !strings.Contains(stderr.String(), "--prompt-length-basis") {
		t.Errorf("exit %d, stderr %q; want a usage error naming the flag", code, stderr.String())
	}
}

// TestBenchGGUFTokenizerExact: with --tokenizer pointing at the server's
// own GGUF model file, prompts are exact in the server's tokens, and the
// calibration finds nothing to adjust.
func TestBenchGGUFTokenizerExact(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok, path := ggufTokenizer(t, 3000)
	cfg := serve.DefaultConfig()
	cfg.Tokenizer = tok
	srv, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out := t.TempDir()
	args := []string{"bench", "--target", srv.URL(), "--model", srv.ModelName(), "--tokenizer", path, "--prompt-tokens", "300", "--max-tokens", "4",
		"--requests", "3", "--concurrency", "1", "--out", out, "--no-store", "--no-progress"}
	var stdout, stderr bytes.Buffer
	if code := Main(ctx, Env{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "the server (/tokenize) counts prompts as "+path+" does") {
		t.Errorf("calibration did not find the tokenizers equal:\n%s", stderr.String())
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if !r.Warmup && (r.PromptTokensUsage != 300 || r.PromptTokens != 300) {
			t.Errorf("request %d: server saw %d prompt tokens, recorded %d; want exactly 300", r.Index, r.PromptTokensUsage, r.PromptTokens)
		}
	}
}

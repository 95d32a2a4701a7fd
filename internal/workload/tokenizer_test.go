package workload

import (
	"errors"
	"net/http"
	"sync"
	"testing"
)

type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("tokenizer loading tried the network: %s", r.URL)
	return nil, errors.New("network disabled in test")
}

// The embedded encoder must load with the network unreachable and no cache.
func TestEmbeddedTokenizerIsOffline(t *testing.T) {
	t.Setenv("TIKTOKEN_CACHE_DIR", t.TempDir())
	t.Setenv("DATA_GYM_CACHE_DIR", t.TempDir())
	old := http.DefaultTransport
	http.DefaultTransport = failTransport{t}
	defer func() { http.DefaultTransport = old }()
	tok, err := loadTiktoken("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("hello world"); len(got) != 2 || got[0] != 15339 || got[1] != 1917 {
		t.Fatalf("cl100k_base(hello world) = %v, want [15339 1917]", got)
	}
}

func TestDefaultTokenizerKnownCounts(t *testing.T) {
	tok := DefaultTokenizer()
	if tok.Name() != "cl100k_base" {
		t.Fatalf("name %q", tok.Name())
	}
	// Reference counts from OpenAI's tiktoken (cl100k_base).
	cases := []struct {
		text string
		want int
	}{
		{"", 0},
		{"hello world", 2},
		{"The quick brown fox jumps over the lazy dog.", 10},
		{"<|endoftext|>", 7}, // special tokens in user text are plain text
		{"你好，世界", 6},
	}
	for _, c := range cases {
		if got := tok.Count(c.text); got != c.want {
			t.Errorf("Count(%q) = %d, want %d", c.text, got, c.want)
		}
		if got := tok.Decode(tok.Encode(c.text)); got != c.text {
			t.Errorf("round trip %q -> %q", c.text, got)
		}
	}
	if DefaultTokenizer() != tok {
		t.Error("DefaultTokenizer is not cached")
	}
}

func TestEmbeddedTokenizerUnknown(t *testing.T) {
	if _, err := EmbeddedTokenizer("nope"); err == nil {
		t.Fatal("want error")
	}
}

func TestDefaultTokenizerConcurrent(t *testing.T) {
	tok := DefaultTokenizer()
	want := tok.Count("concurrent use of one tokenizer must be safe")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if got := tok.Count("concurrent use of one tokenizer must be safe"); got != want {
					t.Errorf("got %d want %d", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

package workload

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func drain(t *testing.T, src Source) []*Request {
	t.Helper()
	var out []*Request
	for i := 0; i < 10000; i++ {
		r, err := src.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	t.Fatal("source did not end")
	return nil
}

func TestDetectFormat(t *testing.T) {
	for file, want := range map[string]string{
		"testdata/sharegpt.json": "sharegpt", "testdata/prompts.jsonl": "jsonl",
		"testdata/azure.csv": "azure", "testdata/mooncake.jsonl": "mooncake",
	} {
		got, err := DetectFormat(file)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", file, got, err, want)
		}
	}
	p := filepath.Join(t.TempDir(), "x.txt")
	os.WriteFile(p, []byte("hello"), 0o644)
	if _, err := DetectFormat(p); err == nil {
		t.Error("plain text: want error")
	}
}

func TestShareGPT(t *testing.T) {
	if _, err := LoadDataset("testdata/sharegpt.json", "", BadLineStop); err == nil || !strings.Contains(err.Error(), "sharegpt.json:11:") {
		t.Fatalf("stop: %v, want error at sharegpt.json:11", err)
	}
	ds, err := LoadDataset("testdata/sharegpt.json", "", BadLineSkip)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Entries) != 3 || len(ds.Skipped) != 1 || ds.Unusable != 1 || ds.Skipped[0].Line != 11 {
		t.Fatalf("entries %d skipped %v unusable %d", len(ds.Entries), ds.Skipped, ds.Unusable)
	}
	if ds.Entries[0].Line != 2 || ds.Entries[2].Line != 12 {
		t.Errorf("lines %d %d, want 2 12", ds.Entries[0].Line, ds.Entries[2].Line)
	}
	tok := DefaultTokenizer()
	src, err := NewReplay(ds, ReplayOptions{DefaultOutput: 77, ForceOutput: true})
	if err != nil {
		t.Fatal(err)
	}
	reqs := drain(t, src)
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Messages[0].Content != "What is the capital of France?" || len(r.Messages) != 1 || r.HasAt {
		t.Fatalf("%+v", r)
	}
	if want := tok.Count("The capital of France is Paris."); r.MaxTokens != want || r.MinTokens != want {
		t.Errorf("output %d/%d, want %d", r.MaxTokens, r.MinTokens, want)
	}
	if r.PromptTokens != tok.Count(r.Messages[0].Content) || len(r.Tokens) != r.PromptTokens {
		t.Errorf("prompt tokens %d", r.PromptTokens)
	}
	if reqs[1].MaxTokens != 77 {
		t.Errorf("no reply: output %d, want default 77", reqs[1].MaxTokens)
	}
}

func TestJSONL(t *testing.T) {
	_, err := LoadDataset("testdata/prompts.jsonl", "jsonl", BadLineStop)
	var le *LineError
	if !errors.As(err, &le) || le.Line != 5 || !strings.Contains(err.Error(), "prompts.jsonl:5: output_tokens 0") {
		t.Fatalf("stop: %v", err)
	}
	ds, err := LoadDataset("testdata/prompts.jsonl", "jsonl", BadLineSkip)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Entries) != 3 || len(ds.Skipped) != 3 {
		t.Fatalf("entries %d skipped %d", len(ds.Entries), len(ds.Skipped))
	}
	lines := []int{ds.Skipped[0].Line, ds.Skipped[1].Line, ds.Skipped[2].Line}
	if lines[0] != 5 || lines[1] != 6 || lines[2] != 7 {
		t.Errorf("skipped lines %v", lines)
	}
	src, _ := NewReplay(ds, ReplayOptions{DefaultOutput: 9, MaxOutput: 40})
	reqs := drain(t, src)
	if reqs[0].MaxTokens != 20 || reqs[0].Prompt != "Tell me a joke." || reqs[1].MaxTokens != 40 || reqs[2].MaxTokens != 9 {
		t.Fatalf("outputs %d %d %d", reqs[0].MaxTokens, reqs[1].MaxTokens, reqs[2].MaxTokens)
	}
	if len(reqs[1].Messages) != 2 || reqs[1].Messages[0].Role != "system" {
		t.Fatalf("messages %+v", reqs[1].Messages)
	}
	loop, _ := NewReplay(ds, ReplayOptions{DefaultOutput: 9, Loop: true})
	for i := 0; i < 7; i++ {
		r, err := loop.Next(context.Background())
		if err != nil || r.Index != i {
			t.Fatalf("loop %d: %v", i, err)
		}
	}
}

func TestAzureTrace(t *testing.T) {
	if _, err := LoadDataset("testdata/azure.csv", "", BadLineStop); err == nil || !strings.Contains(err.Error(), "azure.csv:5: TIMESTAMP") {
		t.Fatalf("stop: %v", err)
	}
	ds, err := LoadDataset("testdata/azure.csv", "", BadLineSkip)
	if err != nil {
		t.Fatal(err)
	}
	tok := DefaultTokenizer()
	src, _ := NewReplay(ds, ReplayOptions{DefaultOutput: 1, ForceOutput: true, TimeScale: 0.5})
	reqs := drain(t, src)
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	wantIn := []int{374, 396, 879, 1200}
	wantOut := []int{44, 109, 1, 31}
	wantAt := []time.Duration{0, 2157289500, 2259705000, 3000000000}
	for i, r := range reqs {
		if r.PromptTokens != wantIn[i] || tok.Count(r.Prompt) != wantIn[i] || r.MaxTokens != wantOut[i] || r.MinTokens != wantOut[i] {
			t.Errorf("request %d: in %d (count %d) out %d", i, r.PromptTokens, tok.Count(r.Prompt), r.MaxTokens)
		}
		if !r.HasAt || r.At != wantAt[i] {
			t.Errorf("request %d at %v, want %v", i, r.At, wantAt[i])
		}
	}
	// Rate cap: at most 1 request per second.
	src, _ = NewReplay(ds, ReplayOptions{DefaultOutput: 1, MaxRate: 1})
	reqs = drain(t, src)
	for i, want := range []time.Duration{0, 4314579000, 5314579000, 6314579000} {
		if reqs[i].At != want {
			t.Errorf("capped %d at %v, want %v", i, reqs[i].At, want)
		}
	}
}

func TestMooncakeTraceSharesBlocks(t *testing.T) {
	if _, err := LoadDataset("testdata/mooncake.jsonl", "", BadLineStop); err == nil || !strings.Contains(err.Error(), "mooncake.jsonl:4:") {
		t.Fatalf("stop: %v", err)
	}
	ds, err := LoadDataset("testdata/mooncake.jsonl", "mooncake", BadLineSkip)
	if err != nil {
		t.Fatal(err)
	}
	tok := DefaultTokenizer()
	src, _ := NewReplay(ds, ReplayOptions{DefaultOutput: 1, Seed: 5})
	reqs := drain(t, src)
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, want := range []int{1000, 700, 30, 600} {
		if reqs[i].PromptTokens != want || tok.Count(reqs[i].Prompt) != want {
			t.Errorf("request %d: %d tokens, want %d", i, tok.Count(reqs[i].Prompt), want)
		}
	}
	if reqs[3].At != 2750*time.Millisecond || reqs[1].At != 500*time.Millisecond {
		t.Errorf("offsets %v %v", reqs[1].At, reqs[3].At)
	}
	common := func(a, b []int) int {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return n
	}
	// Records 0 and 1 share hash 1 (512 tokens); 0 and 3 share hashes 1, 2
	// up to record 3's length.
	if c := common(reqs[0].Tokens, reqs[1].Tokens); c < 512 || c > 520 {
		t.Errorf("records 0,1 share %d tokens, want 512", c)
	}
	if c := common(reqs[0].Tokens, reqs[3].Tokens); c != 600 {
		t.Errorf("records 0,3 share %d tokens, want 600", c)
	}
	if c := common(reqs[0].Tokens, reqs[2].Tokens); c > 8 {
		t.Errorf("record 2 has no hashes but shares %d tokens", c)
	}
}

func TestLoadDatasetErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	cases := []struct{ path, format, want string }{
		{write("a.csv", "A,B\n1,2\n"), "azure", "a.csv:1: header"},
		{write("e.jsonl", "\n\n"), "jsonl", "no usable records"},
		{write("s.json", "{}"), "sharegpt", "s.json:1: a ShareGPT file is a JSON array"},
		{write("t.json", "[{\"conversations\": [}"), "sharegpt", "t.json:1: malformed JSON"},
		{filepath.Join(dir, "missing"), "jsonl", "reading dataset"},
		{write("x", "{}"), "parquet", "want auto, sharegpt, jsonl, azure or mooncake"},
	}
	for _, c := range cases {
		if _, err := LoadDataset(c.path, c.format, BadLineStop); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.path, err, c.want)
		}
	}
	if _, err := ParseBadLinePolicy("maybe"); err == nil {
		t.Error("bad policy accepted")
	}
}

func fuzzParse(f *testing.F, format, seedFile string) {
	data, err := os.ReadFile(seedFile)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := &Dataset{File: "f", Format: format}
		var err error
		switch format {
		case "sharegpt":
			err = d.parseShareGPT(strings.NewReader(string(b)), BadLineSkip)
		case "jsonl":
			err = d.parseJSONL(strings.NewReader(string(b)), BadLineSkip)
		case "azure":
			err = d.parseAzure(strings.NewReader(string(b)), BadLineSkip)
		case "mooncake":
			err = d.parseMooncake(strings.NewReader(string(b)), BadLineSkip)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") && !strings.HasPrefix(err.Error(), "reading f") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, e := range d.Entries {
			if e.Line < 1 || (len(e.Messages) == 0 && e.InputTokens < 1) || e.OutputTokens < 0 || e.At < 0 {
				t.Fatalf("bad entry %+v", e)
			}
		}
		for _, s := range d.Skipped {
			if s.Line < 1 {
				t.Fatalf("skipped line %d", s.Line)
			}
		}
	})
}

func FuzzShareGPT(f *testing.F) { fuzzParse(f, "sharegpt", "testdata/sharegpt.json") }
func FuzzJSONL(f *testing.F)    { fuzzParse(f, "jsonl", "testdata/prompts.jsonl") }
func FuzzAzure(f *testing.F)    { fuzzParse(f, "azure", "testdata/azure.csv") }
func FuzzMooncake(f *testing.F) { fuzzParse(f, "mooncake", "testdata/mooncake.jsonl") }

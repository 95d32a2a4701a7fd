package gguf

import (
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	v, err := NewVocab(DefaultConfig().Vocab)
	if err != nil {
		t.Fatal(err)
	}
	id := func(p string) int {
		i, ok := v.ID(p)
		if !ok {
			t.Fatalf("no piece %q", p)
		}
		return i
	}
	for _, tc := range []struct {
		text string
		bos  bool
		want []int
	}{
		{"", true, []int{BOSID}},
		{"", false, nil},
		{"the world", true, []int{BOSID, id("▁the"), id("▁world")}},
		{"token", false, []int{id("▁token")}},
		// "tokenz" is not a piece: the longest merged prefix, then a char.
		{"tokenz", false, []int{id("▁token"), id("z")}},
		// Byte fallback for what no piece covers.
		{"a\nb", false, []int{id("▁a"), 3 + '\n', id("b")}},
		{"é", false, []int{id("▁"), 3 + 0xC3, 3 + 0xA9}},
		{"a  by", false, []int{id("▁a"), id("▁"), id("▁by")}},
	} {
		got := v.Tokenize(tc.text, tc.bos)
		if !equal(got, tc.want) {
			t.Errorf("Tokenize(%q) = %v %q, want %v", tc.text, got, pieces(v, got), tc.want)
		}
		if want := " " + tc.text; tc.text != "" && v.Decode(got) != want {
			t.Errorf("Decode(Tokenize(%q)) = %q, want %q", tc.text, v.Decode(got), want)
		}
	}
}

// Property: a text of vocabulary words separated by single spaces is one
// token per word.
func TestTokenizeWordsProperty(t *testing.T) {
	v, _ := NewVocab(DefaultConfig().Vocab)
	words := v.Words()
	if len(words) < 4200 {
		t.Fatalf("only %d words in the vocabulary", len(words))
	}
	rng := newSplitMix(42)
	for trial := 0; trial < 200; trial++ {
		n := 1 + int(rng.next()%50)
		ws := make([]string, n)
		for i := range ws {
			ws[i] = words[rng.next()%uint64(len(words))]
		}
		text := strings.Join(ws, " ")
		ids := v.Tokenize(text, false)
		if len(ids) != n {
			t.Fatalf("%q: %d tokens, want %d (%q)", text, len(ids), n, pieces(v, ids))
		}
		if v.Decode(ids) != " "+text {
			t.Fatalf("round trip %q", text)
		}
	}
}

func TestVocabShape(t *testing.T) {
	for _, size := range []int{MinVocab, 1000, 4096, 32000} {
		v, err := NewVocab(size)
		if err != nil {
			t.Fatal(err)
		}
		if v.Size() != size || len(v.Scores) != size || len(v.Types) != size {
			t.Fatalf("size %d: got %d tokens %d scores %d types", size, v.Size(), len(v.Scores), len(v.Types))
		}
		if v.Tokens[UnkID] != "<unk>" || v.Tokens[BOSID] != "<s>" || v.Tokens[EOSID] != "</s>" || v.Tokens[3] != "<0x00>" || v.Tokens[258] != "<0xFF>" {
			t.Fatalf("size %d: control/byte tokens misplaced", size)
		}
		seen := map[string]bool{}
		for i, p := range v.Tokens {
			if seen[p] {
				t.Fatalf("duplicate piece %q", p)
			}
			seen[p] = true
			// Every multi-character piece is reachable: its prefix without the
			// last character is a piece too (what bigram merging needs).
			if v.Types[i] == TokenNormal && strings.HasPrefix(p, "▁") && len([]rune(p)) > 2 {
				rs := []rune(p)
				if _, ok := v.ID(string(rs[:len(rs)-1])); !ok {
					t.Fatalf("piece %q unreachable: no %q", p, string(rs[:len(rs)-1]))
				}
			}
		}
	}
	// The default vocabulary generates exactly the prompt generator's words;
	// the smallest falls back to any word piece.
	v, _ := NewVocab(DefaultConfig().Vocab)
	n := 0
	for id := range v.Tokens {
		if v.Sampleable(id) {
			n++
			p := v.Tokens[id]
			if !strings.HasPrefix(p, "▁") || len(p) < len("▁")+4 || strings.ContainsAny(p[len("▁"):], "0123456789▁") {
				t.Fatalf("sampleable piece %q is not a generator word", p)
			}
		}
	}
	if n < 4000 || n > 4300 {
		t.Errorf("%d sampleable tokens, want the ~4,160 generator words", n)
	}
	small, _ := NewVocab(MinVocab)
	if id, _ := small.ID("▁the"); !small.Sampleable(id) {
		t.Error("small vocabulary: ▁the not sampleable")
	}
	if _, err := NewVocab(MinVocab - 1); err == nil {
		t.Fatal("accepted a vocabulary below the minimum")
	}
}

func FuzzTokenize(f *testing.F) {
	v, _ := NewVocab(1000)
	f.Add("the world")
	f.Add("é\n\x00\xff▁")
	f.Fuzz(func(t *testing.T, s string) {
		ids := v.Tokenize(s, true)
		if len(ids) == 0 || ids[0] != BOSID {
			t.Fatal("no BOS")
		}
		for _, id := range ids {
			if id < 0 || id >= v.Size() {
				t.Fatalf("id %d out of range", id)
			}
		}
		// Byte-exact round trip, modulo "▁" (a space mark in the input reads
		// back as a space when it became part of a piece).
		got := strings.ReplaceAll(v.Decode(ids), "▁", " ")
		if want := strings.ReplaceAll(" "+s, "▁", " "); s != "" && got != want {
			t.Fatalf("Decode = %q, want %q", got, want)
		}
	})
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func pieces(v *Vocab, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = v.Tokens[id]
	}
	return out
}

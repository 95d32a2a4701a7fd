package gguf

import (
	"io"
	"testing"
)

func BenchmarkSynthDefault(b *testing.B) {
	c := DefaultConfig()
	b.SetBytes(int64(c.Params() * 4))
	for b.Loop() {
		if _, err := Synth(io.Discard, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTokenize1000Words(b *testing.B) {
	v, _ := NewVocab(DefaultConfig().Vocab)
	words := v.Words()
	text := ""
	for i := 0; i < 1000; i++ {
		if i > 0 {
			text += " "
		}
		text += words[(i*7919)%len(words)]
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if n := len(v.Tokenize(text, true)); n != 1001 {
			b.Fatalf("%d tokens", n)
		}
	}
}

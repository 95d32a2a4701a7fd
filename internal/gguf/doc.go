// Package gguf writes and reads GGUF v3 files (the model format of llama.cpp,
// Ollama and their relatives) and synthesizes small Llama-architecture models
// with seeded random weights and a SentencePiece-style vocabulary.
//
// It exists so that a real inference engine can be exercised without
// downloading weights: `ttft model synth` writes a model that llama.cpp loads
// and runs, whose prompt processing costs real compute, whose tokenizer this
// package reproduces exactly (so token counts reported by the engine can be
// predicted), and whose output layer never samples control or byte tokens (so
// a generation always runs to max_tokens and output length is predictable).
package gguf

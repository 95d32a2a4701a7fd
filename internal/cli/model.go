package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ttft-dev/ttft/internal/gguf"
)

func newModelCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Synthesize and inspect small GGUF models for testing real engines",
		Long: `model writes tiny random-weight Llama models in GGUF, so that a real
llama.cpp-based server (Ollama, llama.cpp's llama-server, ...) or a gateway in
front of one can be benchmarked without downloading weights. The output text
is noise, but prompt processing costs real compute that grows with prompt size.`,
	}
	cmd.AddCommand(newModelSynthCmd(env), newModelInspectCmd(env))
	return cmd
}

func newModelSynthCmd(env *Env) *cobra.Command {
	c := gguf.DefaultConfig()
	var out, modelfile string
	cmd := &cobra.Command{
		Use:   "synth -o model.gguf",
		Short: "Write a random-weight Llama model (GGUF v3) and optionally an Ollama Modelfile",
		Long: `synth writes a Llama-architecture GGUF v3 model with seeded random weights,
a SentencePiece-style vocabulary (control tokens, 256 byte-fallback tokens,
common English word pieces) and a chat template. The same flags and seed give
a byte-identical file. The output layer never samples end-of-sequence, so
every generation runs to its max_tokens.

The defaults give a 0.6M-parameter model that runs on any CPU.`,
		Example: `  ttft model synth -o tiny.gguf --modelfile Modelfile
  ollama create tiny -f Modelfile
  ttft bench --target http://127.0.0.1:11434 --model tiny`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageErr("model synth: -o/--output is required (a .gguf path, or - for stdout)")
			}
			if err := c.Validate(); err != nil {
				return usageErr("model synth: %v", err)
			}
			if out == "-" {
				if modelfile != "" {
					return usageErr("model synth: --modelfile needs a file for -o (it names the model's path)")
				}
				if _, err := gguf.Synth(env.Stdout, c); err != nil {
					return fmt.Errorf("model synth: %w", err)
				}
				return nil
			}
			sum, err := modelSynthToFile(out, c)
			if err != nil {
				return err
			}
			info := env.Stdout
			fmt.Fprintf(info, "wrote %s: llama, %s parameters (dim %d, %d layers, %d/%d heads, ff %d, ctx %d, vocab %d, %s, seed %d), sha256 %s\n",
				out, modelParamCount(c.Params()), c.Dim, c.Layers, c.Heads, c.KVHeads, c.FF, c.Ctx, c.Vocab, map[bool]string{false: "f32", true: "f16"}[c.F16], c.Seed, sum)
			if modelfile == "" {
				return nil
			}
			abs, err := filepath.Abs(out)
			if err != nil {
				return fmt.Errorf("model synth: resolving %s: %w", out, err)
			}
			text := gguf.Modelfile(abs, c)
			if modelfile == "-" {
				fmt.Fprint(env.Stdout, text)
				return nil
			}
			if err := os.WriteFile(modelfile, []byte(text), 0o644); err != nil {
				return fmt.Errorf("model synth: writing Modelfile: %w", err)
			}
			fmt.Fprintf(info, "wrote %s: next, ollama create %s -f %s\n", modelfile, c.Name, modelfile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "GGUF file to write (- for stdout)")
	f.StringVar(&modelfile, "modelfile", "", "also write an Ollama Modelfile here (- prints it)")
	f.StringVar(&c.Name, "name", c.Name, "model name (general.name, and the name suggested for ollama create)")
	f.IntVar(&c.Dim, "dim", c.Dim, "embedding size")
	f.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks")
	f.IntVar(&c.Heads, "heads", c.Heads, "attention heads (dim/heads must be even)")
	f.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads (divides heads; < heads is grouped-query attention)")
	f.IntVar(&c.FF, "ff", c.FF, "feed-forward hidden size")
	f.IntVar(&c.Ctx, "ctx", c.Ctx, "context length in tokens")
	f.IntVar(&c.Vocab, "vocab", c.Vocab, fmt.Sprintf("vocabulary size (at least %d)", gguf.MinVocab))
	f.Uint64Var(&c.Seed, "seed", c.Seed, "weight seed (same flags and seed: byte-identical file)")
	f.BoolVar(&c.F16, "f16", false, "store matrices as F16 (half the size)")
	return cmd
}

// modelSynthToFile writes atomically (temp file + rename) and returns the SHA-256.
func modelSynthToFile(path string, c gguf.Config) (string, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ttft-synth-*.gguf")
	if err != nil {
		return "", usageErr("model synth: cannot write %s: %v", path, err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := gguf.Synth(io.MultiWriter(tmp, h), c); err != nil {
		tmp.Close()
		return "", fmt.Errorf("model synth: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("model synth: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("model synth: writing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func newModelInspectCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect model.gguf",
		Short: "Print a GGUF file's metadata and tensors",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := gguf.ReadFile(args[0])
			if err != nil {
				return usageErr("model inspect: %v", err)
			}
			w := env.Stdout
			fmt.Fprintf(w, "GGUF v%d, %d metadata entries, %d tensors, alignment %d, data at byte %d\n", f.Version, len(f.KV), len(f.Tensors), f.Alignment, f.DataOffset)
			for _, kv := range f.KV {
				fmt.Fprintf(w, "  %s = %s\n", kv.Key, modelDescribeValue(kv.Value))
			}
			var params uint64
			for _, t := range f.Tensors {
				dims := make([]string, len(t.Dims))
				for i, d := range t.Dims {
					dims[i] = fmt.Sprint(d)
				}
				fmt.Fprintf(w, "  %-28s %-4s [%s] @%d\n", t.Name, t.Type, strings.Join(dims, " "), t.Offset)
				params += t.Elements()
			}
			fmt.Fprintf(w, "%s parameters\n", modelParamCount(params))
			return nil
		},
	}
}

// modelDescribeValue prints scalars in full and arrays as type, length and head.
func modelDescribeValue(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 80 {
			return fmt.Sprintf("%q... (%d bytes)", x[:80], len(x))
		}
		return fmt.Sprintf("%q", x)
	case []string:
		return fmt.Sprintf("[]string len %d %q", len(x), x[:min(len(x), 6)])
	case []float32:
		return fmt.Sprintf("[]float32 len %d %v", len(x), x[:min(len(x), 6)])
	case []int32:
		return fmt.Sprintf("[]int32 len %d %v", len(x), x[:min(len(x), 6)])
	}
	s := fmt.Sprintf("%v", v)
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return fmt.Sprintf("%s (%T)", s, v)
}

func modelParamCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

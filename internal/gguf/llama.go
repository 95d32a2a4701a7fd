package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
)

// Config sizes a synthesized Llama model.
type Config struct {
	Name    string // general.name
	Dim     int    // embedding length
	Layers  int    // transformer blocks
	Heads   int    // attention heads
	KVHeads int    // key/value heads (grouped-query attention when < Heads)
	FF      int    // feed-forward (SwiGLU) hidden size
	Ctx     int    // context length
	Vocab   int    // vocabulary size
	Seed    uint64 // weight seed: equal configs give byte-identical files
	F16     bool   // store matrices as F16 (norms stay F32, as converters do)
}

// DefaultConfig is a 2.2M-parameter model (most of it the 16,384-token
// embedding and output matrices, which cost almost nothing per prompt token):
// prompt processing on a laptop CPU takes milliseconds to a second across
// 100–3,000 tokens, enough for TTFT to move with prompt size while tests stay
// fast. The vocabulary holds every word of ttft's prompt generator.
func DefaultConfig() Config {
	return Config{Name: "ttft-synth", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, FF: 172, Ctx: 4096, Vocab: 16384, Seed: 1}
}

// Validate reports the first configuration error, naming the field.
func (c Config) Validate() error {
	pos := []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads}, {"kv-heads", c.KVHeads}, {"ff", c.FF}, {"ctx", c.Ctx}, {"vocab", c.Vocab}}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
		}
		if p.v > math.MaxUint32/4 {
			return fmt.Errorf("%s %d is too large", p.name, p.v)
		}
	}
	switch {
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	case (c.Dim/c.Heads)%2 != 0:
		return fmt.Errorf("head size dim/heads = %d must be even (rotary embedding rotates pairs)", c.Dim/c.Heads)
	case c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("heads %d is not a multiple of kv-heads %d", c.Heads, c.KVHeads)
	case c.Dim < 4:
		return fmt.Errorf("dim %d is below 4", c.Dim)
	case c.Ctx < 16:
		return fmt.Errorf("ctx %d is below 16", c.Ctx)
	case c.Vocab < MinVocab:
		return fmt.Errorf("vocab %d is below the minimum %d", c.Vocab, MinVocab)
	}
	return nil
}

// HeadDim is dim/heads (llama.rope.dimension_count).
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Params is the number of weights.
func (c Config) Params() uint64 {
	var n uint64
	for _, t := range c.tensorShapes() {
		n += TensorInfo{Dims: t.dims}.Elements()
	}
	return n
}

type shape struct {
	name string
	dims []uint64
}

// tensorShapes is exactly the tensor set llama.cpp's llama loader expects, in
// the order real converters write it.
func (c Config) tensorShapes() []shape {
	d, v, f := uint64(c.Dim), uint64(c.Vocab), uint64(c.FF)
	kv := uint64(c.HeadDim() * c.KVHeads)
	out := []shape{{"token_embd.weight", []uint64{d, v}}}
	for i := 0; i < c.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		out = append(out,
			shape{p + "attn_norm.weight", []uint64{d}},
			shape{p + "attn_q.weight", []uint64{d, d}},
			shape{p + "attn_k.weight", []uint64{d, kv}},
			shape{p + "attn_v.weight", []uint64{d, kv}},
			shape{p + "attn_output.weight", []uint64{d, d}},
			shape{p + "ffn_norm.weight", []uint64{d}},
			shape{p + "ffn_gate.weight", []uint64{d, f}},
			shape{p + "ffn_up.weight", []uint64{d, f}},
			shape{p + "ffn_down.weight", []uint64{f, d}},
		)
	}
	return append(out, shape{"output_norm.weight", []uint64{d}}, shape{"output.weight", []uint64{d, v}})
}

// ChatTemplate is the Jinja chat template stored in tokenizer.chat_template.
// It renders "role: content\n" per message and ends with "assistant:", the
// same text as OllamaTemplate and RenderChat.
const ChatTemplate = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"

// OllamaTemplate is ChatTemplate in Ollama's Go-template syntax.
const OllamaTemplate = "{{- range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}assistant:"

// ChatMessage is one message for RenderChat.
type ChatMessage struct{ Role, Content string }

// RenderChat renders messages as the chat template does (with the generation
// prompt), so a caller can predict the engine's prompt token count with
// Vocab.Tokenize(RenderChat(msgs), true).
func RenderChat(msgs []ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return b.String()
}

// Modelfile returns an Ollama Modelfile for a GGUF at ggufPath: the chat
// template above and a context window equal to the model's (Ollama's default
// of 2,048 would silently truncate longer prompts).
func Modelfile(ggufPath string, c Config) string {
	return fmt.Sprintf("FROM %s\nTEMPLATE \"\"\"%s\"\"\"\nPARAMETER num_ctx %d\n", ggufPath, OllamaTemplate, c.Ctx)
}

// Metadata returns the GGUF metadata of a model with vocabulary v. Integer
// hyper-parameters are UINT32, scores FLOAT32 and token types INT32: Ollama's
// reader ignores keys of other widths.
func (c Config) Metadata(v *Vocab) []KV {
	u := func(n int) uint32 { return uint32(n) }
	fileType := uint32(0) // ALL_F32
	if c.F16 {
		fileType = 1 // MOSTLY_F16
	}
	name := c.Name
	if name == "" {
		name = "ttft-synth"
	}
	return []KV{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.description", fmt.Sprintf("random-weight Llama model synthesized by ttft (seed %d); its output is noise", c.Seed)},
		{"general.alignment", uint32(DefaultAlignment)},
		{"general.file_type", fileType},
		{"general.parameter_count", c.Params()},
		{"llama.context_length", u(c.Ctx)},
		{"llama.embedding_length", u(c.Dim)},
		{"llama.block_count", u(c.Layers)},
		{"llama.feed_forward_length", u(c.FF)},
		{"llama.attention.head_count", u(c.Heads)},
		{"llama.attention.head_count_kv", u(c.KVHeads)},
		{"llama.rope.dimension_count", u(c.HeadDim())},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", u(c.Vocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.Tokens},
		{"tokenizer.ggml.scores", v.Scores},
		{"tokenizer.ggml.token_type", v.Types},
		{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
		{"tokenizer.ggml.unknown_token_id", uint32(UnkID)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.ggml.add_space_prefix", true},
		{"tokenizer.chat_template", ChatTemplate},
		{"ttft.synth.seed", c.Seed},
	}
}

// Synth writes the model as GGUF v3 to w and returns its vocabulary.
//
// The weights are seeded uniform noise scaled like a trained model's
// (1/sqrt(fan-in)), with one deliberate structure: residual dimension 0 holds
// a positive constant in every token embedding and no block writes to it
// (row 0 of attn_output and ffn_down is zero), so after the final RMSNorm it
// is always positive. The output layer gives every non-sampleable token
// (control, byte, punctuation) a large negative weight on that dimension and
// nothing else, and every word piece a zero there: end-of-sequence is never
// sampled and each generated token is a whole word, so a generation runs to
// its max_tokens and streams one text chunk per token.
func Synth(w io.Writer, c Config) (*Vocab, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	v, err := NewVocab(c.Vocab)
	if err != nil {
		return nil, err
	}
	shapes := c.tensorShapes()
	specs := make([]TensorSpec, len(shapes))
	for i, s := range shapes {
		typ := TensorF32
		if c.F16 && len(s.dims) > 1 {
			typ = TensorF16
		}
		gen := c.generator(s, v, uint64(i))
		specs[i] = TensorSpec{Name: s.name, Dims: s.dims, Type: typ, Data: func(w io.Writer) error {
			return writeFloats(w, typ, TensorInfo{Dims: s.dims}.Elements(), gen)
		}}
	}
	if err := Write(w, c.Metadata(v), specs, DefaultAlignment); err != nil {
		return nil, err
	}
	return v, nil
}

// generator returns the function giving element k (in storage order: row
// r = k / dims[0], column k % dims[0]) of a tensor.
func (c Config) generator(s shape, v *Vocab, index uint64) func(k uint64) float32 {
	rng := newSplitMix(c.Seed*0x9E3779B97F4A7C15 + index)
	uniform := func(std float64) float32 { return float32(rng.sym() * std * math.Sqrt(3)) }
	cols := s.dims[0]
	name := s.name[strings.LastIndexByte(s.name[:len(s.name)-len(".weight")], '.')+1:]
	switch {
	case len(s.dims) == 1: // RMSNorm gains
		return func(uint64) float32 { return 1 }
	case name == "token_embd.weight":
		// Constant dim 0 large enough to hold at least half of the residual
		// stream's energy after every block has added its share.
		k0 := float32(math.Sqrt(float64(c.Dim) * float64(1+c.Layers)))
		return func(k uint64) float32 {
			if k%cols == 0 {
				return k0
			}
			return uniform(1)
		}
	case name == "output.weight":
		// logit(control) = -big * n0 with n0 >= sqrt(dim/(2+2L)) > 0.
		neg := float32(-200 / math.Sqrt(float64(c.Dim)))
		ok := make([]bool, v.Size())
		for i := range ok {
			ok[i] = v.Sampleable(i)
		}
		std := 2 / math.Sqrt(float64(c.Dim))
		return func(k uint64) float32 {
			tok, col := int(k/cols), k%cols
			if !ok[tok] {
				if col == 0 {
					return neg
				}
				return 0
			}
			if col == 0 {
				return 0
			}
			return uniform(std)
		}
	case name == "attn_output.weight" || name == "ffn_down.weight":
		std := 1 / math.Sqrt(float64(cols))
		return func(k uint64) float32 {
			if k/cols == 0 {
				return 0 // never write residual dimension 0
			}
			return uniform(std)
		}
	default:
		std := 1 / math.Sqrt(float64(cols))
		return func(uint64) float32 { return uniform(std) }
	}
}

func writeFloats(w io.Writer, typ TensorType, n uint64, gen func(uint64) float32) error {
	es := typ.ElemSize()
	buf := make([]byte, 0, 1<<15)
	for k := uint64(0); k < n; k++ {
		x := gen(k)
		if typ == TensorF16 {
			buf = binary.LittleEndian.AppendUint16(buf, F32ToF16(x))
		} else {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		}
		if len(buf)+es > cap(buf) {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	_, err := w.Write(buf)
	return err
}

// splitMix is SplitMix64: tiny, fast and fully specified here, so a seed
// gives the same weights on every Go version (math/rand/v2 reserves the
// right to change its algorithms).
type splitMix struct{ s uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{s: seed} }

func (r *splitMix) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// sym is uniform in [-1, 1).
func (r *splitMix) sym() float64 { return float64(r.next()>>11)/(1<<52) - 1 }

// F32ToF16 converts to IEEE half precision, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127+15 >= 0x1f: // overflow
		return sign | 0x7c00
	case exp-127+15 <= 0: // subnormal or zero in half precision
		e := exp - 127 + 15
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half)
	}
	e := uint16(exp - 127 + 15)
	half := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which is correct rounding
	}
	return sign | uint16(half)
}

// F16ToF32 converts IEEE half precision to float32.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(mant) / 1024 / 16384 // 2^-14 * mant/1024
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

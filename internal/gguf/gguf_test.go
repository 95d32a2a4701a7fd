package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func synth(t testing.TB, c Config) ([]byte, *Vocab) {
	t.Helper()
	var buf bytes.Buffer
	v, err := Synth(&buf, c)
	if err != nil {
		t.Fatalf("Synth(%+v): %v", c, err)
	}
	return buf.Bytes(), v
}

func TestSynthRoundTrip(t *testing.T) {
	for _, c := range []Config{
		DefaultConfig(),
		{Name: "f16", Dim: 32, Layers: 3, Heads: 2, KVHeads: 1, FF: 48, Ctx: 128, Vocab: 600, Seed: 7, F16: true},
		{Name: "mha", Dim: 48, Layers: 1, Heads: 6, KVHeads: 6, FF: 100, Ctx: 64, Vocab: MinVocab, Seed: 0},
	} {
		t.Run(c.Name, func(t *testing.T) {
			data, v := synth(t, c)
			f, err := Read(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.CheckData(uint64(len(data))); err != nil {
				t.Fatal(err)
			}
			if f.Version != 3 || f.Alignment != 32 || f.DataOffset%32 != 0 {
				t.Fatalf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
			}
			// Every metadata entry comes back with the same Go type and value.
			want := c.Metadata(v)
			if len(f.KV) != len(want) {
				t.Fatalf("%d metadata entries, want %d", len(f.KV), len(want))
			}
			for i, kv := range want {
				if f.KV[i].Key != kv.Key || !reflect.DeepEqual(f.KV[i].Value, kv.Value) {
					t.Errorf("metadata %d: got %s=%v (%T), want %s=%v (%T)", i, f.KV[i].Key, f.KV[i].Value, f.KV[i].Value, kv.Key, kv.Value, kv.Value)
				}
			}
			// The widths engines insist on.
			for key, typ := range map[string]string{
				"llama.context_length": "uint32", "llama.embedding_length": "uint32", "llama.block_count": "uint32",
				"llama.feed_forward_length": "uint32", "llama.attention.head_count": "uint32", "llama.attention.head_count_kv": "uint32",
				"llama.rope.dimension_count": "uint32", "tokenizer.ggml.scores": "[]float32", "tokenizer.ggml.token_type": "[]int32",
				"tokenizer.ggml.tokens": "[]string", "general.file_type": "uint32", "tokenizer.ggml.bos_token_id": "uint32",
			} {
				got, ok := f.Get(key)
				if !ok || reflect.TypeOf(got).String() != typ {
					t.Errorf("%s: %T, want %s", key, got, typ)
				}
			}
			if got, _ := f.Get("llama.rope.dimension_count"); got != uint32(c.Dim/c.Heads) {
				t.Errorf("rope.dimension_count %v, want %d", got, c.Dim/c.Heads)
			}
			if got, _ := f.Get("tokenizer.ggml.tokens"); len(got.([]string)) != c.Vocab {
				t.Errorf("%d tokens, want %d", len(got.([]string)), c.Vocab)
			}
			// Exactly the llama tensor set, in order, with exact shapes, packed
			// at aligned offsets, the last one ending at the end of the file.
			names := []string{"token_embd.weight"}
			for i := 0; i < c.Layers; i++ {
				for _, n := range []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"} {
					names = append(names, "blk."+itoa(i)+"."+n+".weight")
				}
			}
			names = append(names, "output_norm.weight", "output.weight")
			if len(f.Tensors) != len(names) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(names))
			}
			d, kv, ff, vocab := uint64(c.Dim), uint64(c.Dim/c.Heads*c.KVHeads), uint64(c.FF), uint64(c.Vocab)
			wantDims := map[string][]uint64{"token_embd": {d, vocab}, "attn_norm": {d}, "attn_q": {d, d}, "attn_k": {d, kv}, "attn_v": {d, kv},
				"attn_output": {d, d}, "ffn_norm": {d}, "ffn_gate": {d, ff}, "ffn_up": {d, ff}, "ffn_down": {ff, d}, "output_norm": {d}, "output": {d, vocab}}
			var next uint64
			var params uint64
			for i, ti := range f.Tensors {
				if ti.Name != names[i] {
					t.Fatalf("tensor %d is %q, want %q", i, ti.Name, names[i])
				}
				base := strings.TrimSuffix(ti.Name[strings.LastIndex(strings.TrimSuffix(ti.Name, ".weight"), ".")+1:], ".weight")
				if !reflect.DeepEqual(ti.Dims, wantDims[base]) {
					t.Errorf("%s dims %v, want %v", ti.Name, ti.Dims, wantDims[base])
				}
				wantType := TensorF32
				if c.F16 && len(ti.Dims) > 1 {
					wantType = TensorF16
				}
				if ti.Type != wantType {
					t.Errorf("%s type %v, want %v", ti.Name, ti.Type, wantType)
				}
				if ti.Offset != alignUp(next, 32) {
					t.Errorf("%s offset %d, want %d", ti.Name, ti.Offset, alignUp(next, 32))
				}
				next = ti.Offset + ti.Size()
				params += ti.Elements()
			}
			if f.DataOffset+next != uint64(len(data)) {
				t.Errorf("data ends at %d, file is %d bytes", f.DataOffset+next, len(data))
			}
			if params != c.Params() {
				t.Errorf("params %d, Params() %d", params, c.Params())
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// tensor reads a tensor's values back as float32.
func tensor(t testing.TB, data []byte, f *File, name string) []float32 {
	t.Helper()
	ti, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	raw := data[f.DataOffset+ti.Offset : f.DataOffset+ti.Offset+ti.Size()]
	out := make([]float32, ti.Elements())
	for i := range out {
		if ti.Type == TensorF16 {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
		} else {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return out
}

// The output layer's structure is what keeps generations at max_tokens: check
// it on the written bytes, for both element types.
func TestOutputLayerBlocksControlTokens(t *testing.T) {
	for _, f16 := range []bool{false, true} {
		c := DefaultConfig()
		c.Vocab, c.F16 = 1000, f16
		data, v := synth(t, c)
		f, err := Read(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		out := tensor(t, data, f, "output.weight")
		emb := tensor(t, data, f, "token_embd.weight")
		d := c.Dim
		sampleable := 0
		for tok := 0; tok < c.Vocab; tok++ {
			row := out[tok*d : (tok+1)*d]
			if emb[tok*d] <= 0 {
				t.Fatalf("token %d embedding dim 0 = %v, want > 0", tok, emb[tok*d])
			}
			if v.Sampleable(tok) {
				sampleable++
				if row[0] != 0 {
					t.Fatalf("sampleable token %q has output weight %v on dim 0", v.Tokens[tok], row[0])
				}
				continue
			}
			if row[0] >= -1 {
				t.Fatalf("blocked token %q has output weight %v on dim 0, want strongly negative", v.Tokens[tok], row[0])
			}
			for j, x := range row[1:] {
				if x != 0 {
					t.Fatalf("blocked token %q output weight [%d] = %v, want 0", v.Tokens[tok], j+1, x)
				}
			}
		}
		for _, id := range []int{UnkID, BOSID, EOSID, 3, 3 + 255} {
			if v.Sampleable(id) {
				t.Errorf("token %q is sampleable", v.Tokens[id])
			}
		}
		if sampleable < c.Vocab/2 {
			t.Errorf("only %d of %d tokens sampleable", sampleable, c.Vocab)
		}
		for l := 0; l < c.Layers; l++ {
			for _, n := range []string{"attn_output", "ffn_down"} {
				w := tensor(t, data, f, "blk."+itoa(l)+"."+n+".weight")
				ti, _ := f.Tensor("blk." + itoa(l) + "." + n + ".weight")
				for j := uint64(0); j < ti.Dims[0]; j++ {
					if w[j] != 0 {
						t.Fatalf("%s writes residual dim 0 (row 0, col %d = %v)", n, j, w[j])
					}
				}
			}
		}
	}
}

func TestSynthDeterministic(t *testing.T) {
	c := DefaultConfig()
	a, _ := synth(t, c)
	b, _ := synth(t, c)
	if !bytes.Equal(a, b) {
		t.Fatal("same config gave different bytes")
	}
	c.Seed++
	d, _ := synth(t, c)
	if bytes.Equal(a, d) || len(a) != len(d) {
		t.Fatalf("seed change: equal=%v sizes %d/%d (want different bytes, same size)", bytes.Equal(a, d), len(a), len(d))
	}
	// A golden hash pins the format and the generator across Go versions.
	sum := sha256.Sum256(a)
	got := hex.EncodeToString(sum[:]) + "\n"
	golden := filepath.Join("testdata", "default.sha256")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("default model hash %s, golden %s (if the change is intended: go test -update)", strings.TrimSpace(got), strings.TrimSpace(string(want)))
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Dim = 0 }, "dim must be positive"},
		{func(c *Config) { c.Dim = 66 }, "not a multiple of heads"},
		{func(c *Config) { c.Dim, c.Heads = 12, 4 }, "must be even"},
		{func(c *Config) { c.KVHeads = 3 }, "not a multiple of kv-heads"},
		{func(c *Config) { c.KVHeads = 8 }, "not a multiple of kv-heads"},
		{func(c *Config) { c.Vocab = 100 }, "below the minimum"},
		{func(c *Config) { c.Ctx = 8 }, "ctx 8"},
		{func(c *Config) { c.Layers = -1 }, "layers must be positive"},
	} {
		c := ok
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", c, err, tc.want)
		}
		if _, err := Synth(io.Discard, c); err == nil {
			t.Errorf("Synth accepted %+v", c)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := ok.Params(); p < 2_100_000 || p > 2_300_000 {
		t.Errorf("default model has %d parameters, documented as about 2.2M", p)
	}
}

func TestWriteErrors(t *testing.T) {
	okData := func(w io.Writer) error { _, err := w.Write(make([]byte, 16)); return err }
	for _, tc := range []struct {
		name      string
		kvs       []KV
		tensors   []TensorSpec
		alignment int
		want      string
	}{
		{"plain int", []KV{{"a", 5}}, nil, 0, "unsupported value type int"},
		{"bad alignment", nil, nil, 24, "not a power of two"},
		{"alignment key mismatch", []KV{{"general.alignment", uint32(64)}}, nil, 32, "disagrees"},
		{"alignment key width", []KV{{"general.alignment", uint64(32)}}, nil, 32, "must be uint32"},
		{"short data", nil, []TensorSpec{{Name: "x", Dims: []uint64{8}, Type: TensorF32, Data: okData}}, 0, "wrote 16 bytes, want 32"},
		{"no dims", nil, []TensorSpec{{Name: "x", Type: TensorF32, Data: okData}}, 0, "0 dimensions"},
		{"quantized", nil, []TensorSpec{{Name: "x", Dims: []uint64{32}, Type: 2, Data: okData}}, 0, "cannot write type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(io.Discard, tc.kvs, tc.tensors, tc.alignment)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// Every scalar and array type survives a write/read round trip, including
// the array of arrays the reader accepts.
func TestValueRoundTrip(t *testing.T) {
	kvs := []KV{
		{"u8", uint8(200)}, {"i8", int8(-3)}, {"u16", uint16(65000)}, {"i16", int16(-300)}, {"u32", uint32(1 << 31)},
		{"i32", int32(-1 << 30)}, {"f32", float32(1.5)}, {"b", true}, {"s", "héllo"}, {"u64", uint64(1 << 60)},
		{"i64", int64(-1 << 60)}, {"f64", math.Pi}, {"au8", []uint8{1, 2}}, {"ai8", []int8{-1}}, {"au16", []uint16{7}},
		{"ai16", []int16{-7}}, {"au32", []uint32{1, 2, 3}}, {"ai32", []int32{-1, 1}}, {"af32", []float32{0.25}},
		{"ab", []bool{true, false}}, {"as", []string{"a", "", "▁b"}}, {"au64", []uint64{9}}, {"ai64", []int64{-9}},
		{"af64", []float64{2.5}}, {"empty", []string{}},
	}
	var buf bytes.Buffer
	if err := Write(&buf, kvs, nil, 0); err != nil {
		t.Fatal(err)
	}
	f, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.KV, kvs) {
		t.Fatalf("got %#v\nwant %#v", f.KV, kvs)
	}
	// Array of arrays, hand-encoded: [[1,2],[3]] of uint32.
	var e bytes.Buffer
	le := func(v any) { binary.Write(&e, binary.LittleEndian, v) }
	le(Magic)
	le(uint32(3))
	le(uint64(0))
	le(uint64(1))
	le(uint64(2))
	e.WriteString("aa")
	le(uint32(TypeArray))
	le(uint32(TypeArray))
	le(uint64(2))
	le(uint32(TypeUint32))
	le(uint64(2))
	le([]uint32{1, 2})
	le(uint32(TypeUint32))
	le(uint64(1))
	le([]uint32{3})
	f, err = Read(bytes.NewReader(e.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{[]uint32{1, 2}, []uint32{3}}; !reflect.DeepEqual(f.KV[0].Value, want) {
		t.Fatalf("nested array %#v, want %#v", f.KV[0].Value, want)
	}
}

func TestReadErrors(t *testing.T) {
	good, _ := synth(t, Config{Dim: 8, Layers: 1, Heads: 2, KVHeads: 1, FF: 8, Ctx: 16, Vocab: MinVocab})
	le32 := func(b []byte, off int, v uint32) []byte {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[off:], v)
		return c
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "at byte 0: unexpected EOF"},
		{"magic", []byte("GGML\x03\x00\x00\x00"), "not a GGUF file"},
		{"version", le32(good, 4, 9), "unsupported GGUF version 9"},
		{"truncated", good[:1000], "unexpected EOF"},
		{"huge string", append([]byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), "exceeds the limit"},
		{"counts", append([]byte("GGUF\x03\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0), "implausible counts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	// Data bounds: the header of a truncated file parses, CheckData refuses.
	f, err := Read(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CheckData(uint64(len(good) - 1)); err == nil || !strings.Contains(err.Error(), "runs past the end") {
		t.Fatalf("CheckData on a short file: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf")
	os.WriteFile(p, good[:len(good)-4], 0o644)
	if _, err := ReadFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("ReadFile on a truncated file: %v (want the path named)", err)
	}
}

func FuzzRead(f *testing.F) {
	good, _ := synth(f, Config{Dim: 8, Layers: 1, Heads: 2, KVHeads: 1, FF: 8, Ctx: 16, Vocab: MinVocab})
	f.Add(good[:2000])
	f.Add(good)
	var small bytes.Buffer
	Write(&small, []KV{{"a", []string{"x"}}, {"b", uint32(1)}}, []TensorSpec{{Name: "t", Dims: []uint64{2}, Type: TensorF32, Data: func(w io.Writer) error { _, err := w.Write(make([]byte, 8)); return err }}}, 0)
	f.Add(small.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		if file.DataOffset%file.Alignment != 0 {
			t.Fatalf("data offset %d not aligned to %d", file.DataOffset, file.Alignment)
		}
		_ = file.CheckData(uint64(len(data)))
		// What parsed must re-encode and parse to the same metadata (arrays
		// of arrays excepted: the writer does not produce them; huge
		// alignments excepted: the writer would pad gigabytes).
		if file.Alignment > 4096 {
			return
		}
		for _, kv := range file.KV {
			if _, err := typeOf(kv.Value); err != nil {
				return
			}
		}
		var buf bytes.Buffer
		if err := Write(&buf, file.KV, nil, int(file.Alignment)); err != nil {
			t.Fatalf("re-encoding parsed metadata: %v", err)
		}
		again, err := Read(&buf)
		if err != nil {
			t.Fatalf("re-reading: %v", err)
		}
		if len(again.KV) != len(file.KV) {
			t.Fatalf("%d entries after round trip, want %d", len(again.KV), len(file.KV))
		}
	})
}

func TestF16(t *testing.T) {
	// Every half converts to float32 and back exactly (NaNs stay NaN).
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
	for _, tc := range []struct {
		in   float32
		want uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {70000, 0x7c00}, {1e-8, 0}, {0.1, 0x2e66}, {1 + 1.0/2048, 0x3c00}, {1 + 3.0/2048, 0x3c02}} {
		if got := F32ToF16(tc.in); got != tc.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
}

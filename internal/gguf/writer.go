package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// TensorSpec is a tensor to write: its shape and type, and a function that
// streams exactly Size() bytes of little-endian data. Streaming keeps memory
// flat for large synthesized models.
type TensorSpec struct {
	Name string
	Dims []uint64
	Type TensorType
	Data func(w io.Writer) error
}

// Write encodes a GGUF v3 file: header, metadata in the given order, tensor
// infos, then each tensor's data at an offset aligned to alignment (which
// should equal general.alignment when that key is present; 0 means 32).
// The output depends only on its arguments, so files are byte-reproducible.
func Write(w io.Writer, kvs []KV, tensors []TensorSpec, alignment int) error {
	if alignment == 0 {
		alignment = DefaultAlignment
	}
	if alignment < 1 || alignment&(alignment-1) != 0 {
		return fmt.Errorf("gguf: alignment %d is not a power of two", alignment)
	}
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			if a, ok := kv.Value.(uint32); !ok || int(a) != alignment {
				return fmt.Errorf("gguf: general.alignment %v (%T) disagrees with alignment %d (must be uint32)", kv.Value, kv.Value, alignment)
			}
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	cw := &countWriter{w: bw}
	e := encoder{w: cw}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("gguf: metadata %q: %w", kv.Key, err)
		}
	}
	a := uint64(alignment)
	offsets := make([]uint64, len(tensors))
	var off uint64
	for i, t := range tensors {
		if len(t.Dims) == 0 || len(t.Dims) > 4 {
			return fmt.Errorf("gguf: tensor %q has %d dimensions (want 1..4)", t.Name, len(t.Dims))
		}
		es := t.Type.ElemSize()
		if es == 0 {
			return fmt.Errorf("gguf: tensor %q: cannot write type %v", t.Name, t.Type)
		}
		info := TensorInfo{Name: t.Name, Dims: t.Dims, Type: t.Type}
		off = alignUp(off, a)
		offsets[i] = off
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off += info.Size()
	}
	if e.err != nil {
		return e.err
	}
	var zeros [512]byte
	pad := func(to uint64) error {
		for cw.n < to {
			if _, err := cw.Write(zeros[:min(to-cw.n, uint64(len(zeros)))]); err != nil {
				return err
			}
		}
		return nil
	}
	dataStart := alignUp(cw.n, a)
	if err := pad(dataStart); err != nil {
		return err
	}
	for i, t := range tensors {
		if err := pad(dataStart + offsets[i]); err != nil {
			return err
		}
		before := cw.n
		if err := t.Data(cw); err != nil {
			return fmt.Errorf("gguf: writing tensor %q: %w", t.Name, err)
		}
		want := TensorInfo{Dims: t.Dims, Type: t.Type}.Size()
		if got := cw.n - before; got != want {
			return fmt.Errorf("gguf: tensor %q wrote %d bytes, want %d", t.Name, got, want)
		}
	}
	return bw.Flush()
}

type countWriter struct {
	w io.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

type encoder struct {
	w   io.Writer
	buf [8]byte
	err error
}

func (e *encoder) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}
func (e *encoder) u8(v uint8)   { e.buf[0] = v; e.raw(e.buf[:1]) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:], v); e.raw(e.buf[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.raw(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.raw(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

// value writes the type tag and the value.
func (e *encoder) value(v any) error {
	t, err := typeOf(v)
	if err != nil {
		return err
	}
	e.u32(uint32(t))
	if t != TypeArray {
		e.scalar(v)
		return e.err
	}
	switch s := v.(type) {
	case []uint8:
		e.arr(TypeUint8, len(s), func(i int) { e.u8(s[i]) })
	case []int8:
		e.arr(TypeInt8, len(s), func(i int) { e.u8(uint8(s[i])) })
	case []uint16:
		e.arr(TypeUint16, len(s), func(i int) { e.u16(s[i]) })
	case []int16:
		e.arr(TypeInt16, len(s), func(i int) { e.u16(uint16(s[i])) })
	case []uint32:
		e.arr(TypeUint32, len(s), func(i int) { e.u32(s[i]) })
	case []int32:
		e.arr(TypeInt32, len(s), func(i int) { e.u32(uint32(s[i])) })
	case []float32:
		e.arr(TypeFloat32, len(s), func(i int) { e.u32(math.Float32bits(s[i])) })
	case []bool:
		e.arr(TypeBool, len(s), func(i int) { e.scalar(s[i]) })
	case []string:
		e.arr(TypeString, len(s), func(i int) { e.str(s[i]) })
	case []uint64:
		e.arr(TypeUint64, len(s), func(i int) { e.u64(s[i]) })
	case []int64:
		e.arr(TypeInt64, len(s), func(i int) { e.u64(uint64(s[i])) })
	case []float64:
		e.arr(TypeFloat64, len(s), func(i int) { e.u64(math.Float64bits(s[i])) })
	}
	return e.err
}

func (e *encoder) arr(elem ValueType, n int, each func(int)) {
	e.u32(uint32(elem))
	e.u64(uint64(n))
	for i := 0; i < n && e.err == nil; i++ {
		each(i)
	}
}

func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}

// typeOf maps a Go value to its GGUF type. Plain int is refused on purpose:
// engines are strict about widths (Ollama reads hyper-parameters as uint32
// only), so the caller must choose.
func typeOf(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return TypeArray, nil
	}
	return 0, fmt.Errorf("unsupported value type %T (use a sized integer, float, bool, string or a slice of one)", v)
}

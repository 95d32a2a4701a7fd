package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Limits that keep a hostile or corrupt header from exhausting memory. Real
// models stay far below them (a 256k vocabulary, a few thousand tensors).
const (
	maxStringLen  = 1 << 24
	maxArrayLen   = 1 << 26
	maxKVCount    = 1 << 20
	maxTensors    = 1 << 20
	maxArrayDepth = 4
)

// File is a parsed GGUF header.
type File struct {
	Version   uint32
	KV        []KV
	Tensors   []TensorInfo
	Alignment uint64
	// DataOffset is the absolute byte offset of the tensor-data section.
	DataOffset uint64
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the info of a named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// ReadFile parses a GGUF file's header and checks that every tensor's data
// lies inside the file, aligned and without overlap.
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading GGUF: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading GGUF %s: %w", path, err)
	}
	f, err := Read(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.CheckData(uint64(st.Size())); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// CheckData verifies tensor offsets against a file of the given size.
func (f *File) CheckData(size uint64) error {
	var end uint64
	for i, t := range f.Tensors {
		if t.Offset%f.Alignment != 0 {
			return fmt.Errorf("gguf: tensor %q offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		if i > 0 && t.Offset < end {
			return fmt.Errorf("gguf: tensor %q at offset %d overlaps the previous tensor (ends at %d)", t.Name, t.Offset, end)
		}
		sz := t.Size()
		if t.Type.ElemSize() == 0 {
			continue // cannot size quantized types here; only check alignment
		}
		end = t.Offset + sz
		if end < t.Offset || f.DataOffset+end < end || f.DataOffset+end > size {
			return fmt.Errorf("gguf: tensor %q data [%d, %d) runs past the end of the file (%d bytes)", t.Name, f.DataOffset+t.Offset, f.DataOffset+end, size)
		}
	}
	return nil
}

// Read parses a GGUF header (versions 2 and 3) from r, consuming it up to the
// start of the tensor data.
func Read(r io.Reader) (*File, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 1<<16)}
	f, err := d.file()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("gguf: at byte %d: %w", d.n, err)
	}
	return f, nil
}

type decoder struct {
	r   *bufio.Reader
	n   uint64
	buf [8]byte
}

func (d *decoder) full(p []byte) error {
	n, err := io.ReadFull(d.r, p)
	d.n += uint64(n)
	return err
}

func (d *decoder) u8() (uint8, error) {
	err := d.full(d.buf[:1])
	return d.buf[0], err
}
func (d *decoder) u16() (uint16, error) {
	err := d.full(d.buf[:2])
	return binary.LittleEndian.Uint16(d.buf[:]), err
}
func (d *decoder) u32() (uint32, error) {
	err := d.full(d.buf[:4])
	return binary.LittleEndian.Uint32(d.buf[:]), err
}
func (d *decoder) u64() (uint64, error) {
	err := d.full(d.buf[:8])
	return binary.LittleEndian.Uint64(d.buf[:]), err
}

func (d *decoder) str() (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > maxStringLen {
		return "", fmt.Errorf("string length %d exceeds the limit %d", n, maxStringLen)
	}
	if n <= 4096 {
		b := make([]byte, n)
		if err := d.full(b); err != nil {
			return "", err
		}
		return string(b), nil
	}
	// Grow with the data actually present rather than trusting the length.
	var sb strings.Builder
	c, err := io.CopyN(&sb, d.r, int64(n))
	d.n += uint64(c)
	if err != nil {
		return "", err
	}
	return sb.String(), nil
}

func (d *decoder) file() (*File, error) {
	magic, err := d.u32()
	if err != nil {
		return nil, err
	}
	if magic != Magic {
		return nil, fmt.Errorf("not a GGUF file (magic %#08x, want %#08x \"GGUF\")", magic, Magic)
	}
	f := &File{Alignment: DefaultAlignment}
	if f.Version, err = d.u32(); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("unsupported GGUF version %d (want 2 or 3)", f.Version)
	}
	nt, err := d.u64()
	if err != nil {
		return nil, err
	}
	nkv, err := d.u64()
	if err != nil {
		return nil, err
	}
	if nt > maxTensors || nkv > maxKVCount {
		return nil, fmt.Errorf("implausible counts: %d tensors, %d metadata entries", nt, nkv)
	}
	seen := map[string]bool{}
	for i := uint64(0); i < nkv; i++ {
		key, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("metadata entry %d key: %w", i, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate metadata key %q", key)
		}
		seen[key] = true
		t, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("metadata %q type: %w", key, err)
		}
		v, err := d.value(ValueType(t), 0)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		f.KV = append(f.KV, KV{Key: key, Value: v})
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok {
				return nil, fmt.Errorf("general.alignment has type %v, want uint32", ValueType(t))
			}
			if a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("general.alignment %d is not a power of two", a)
			}
			f.Alignment = uint64(a)
		}
	}
	names := map[string]bool{}
	for i := uint64(0); i < nt; i++ {
		var ti TensorInfo
		if ti.Name, err = d.str(); err != nil {
			return nil, fmt.Errorf("tensor %d name: %w", i, err)
		}
		if names[ti.Name] {
			return nil, fmt.Errorf("duplicate tensor %q", ti.Name)
		}
		names[ti.Name] = true
		nd, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		if nd == 0 || nd > 4 {
			return nil, fmt.Errorf("tensor %q has %d dimensions (want 1..4)", ti.Name, nd)
		}
		elems := uint64(1)
		for j := uint32(0); j < nd; j++ {
			dim, err := d.u64()
			if err != nil {
				return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
			}
			if dim == 0 || dim > 1<<40 || elems > math.MaxUint64/dim/8 {
				return nil, fmt.Errorf("tensor %q dimension %d is %d (implausible)", ti.Name, j, dim)
			}
			elems *= dim
			ti.Dims = append(ti.Dims, dim)
		}
		tt, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		ti.Type = TensorType(tt)
		if ti.Offset, err = d.u64(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
		}
		f.Tensors = append(f.Tensors, ti)
	}
	f.DataOffset = alignUp(d.n, f.Alignment)
	return f, nil
}

func (d *decoder) value(t ValueType, depth int) (any, error) {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		v, err := d.u8()
		return int8(v), err
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		v, err := d.u16()
		return int16(v), err
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		v, err := d.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := d.u8()
		if err == nil && v > 1 {
			return nil, fmt.Errorf("bool byte %d (want 0 or 1)", v)
		}
		return v == 1, err
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		v, err := d.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case TypeArray:
		return d.array(depth)
	}
	return nil, fmt.Errorf("unknown value type %d", uint32(t))
}

func (d *decoder) array(depth int) (any, error) {
	if depth >= maxArrayDepth {
		return nil, fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
	}
	et, err := d.u32()
	if err != nil {
		return nil, err
	}
	n, err := d.u64()
	if err != nil {
		return nil, err
	}
	if n > maxArrayLen {
		return nil, fmt.Errorf("array length %d exceeds the limit %d", n, maxArrayLen)
	}
	c := int(min(n, 1024)) // grow with the data actually present
	switch ValueType(et) {
	case TypeUint8:
		return readArr(d, n, c, d.u8)
	case TypeInt8:
		return readArr(d, n, c, func() (int8, error) { v, err := d.u8(); return int8(v), err })
	case TypeUint16:
		return readArr(d, n, c, d.u16)
	case TypeInt16:
		return readArr(d, n, c, func() (int16, error) { v, err := d.u16(); return int16(v), err })
	case TypeUint32:
		return readArr(d, n, c, d.u32)
	case TypeInt32:
		return readArr(d, n, c, func() (int32, error) { v, err := d.u32(); return int32(v), err })
	case TypeFloat32:
		return readArr(d, n, c, func() (float32, error) { v, err := d.u32(); return math.Float32frombits(v), err })
	case TypeBool:
		return readArr(d, n, c, func() (bool, error) {
			v, err := d.u8()
			if err == nil && v > 1 {
				return false, fmt.Errorf("bool byte %d (want 0 or 1)", v)
			}
			return v == 1, err
		})
	case TypeString:
		return readArr(d, n, c, d.str)
	case TypeUint64:
		return readArr(d, n, c, d.u64)
	case TypeInt64:
		return readArr(d, n, c, func() (int64, error) { v, err := d.u64(); return int64(v), err })
	case TypeFloat64:
		return readArr(d, n, c, func() (float64, error) { v, err := d.u64(); return math.Float64frombits(v), err })
	case TypeArray:
		// Each element of an array of arrays is itself (type, count, values).
		return readArr(d, n, c, func() (any, error) { return d.array(depth + 1) })
	}
	return nil, fmt.Errorf("unknown array element type %d", et)
}

func readArr[T any](d *decoder, n uint64, c int, next func() (T, error)) ([]T, error) {
	out := make([]T, 0, c)
	for i := uint64(0); i < n; i++ {
		v, err := next()
		if err != nil {
			return nil, fmt.Errorf("array element %d: %w", i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

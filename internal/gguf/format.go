package gguf

import "fmt"

// Magic is "GGUF" read as a little-endian uint32.
const Magic uint32 = 0x46554747

// Version is the GGUF version this package writes.
const Version uint32 = 3

// DefaultAlignment is the tensor-data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is a metadata value's type tag.
type ValueType uint32

// Metadata value types, as numbered by the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of a fixed-size scalar type, 0 for others.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// TensorType is a tensor's element type (ggml_type). Only the unquantized
// types are written here; the reader accepts any tag but can size only these.
type TensorType uint32

// Tensor element types used by this package.
const (
	TensorF32 TensorType = 0
	TensorF16 TensorType = 1
)

func (t TensorType) String() string {
	switch t {
	case TensorF32:
		return "F32"
	case TensorF16:
		return "F16"
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// ElemSize is the bytes per element, 0 when this package cannot size the type.
func (t TensorType) ElemSize() int {
	switch t {
	case TensorF32:
		return 4
	case TensorF16:
		return 2
	}
	return 0
}

// KV is one metadata entry. Value holds a Go value whose type selects the
// GGUF type: uint8, int8, uint16, int16, uint32, int32, float32, bool,
// string, uint64, int64, float64, or a slice of one of these (an array).
// The reader returns arrays of arrays as []any.
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// fastest-varying (row length). Offset is relative to the data section.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
}

// Elements is the product of the dimensions.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size is the data size in bytes (0 for types this package cannot size).
func (t TensorInfo) Size() uint64 { return t.Elements() * uint64(t.Type.ElemSize()) }

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

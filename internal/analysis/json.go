package analysis

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"time"
)

// WriteJSON writes v as indented JSON with NaN and ±Inf as null
// (encoding/json refuses them, and an undetermined interval is a fact
// worth keeping). Struct fields follow their json tags ("-" and omitempty
// included); object keys come out sorted.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(jsonable(reflect.ValueOf(v)), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func jsonable(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if e, ok := v.Interface().(error); ok {
			return e.Error()
		}
		return jsonable(v.Elem())
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return f
	case reflect.Struct:
		return jsonableStruct(v)
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonable(v.Index(i))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		out := map[string]any{}
		it := v.MapRange()
		for it.Next() {
			out[fmt.Sprint(it.Key().Interface())] = jsonable(it.Value())
		}
		return out
	}
	return v.Interface()
}

func jsonableStruct(v reflect.Value) any {
	if t, ok := v.Interface().(time.Time); ok {
		return t
	}
	m := map[string]any{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := v.Field(i)
		if strings.Contains(opts, "omit") && fv.IsZero() {
			continue
		}
		m[name] = jsonable(fv)
	}
	return m
}

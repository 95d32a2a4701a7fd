package record

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
)

// encodingJSON is what JSONLWriter wrote before AppendJSON: the reference.
func encodingJSON(t testing.TB, r *Record) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(r)
	return buf.Bytes(), err
}

func checkAppendJSON(t testing.TB, r *Record) {
	t.Helper()
	want, werr := encodingJSON(t, r)
	got, ok := AppendJSON([]byte("prefix"), r)
	if !ok {
		if string(got) != "prefix" {
			t.Fatalf("refused but changed the buffer: %q", got)
		}
		return // encoding/json answers (or refuses) for it
	}
	if werr != nil {
		t.Fatalf("AppendJSON wrote %q; encoding/json refuses: %v", got, werr)
	}
	if got := got[len("prefix"):]; !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from encoding/json:\n got %s\nwant %s", got, want)
	}
}

// everyField sets every field of a Record to a value that is not omitted,
// by reflection: a field added to Record and forgotten in AppendJSON makes
// the encodings differ.
func everyField(t *testing.T) *Record {
	var r Record
	v := reflect.ValueOf(&r).Elem()
	base := time.Date(2026, 12, 2, 4, 5, 6, 789012345, time.UTC)
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case string:
			f.SetString("s<&>\"\u2028é" + v.Type().Field(i).Name)
		case int:
			f.SetInt(int64(i + 1))
		case bool:
			f.SetBool(true)
		case float64:
			f.SetFloat(float64(i) + 0.125)
		case time.Time:
			f.Set(reflect.ValueOf(base.Add(time.Duration(i) * time.Millisecond)))
		case []float64:
			f.Set(reflect.ValueOf([]float64{1, 2.5, 1e-7, 3e21}))
		case *float64:
			x := 0.7
			f.Set(reflect.ValueOf(&x))
		case map[string]float64:
			f.Set(reflect.ValueOf(map[string]float64{"z": 1, "a": 2.25, "m<": 3}))
		default:
			t.Fatalf("Record.%s is a %s: teach AppendJSON and this test its encoding", v.Type().Field(i).Name, f.Type())
		}
	}
	return &r
}

func TestAppendJSONMatches(t *testing.T) {
	checkAppendJSON(t, everyField(t))
	checkAppendJSON(t, &Record{})

	east := time.FixedZone("", 5*3600+30*60)
	now := time.Now() // local zone, monotonic reading
	temp := 0.0
	bench := &Record{Index: 17, ID: "run-17", Source: "bench", API: "openai-chat", Model: "m",
		Intended: now, Sent: now.Add(time.Microsecond), FirstByte: now.Add(20 * time.Millisecond),
		FirstToken: now.Add(21 * time.Millisecond).In(east), End: now.Add(time.Second),
		ITLMs: []float64{5.000123, 4.99, 0}, ArrivalClock: ClockKernel, ReusedConn: true,
		PromptTokens: 4, OutputTokensUsage: 8, OutputEvents: 8, MaxTokens: 8, Temperature: &temp,
		FinishReason: "length", Status: 200}
	bench.Finalize()
	checkAppendJSON(t, bench)
	checkAppendJSON(t, &Record{Error: "HTTP 500: {\"error\":\"<bad & worse>\"}\n\t\x01\xff", ErrorClass: ErrHTTPStatus})

	for _, f := range []float64{1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789e15, -1e-9, 5e-324, math.MaxFloat64, -0.0, 0.1, 1.0 / 3,
		21.123456, 0.000001, -0.000123, 999999999.999999, 1e9, 123456789.123456, float64(987654321987654) / 1e6, float64(1<<53) / 1e6, 0.3, 12.5, math.Copysign(0, -1)} {
		checkAppendJSON(t, &Record{TTFTMs: f, ITLMs: []float64{f}, ServerTimings: map[string]float64{"x": f}})
	}
	// Refused: encoding/json's error (or answer) is the writer's.
	for _, r := range []*Record{
		{TTFTMs: math.NaN()}, {ITLMs: []float64{math.Inf(1)}}, {ServerTimings: map[string]float64{"x": math.Inf(-1)}},
		{Sent: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, {FirstToken: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, ok := AppendJSON(nil, r); ok {
			t.Errorf("AppendJSON took %+v, which encoding/json refuses", r)
		}
		checkAppendJSON(t, r)
	}
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("run-1", "<a&b>", int64(3), 1.5, 1e-7, int64(1700000000123456789), int64(3600))
	f.Add("\xff\u2028", "\"\\\n", int64(-1), -0.0, 1e21, int64(-62135596800000000), int64(-1))
	f.Fuzz(func(t *testing.T, s1, s2 string, n int64, f1, f2 float64, ns int64, zone int64) {
		// Most of a record's numbers are whole nanoseconds in ms.
		checkAppendJSON(t, &Record{TTFTMs: float64(ns) / float64(time.Millisecond), E2EMs: float64(n%1e15) / 1e6, ITLMs: []float64{float64(ns%1e12) / 1e6, -float64(n%1e9) / 1e6}})
		at := time.Unix(0, ns).In(time.FixedZone("", int(zone%(48*3600))))
		r := &Record{Index: int(n), ID: s1, Error: s2, Model: s1 + s2, Turn: int(n >> 3),
			Intended: at, Sent: at, FirstToken: at.Add(time.Duration(n)), End: at,
			TTFTMs: f1, E2EMs: f2, ITLMs: []float64{f1, f2}, Temperature: &f2,
			ServerTimings: map[string]float64{s1: f1, s2: f2}}
		checkAppendJSON(t, r)
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	now := time.Now()
	temp := 0.0
	r := &Record{Index: 17, ID: "run-17", Source: "bench", API: "openai-chat", Model: "m",
		Intended: now, Sent: now, FirstByte: now.Add(20 * time.Millisecond), FirstEvent: now.Add(20 * time.Millisecond),
		FirstToken: now.Add(21 * time.Millisecond), FirstContent: now.Add(21 * time.Millisecond), End: now.Add(56 * time.Millisecond),
		ITLMs: []float64{5.000123, 4.99, 5.01, 5, 5.2, 4.8, 5.1}, ArrivalClock: ClockKernel, ReusedConn: true,
		PromptTokens: 4, OutputTokensUsage: 8, OutputEvents: 8, MaxTokens: 8, Temperature: &temp,
		FinishReason: "length", Status: 200, FirstTokenReadDelayMs: 0.021}
	r.Finalize()
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = AppendJSON(buf[:0], r)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for b.Loop() {
			buf.Reset()
			_ = enc.Encode(r)
		}
	})
}

package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

type ev struct {
	typ, data, id string
	unterminated  bool
}

func readAll(t testing.TB, r io.Reader, opt Options) ([]ev, error) {
	t.Helper()
	rd := NewReader(r, opt)
	var out []ev
	for {
		e, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev{string(e.Type), string(e.Data), string(e.ID), e.Unterminated})
	}
}

func TestReaderSpec(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []ev
	}{
		{"lf", "data: a\n\ndata: b\n\n", []ev{{data: "a"}, {data: "b"}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{{data: "a"}, {data: "b"}}},
		{"cr", "data: a\r\rdata: b\r\r", []ev{{data: "a"}, {data: "b"}}},
		{"mixed", "data: a\r\n\ndata: b\r\rdata: c\n\r\n", []ev{{data: "a"}, {data: "b"}, {data: "c"}}},
		{"multiline data", "data: one\ndata: two\ndata:three\n\n", []ev{{data: "one\ntwo\nthree"}}},
		{"no space after colon", "data:x\n\n", []ev{{data: "x"}}},
		{"only first space stripped", "data:  x\n\n", []ev{{data: " x"}}},
		{"event and id", "event: message_start\nid: 7\ndata: {}\n\n", []ev{{typ: "message_start", data: "{}", id: "7"}}},
		{"comments and keep-alives", ": ping\n\n: keep-alive\ndata: a\n\n", []ev{{data: "a"}}},
		{"blank line without data dispatches nothing", "event: ping\n\ndata: a\n\n", []ev{{data: "a"}}},
		{"field without colon", "data\n\n", []ev{{data: ""}}},
		{"unknown field ignored", "foo: bar\ndata: a\n\n", []ev{{data: "a"}}},
		{"empty data line", "data:\ndata:\n\n", []ev{{data: "\n"}}},
		{"unterminated last event", "data: a\n\ndata: b", []ev{{data: "a"}, {data: "b", unterminated: true}}},
		{"unterminated with newline", "data: a\n", []ev{{data: "a", unterminated: true}}},
		{"bom-less leading blank lines", "\n\n\ndata: a\n\n", []ev{{data: "a"}}},
		{"anthropic ping", "event: ping\ndata: {\"type\": \"ping\"}\n\n", []ev{{typ: "ping", data: `{"type": "ping"}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Whole, byte by byte, and half-chunked: the result must not
			// depend on how the bytes arrive.
			for name, r := range map[string]io.Reader{
				"whole":   strings.NewReader(tc.in),
				"onebyte": iotest.OneByteReader(strings.NewReader(tc.in)),
				"half":    iotest.HalfReader(strings.NewReader(tc.in)),
			} {
				got, err := readAll(t, r, Options{})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("%s: got %d events %+v, want %+v", name, len(got), got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("%s: event %d = %+v, want %+v", name, i, got[i], tc.want[i])
					}
				}
			}
		})
	}
}

func TestReaderLargeEvent(t *testing.T) {
	big := strings.Repeat("x", 3<<20) // bigger than bufio's default and our initial buffer
	in := "data: " + big + "\n\ndata: after\n\n"
	got, err := readAll(t, strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].data != big || got[1].data != "after" {
		t.Fatalf("large event not read intact (%d events)", len(got))
	}
	_, err = readAll(t, strings.NewReader(in), Options{MaxEventBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge with a 1 MiB cap, got %v", err)
	}
	// Many lines of one event adding up past the cap.
	many := strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", 2000) + "\n"
	if _, err := readAll(t, strings.NewReader(many), Options{MaxEventBytes: 1 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("multi-line event over the cap: got %v", err)
	}
}

func TestReaderTimestampsAndCoalescing(t *testing.T) {
	pr, pw := io.Pipe()
	var tick int64
	now := func() time.Time { tick++; return time.Unix(0, tick) }
	rd := NewReader(pr, Options{Now: now})
	go func() {
		pw.Write([]byte("data: a\n\ndata: b\n\n")) // one read, two events
		pw.Write([]byte("data: c\n"))
		pw.Write([]byte("\n"))
		pw.CloseWithError(errors.New("connection reset"))
	}()
	a, _ := rd.Next()
	at, ac := a.At, a.Coalesced
	b, _ := rd.Next()
	if !b.At.Equal(at) || ac || !b.Coalesced {
		t.Fatalf("a at %v coalesced %v; b at %v coalesced %v", at, ac, b.At, b.Coalesced)
	}
	c, _ := rd.Next()
	if !c.At.After(at) || c.Coalesced || string(c.Data) != "c" {
		t.Fatalf("c: %+v", c)
	}
	if _, err := rd.Next(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a cut connection must surface its error, got %v", err)
	}
}

func TestReaderCutMidEvent(t *testing.T) {
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: part"), iotest.ErrReader(io.ErrUnexpectedEOF))
	rd := NewReader(r, Options{})
	if e, err := rd.Next(); err != nil || string(e.Data) != "a" {
		t.Fatal(e, err)
	}
	e, err := rd.Next()
	if err != nil || !e.Unterminated || string(e.Data) != "part" {
		t.Fatalf("want the partial event flagged, got %+v %v", e, err)
	}
	if _, err := rd.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("want the read error after the partial event, got %v", err)
	}
}

// reference parses a whole stream with the spec's algorithm, line by line.
func reference(in string) []ev {
	var out []ev
	var data bytes.Buffer
	var typ, id string
	has := false
	in = strings.ReplaceAll(in, "\r\n", "\n")
	in = strings.ReplaceAll(in, "\r", "\n")
	lines := strings.Split(in, "\n")
	terminated := strings.HasSuffix(in, "\n")
	if terminated {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		if l == "" {
			if has {
				d := strings.TrimSuffix(data.String(), "\n")
				out = append(out, ev{typ: typ, data: d, id: id})
			}
			data.Reset()
			typ, has = "", false
			continue
		}
		if l[0] == ':' {
			continue
		}
		name, val, found := strings.Cut(l, ":")
		if found {
			val = strings.TrimPrefix(val, " ")
		}
		switch name {
		case "data":
			data.WriteString(val)
			data.WriteByte('\n')
			has = true
		case "event":
			typ = val
		case "id":
			if !strings.ContainsRune(val, 0) {
				id = val
			}
		}
	}
	if has {
		out = append(out, ev{typ: typ, data: strings.TrimSuffix(data.String(), "\n"), id: id, unterminated: true})
	}
	return out
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n", "data: a\r\n\r\n", "event: x\ndata: y\rid: 3\r\r", ": c\ndata\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", "data: a\r", "retry: 10\ndata: b\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want := reference(string(in))
		for _, r := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in))} {
			got, err := readAll(t, r, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%q: got %+v want %+v", in, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%q: event %d got %+v want %+v", in, i, got[i], want[i])
				}
			}
		}
		// A reader reset after another stream (this one, cut anywhere)
		// reads as a new one.
		rd := NewReader(bytes.NewReader(in[:len(in)/2]), Options{})
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
		rd.Reset(bytes.NewReader(in), Options{})
		var got []ev
		for {
			e, err := rd.Next()
			if err != nil {
				break
			}
			got = append(got, ev{string(e.Type), string(e.Data), string(e.ID), e.Unterminated})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q after Reset: got %+v want %+v", in, got, want)
		}
	})
}

// TestReaderResetKeepsBuffers: a reused reader allocates nothing for its
// next stream, and one that grew for a long line starts small again.
func TestReaderResetKeepsBuffers(t *testing.T) {
	in := []byte("event: e\nid: 1\ndata: a\n\n")
	rd := NewReader(bytes.NewReader(in), Options{})
	br := bytes.NewReader(in)
	allocs := testing.AllocsPerRun(100, func() {
		br.Reset(in)
		rd.Reset(br, Options{})
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per reused stream", allocs)
	}
	long := []byte("data: " + strings.Repeat("x", 3*initialBuf) + "\n\n")
	rd.Reset(bytes.NewReader(long), Options{})
	if e, err := rd.Next(); err != nil || len(e.Data) != 3*initialBuf {
		t.Fatalf("long event: %v", err)
	}
	rd.Reset(br, Options{})
	if len(rd.buf) != initialBuf || cap(rd.data) > maxKeptBuf {
		t.Fatalf("after a long line: buffer %d, data %d", len(rd.buf), cap(rd.data))
	}
}

func BenchmarkReader(b *testing.B) {
	chunk := "data: {\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"finish_reason\":null}]}\n\n"
	in := []byte(strings.Repeat(chunk, 1000))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	br := bytes.NewReader(in)
	for b.Loop() {
		br.Reset(in)
		rd := NewReader(br, Options{})
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/event")
}

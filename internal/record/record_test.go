package record

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

func TestFinalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Record
		want Record // the derived fields only
	}{
		{"closed loop", Record{Intended: at(0), Sent: at(0), FirstByte: at(20), FirstEvent: at(25), FirstToken: at(30), FirstContent: at(40), End: at(130), OutputTokensUsage: 11},
			Record{TTFBMs: 20, TTFEMs: 25, TTFTMs: 30, TTFCMs: 40, E2EMs: 130, TTFTIntendedMs: 30, TPOTMs: 10}},
		{"open loop sent late", Record{Intended: at(0), Sent: at(50), FirstToken: at(80), End: at(80), OutputEvents: 1},
			Record{TTFTMs: 30, E2EMs: 30, TTFTIntendedMs: 80, ScheduleLagMs: 50}},
		{"failed before a token", Record{Intended: at(0), Sent: at(0), End: at(5), ErrorClass: ErrHTTPStatus},
			Record{E2EMs: 5}},
		{"tokenizer count when no usage", Record{Sent: at(0), FirstToken: at(10), End: at(50), OutputTokensTokenizer: 5, OutputEvents: 9},
			Record{TTFTMs: 10, E2EMs: 50, TPOTMs: 10}},
	} {
		r := tc.r
		r.Finalize()
		got := Record{TTFBMs: r.TTFBMs, TTFEMs: r.TTFEMs, TTFTMs: r.TTFTMs, TTFCMs: r.TTFCMs, E2EMs: r.E2EMs,
			TTFTIntendedMs: r.TTFTIntendedMs, ScheduleLagMs: r.ScheduleLagMs, TPOTMs: r.TPOTMs}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: derived %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Property: for any send, lag and first-token delay, TTFT from the intended
// time is TTFT from the send plus the lag, and the judged TTFT is it.
func TestJudgedTTFTAddsTheLag(t *testing.T) {
	for i := range 200 {
		lag, ttft := float64(i%17)*3.25, 1+float64(i)*1.5
		r := Record{Intended: at(0), Sent: at(lag), FirstToken: at(lag + ttft)}
		r.Finalize()
		if math.Abs(r.TTFTIntendedMs-(r.TTFTMs+r.ScheduleLagMs)) > 1e-6 || r.JudgedTTFTMs() != r.TTFTIntendedMs {
			t.Fatalf("lag %v ttft %v: intended %v, ttft %v, lag %v, judged %v", lag, ttft, r.TTFTIntendedMs, r.TTFTMs, r.ScheduleLagMs, r.JudgedTTFTMs())
		}
	}
	old := Record{TTFTMs: 42} // written before intended times were recorded
	if old.JudgedTTFTMs() != 42 {
		t.Errorf("a record without an intended time judges %v, want its TTFT", old.JudgedTTFTMs())
	}
}

func TestOutputTokensPrefersUsage(t *testing.T) {
	for _, tc := range []struct {
		r    Record
		want int
	}{
		{Record{OutputTokensUsage: 7, OutputTokensTokenizer: 6, OutputEvents: 5}, 7},
		{Record{OutputTokensTokenizer: 6, OutputEvents: 5}, 6},
		{Record{OutputEvents: 5}, 5},
		{Record{}, 0},
	} {
		if got := tc.r.OutputTokens(); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.r, got, tc.want)
		}
	}
}

// TestTokenCountFallbacks pins the one order of token-count fallbacks, for
// a request and for a summary's totals: output from usage, else the
// tokenizer, else the events; prompt from usage, else the intended count.
func TestTokenCountFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		promptIntended, promptUsage  int
		outUsage, outTokenizer, outN int
		wantIn, wantOut              int
	}{
		{"everything reported", 100, 108, 7, 6, 5, 108, 7},
		{"no usage", 100, 0, 0, 6, 5, 100, 6},
		{"events only", 100, 0, 0, 0, 5, 100, 5},
		{"usage only", 0, 108, 7, 0, 0, 108, 7},
		{"usage below the tokenizer", 100, 90, 4, 6, 5, 90, 4},
		{"nothing", 0, 0, 0, 0, 0, 0, 0},
	} {
		r := Record{PromptTokens: tc.promptIntended, PromptTokensUsage: tc.promptUsage,
			OutputTokensUsage: tc.outUsage, OutputTokensTokenizer: tc.outTokenizer, OutputEvents: tc.outN}
		if got := r.InputTokens(); got != tc.wantIn {
			t.Errorf("%s: Record.InputTokens %d, want %d", tc.name, got, tc.wantIn)
		}
		if got := r.OutputTokens(); got != tc.wantOut {
			t.Errorf("%s: Record.OutputTokens %d, want %d", tc.name, got, tc.wantOut)
		}
		tk := Tokens{Prompt: tc.promptIntended, PromptUsage: tc.promptUsage,
			OutputUsage: tc.outUsage, OutputTokenizer: tc.outTokenizer, OutputEvents: tc.outN}
		if got := tk.Input(); got != tc.wantIn {
			t.Errorf("%s: Tokens.Input %d, want %d", tc.name, got, tc.wantIn)
		}
		if got := tk.Output(); got != tc.wantOut {
			t.Errorf("%s: Tokens.Output %d, want %d", tc.name, got, tc.wantOut)
		}
	}
}

func TestJudgedTTFTOfSummary(t *testing.T) {
	s := Summary{TTFT: Metric{Count: 3, P95: 10}, TTFTIntended: Metric{Count: 3, P95: 900}}
	if s.JudgedTTFT().P95 != 900 {
		t.Errorf("judged P95 %v, want TTFT from the intended send time", s.JudgedTTFT().P95)
	}
	old := Summary{TTFT: Metric{Count: 3, P95: 10}}
	if old.JudgedTTFT().P95 != 10 {
		t.Errorf("a summary without intended times judges %v, want its TTFT", old.JudgedTTFT().P95)
	}
	if BasisText(BasisIntended) == BasisText(BasisSent) {
		t.Error("the two bases read the same")
	}
}

// The JSON field names are the public schema of requests.jsonl,
// summary.json and manifest.json: renaming one breaks users' scripts. The
// golden files pin them; a change must be deliberate (go test -update, and
// a schema version bump for a rename or removal).
func TestSchemaFieldNames(t *testing.T) {
	for name, v := range map[string]any{"record": Record{}, "summary": Summary{}, "manifest": Manifest{}} {
		got := strings.Join(fieldNames(reflect.TypeOf(v), ""), "\n") + "\n"
		path := filepath.Join("testdata", name+".fields.golden")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update once)", err)
		}
		if got != string(want) {
			t.Errorf("%s JSON field names changed (go test -update if deliberate; bump the schema for a rename):\ngot:\n%s\nwant:\n%s", name, got, want)
		}
	}
}

// fieldNames lists the JSON names of t's fields, nested structs as
// "outer.inner", sorted.
func fieldNames(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, prefix+name)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
			out = append(out, fieldNames(ft, prefix+name+".")...)
		}
	}
	sort.Strings(out)
	return out
}

func TestJSONLRoundTripAndTruncatedLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "requests.jsonl")
	w, err := NewJSONLWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	in := []Record{{Index: 0, Sent: at(0), End: at(10), TTFTMs: 3, ITLMs: []float64{1, 2}}, {Index: 1, Sent: at(1), End: at(12), ErrorClass: ErrTimeout, Error: "slow"}}
	for i := range in {
		if err := w.Write(&in[i]); err != nil {
			t.Fatal(err)
		}
	}
	if w.Kept() != 2 || w.Err() != nil {
		t.Fatalf("kept %d, err %v", w.Kept(), w.Err())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves an unterminated last line: it is skipped.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"index":2,"sent":"2026-01`)
	f.Close()
	out, err := ReadJSONL(path)
	if err != nil || len(out) != 2 || out[0].ITLMs[1] != 2 || out[1].Error != "slow" || !out[1].End.Equal(in[1].End) {
		t.Fatalf("read back %+v, %v", out, err)
	}
	// A malformed line before the end is an error naming file and line.
	os.WriteFile(path, []byte("{\"index\":0}\nnot json\n{\"index\":2}\n"), 0o644)
	if _, err := ReadJSONL(path); err == nil || !strings.Contains(err.Error(), path+":2") {
		t.Errorf("malformed line 2: %v", err)
	}
}

// A failed write ends the file: later records are not written, the error
// names the file, and Kept counts only the whole lines.
func TestJSONLWriterStopsAtTheFirstFailure(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	w, err := NewJSONLWriter("/dev/full")
	if err != nil {
		t.Skip(err)
	}
	defer w.Close()
	r := Record{Index: 1}
	if err := w.Write(&r); err == nil || !strings.Contains(err.Error(), "writing /dev/full: no space left on device") {
		t.Fatalf("first write: %v", err)
	}
	if err := w.Write(&r); err != nil {
		t.Errorf("second write reported again: %v", err)
	}
	if w.Kept() != 0 || w.Err() == nil {
		t.Errorf("kept %d, err %v", w.Kept(), w.Err())
	}
}

func TestWriteJSONIsAtomicAndShared(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	if err := WriteJSON(path, Summary{Schema: SummarySchema, TTFT: Metric{Count: 1, P50: 5}}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	var s Summary
	if err := ReadJSON(path, &s); err != nil || s.TTFT.P50 != 5 {
		t.Errorf("read back %+v, %v", s, err)
	}
	if err := WriteJSON(path, math.NaN()); err == nil {
		t.Error("NaN encoded")
	}
	var back json.RawMessage
	if err := ReadJSON(path, &back); err != nil {
		t.Errorf("a failed write clobbered the file: %v", err)
	}
}

// FuzzReadJSONL: any file reads without panicking; what reads back writes
// and reads again as the same number of records.
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte("{\"index\":1,\"sent\":\"2026-01-02T03:04:05Z\",\"ttft_ms\":3}\n"))
	f.Add([]byte("{\"index\":1}\n{\"index\":2,\"itl_ms\":[1,2]}\n{\"ind"))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte("not json\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "in.jsonl")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		recs, err := ReadJSONL(path)
		if err != nil {
			return
		}
		w, err := NewJSONLWriter(filepath.Join(dir, "out.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			if err := w.Write(&recs[i]); err != nil {
				return // e.g. a NaN-free record that still will not encode
			}
		}
		w.Close()
		again, err := ReadJSONL(filepath.Join(dir, "out.jsonl"))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("%d records read, %d after a round trip (%v)", len(recs), len(again), err)
		}
	})
}

package stats

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestReadNumericCSV(t *testing.T) {
	cases := []struct {
		name, in, want string
		rows           int
	}{
		{"plain", "batch,context,latency_ms\n1,2,3\n4,5,6\n", "", 2},
		{"comments, blanks, bools, missing", "\ufeff# sweep\nx, ok ,y\n1,true,\n\n2,false,3\n", "", 2},
		{"empty", "", "empty file", 0},
		{"header only", "a,b\n", "no data rows", 0},
		{"bad cell", "a,b\n1,2\n3,zz\n", `t.csv:3: column "b": "zz" is not a number`, 0},
		{"short row", "a,b\n1,2\n3\n", "t.csv:3: 1 fields, want 2", 0},
		{"duplicate", "a,A\n1,2\n", `column "A" appears twice`, 0},
		{"infinite", "a\n1e999\n", "is infinite", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := ReadNumericCSV(strings.NewReader(tc.in), "t.csv")
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tab.Rows() != tc.rows {
				t.Errorf("%d rows, want %d", tab.Rows(), tc.rows)
			}
		})
	}
	tab, _ := ReadNumericCSV(strings.NewReader("x,ok,y\n1,true,\n"), "t")
	ok, _ := tab.Col("OK")
	y, _ := tab.Col("y")
	if ok[0] != 1 || !math.IsNaN(y[0]) {
		t.Errorf("ok=%v y=%v", ok, y)
	}
}

func TestTableCSVRoundTrip(t *testing.T) {
	tab := SynthSessions(50, -0.03, 300, 1)
	tab.Data[1][3] = math.NaN()
	var buf bytes.Buffer
	if err := tab.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadNumericCSV(&buf, "round")
	if err != nil {
		t.Fatal(err)
	}
	for j := range tab.Columns {
		for i := range tab.Rows() {
			a, b := tab.Data[j][i], back.Data[j][i]
			if a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
				t.Fatalf("column %s row %d: %v became %v", tab.Columns[j], i, a, b)
			}
		}
	}
}

func FuzzReadNumericCSV(f *testing.F) {
	f.Add("batch,context,latency_ms\n1,2,3\n")
	f.Add("ttft_ms,retained,mobile\n250.5,1,0\n310,0,\n# c\n")
	f.Add("a,b\n\"1\",\"x\"\n")
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := ReadNumericCSV(strings.NewReader(s), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		n := tab.Rows()
		if n == 0 || len(tab.Data) != len(tab.Columns) {
			t.Fatalf("accepted a table with %d rows, %d columns, %d data columns", n, len(tab.Columns), len(tab.Data))
		}
		for j, c := range tab.Data {
			if len(c) != n {
				t.Fatalf("column %d has %d values, want %d", j, len(c), n)
			}
			for _, v := range c {
				if math.IsInf(v, 0) {
					t.Fatalf("accepted an infinite value")
				}
			}
		}
	})
}

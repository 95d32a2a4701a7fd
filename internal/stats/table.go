package stats

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Table is a numeric CSV held by column: what the analyses read (sweep
// points for fit, sessions for rdd).
type Table struct {
	// Name is where the table came from (a file name), used in errors.
	Name    string
	Columns []string
	// Data[j] holds column j; every column has Rows() values.
	Data [][]float64
}

// Rows is the number of data rows.
func (t *Table) Rows() int {
	if len(t.Data) == 0 {
		return 0
	}
	return len(t.Data[0])
}

// Col returns the column called name (case-insensitive) and whether it
// exists.
func (t *Table) Col(name string) ([]float64, bool) {
	for j, c := range t.Columns {
		if strings.EqualFold(c, name) {
			return t.Data[j], true
		}
	}
	return nil, false
}

// MustCol is Col with an error that names the table and the columns it has.
func (t *Table) MustCol(name string) ([]float64, error) {
	if c, ok := t.Col(name); ok {
		return c, nil
	}
	return nil, fmt.Errorf("%s: no column %q (columns: %s)", t.Name, name, strings.Join(t.Columns, ", "))
}

// maxCSVRows bounds what ReadNumericCSV accepts, so that a wrong file
// fails clearly instead of exhausting memory.
const maxCSVRows = 50_000_000

// ReadNumericCSV reads a CSV with a header row and numeric cells. Blank
// lines and lines starting with '#' are skipped; "true"/"false" read as 1/0
// and an empty cell as NaN (a missing value). Any other non-number is an
// error naming the file, line and column.
func ReadNumericCSV(r io.Reader, name string) (*Table, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3) // a UTF-8 byte-order mark from spreadsheet exports
	}
	cr := csv.NewReader(br)
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty file (want a header row such as %q)", name, "batch,context,latency_ms")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t := &Table{Name: name}
	seen := map[string]bool{}
	for j, h := range header {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, fmt.Errorf("%s:1: column %d has an empty name", name, j+1)
		}
		if seen[strings.ToLower(h)] {
			return nil, fmt.Errorf("%s:1: column %q appears twice", name, h)
		}
		seen[strings.ToLower(h)] = true
		t.Columns = append(t.Columns, h)
	}
	t.Data = make([][]float64, len(t.Columns))
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				return nil, fmt.Errorf("%s:%d: %d fields, want %d as in the header", name, pe.Line, len(rec), len(t.Columns))
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		// FieldPos is valid only after a successful Read (it panics on a
		// record that failed to parse).
		line, _ := cr.FieldPos(0)
		if t.Rows() >= maxCSVRows {
			return nil, fmt.Errorf("%s:%d: more than %d rows", name, line, maxCSVRows)
		}
		for j, cell := range rec {
			v, err := parseCell(cell)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: column %q: %v", name, line, t.Columns[j], err)
			}
			t.Data[j] = append(t.Data[j], v)
		}
	}
	if t.Rows() == 0 {
		return nil, fmt.Errorf("%s: no data rows after the header", name)
	}
	return t, nil
}

func parseCell(s string) (float64, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "na", "nan", "null":
		return math.NaN(), nil
	case "true", "yes":
		return 1, nil
	case "false", "no":
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is infinite", s)
	}
	return v, nil
}

// WriteCSV writes the table with a header row; NaN is written empty.
func (t *Table) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(t.Columns); err != nil {
		return err
	}
	row := make([]string, len(t.Columns))
	for i := range t.Rows() {
		for j := range t.Columns {
			v := t.Data[j][i]
			if math.IsNaN(v) {
				row[j] = ""
			} else {
				row[j] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

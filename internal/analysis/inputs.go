package analysis

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ttft-dev/ttft/internal/stats"
)

// Inputs is where an analysis reads from besides named files: standard
// input (the file "-") and the results store (RUN arguments that are not
// paths). Either may be nil when the caller has none.
type Inputs struct {
	Stdin io.Reader
	Store Store
}

// ReadTable reads a numeric CSV file with a header ("-": standard input),
// as stats.ReadNumericCSV does. A file that cannot be opened is an error
// "reading PATH: ..."; a malformed one names the file, line and column.
func (in Inputs) ReadTable(path string) (*stats.Table, error) {
	r, name, err := in.open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer r.Close()
	return stats.ReadNumericCSV(r, name)
}

var errNoStdin = errors.New("no standard input")

func (in Inputs) open(path string) (io.ReadCloser, string, error) {
	if path == "-" {
		if in.Stdin == nil {
			return nil, "", errNoStdin
		}
		return io.NopCloser(in.Stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

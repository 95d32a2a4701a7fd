package sim

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// publicCorpus is the public validation corpus: measured TTFT, inter-token
// and throughput figures from independent public sources, one row per
// published operating point (see the file's header and
// docs/simulator-validation.md).
//
//go:embed testdata/public_corpus.csv
var publicCorpus []byte

// Load kinds of a corpus row.
const (
	LoadBatch1 = "batch1" // one request on an idle engine
	LoadStatic = "static" // one fixed batch prefilled together, then decoded together
	LoadClosed = "closed" // closed loop at a fixed concurrency
	LoadRate   = "rate"   // open loop, Poisson arrivals at a fixed rate
	LoadBurst  = "burst"  // all requests sent at once (request rate inf)
)

// CorpusRow is one published operating point.
type CorpusRow struct {
	Line     int // line in the CSV, for messages
	Source   string
	URL      string
	Engine   string
	Version  string
	Profile  string // engine profile to simulate with
	Sched    string // v0, v1 or static
	Frontend string // http or offline
	Model    string
	GPU      string
	TP       int
	DType    string // weights: bf16, fp16, fp8
	KV       string // kv-cache dtype: auto, fp8
	Prompt   int
	Output   int
	Lengths  string // fixed, uniform, geom, eos:MAX
	Load     string
	Value    float64 // batch size, concurrency, req/s or burst size
	Requests int
	TTFTMs   float64 // 0: not published
	TTFTStat string  // mean or p50
	ITLMs    float64
	ITLStat  string
	E2EMs    float64
	Tput     float64
	TputUnit string // req_s, out_tok_s, out_tok_s_gpu
	MemUtil  float64
	MaxLen   int
	// MaxSeqs is the engine's limit on requests in one batch
	// (--max-num-seqs; OLLAMA_NUM_PARALLEL), 0: the engine default.
	MaxSeqs int
	// Warmup is how many requests the run sent first and left out of its
	// figures (`ttft bench --warmup`; the published sweeps: 0).
	Warmup    int
	Notes     string
	Published string // engine and version, for tables
	// Saturation marks a row whose throughput is the deployment's
	// saturation throughput (markSaturation): the figure issue #16 asks
	// to be within 10 %.
	Saturation bool
	// Sweep is how the published sweep was run: "desc" — its loads from
	// the highest down, one after another on one server, with the same
	// seeded prompts each time — or "" (each run on a fresh server).
	Sweep string
	// PriorRates are the loads the same server ran before this row's
	// (Sweep "desc": the sweep's higher rates, in the order run), and
	// SweepSeed the seed of the prompts every run of the sweep sent.
	PriorRates []float64
	SweepSeed  uint64
	// Draw is added to every seed the row's served run draws from (its
	// request lengths and arrival times): 0 simulates the draws the
	// published table is pinned to, others the same row with other
	// requests (ttft sim validate --loso --draw), for the spread that
	// sampling alone puts on the medians.
	Draw uint64
}

// Category is the load category a row's figures are reported under.
func (r *CorpusRow) Category() string {
	switch r.Load {
	case LoadBurst:
		return LoadRate // request rate inf: an open loop at its limit
	default:
		return r.Load
	}
}

// DefaultCorpus parses the embedded public corpus.
func DefaultCorpus() ([]CorpusRow, error) {
	return ParseCorpus(bytes.NewReader(publicCorpus))
}

// ParseCorpus reads a corpus CSV: '#' lines are comments, the first other
// line is the header, and columns are found by name so that the file can
// grow columns (optional ones: max_seqs, --max-num-seqs where published;
// warmup, requests left out of the figures). A row's line number seeds its
// drawn lengths, so adding lines above rows changes their draws.
func ParseCorpus(r io.Reader) ([]CorpusRow, error) {
	var body bytes.Buffer
	var lines []int // body line → file line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		t := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(t), "#") || strings.TrimSpace(t) == "" {
			continue
		}
		body.WriteString(t)
		body.WriteByte('\n')
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	recs, err := csv.NewReader(&body).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("corpus: no rows")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"source", "url", "engine", "profile", "sched", "model", "gpu", "tp", "prompt", "output", "load", "value"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("corpus: header lacks column %q", need)
		}
	}
	rows := make([]CorpusRow, 0, len(recs)-1)
	for i, rec := range recs[1:] {
		line := lines[i+1]
		p := rowParser{rec: rec, col: col, line: line}
		row := CorpusRow{
			Line: line, Source: p.str("source"), URL: p.str("url"), Engine: p.str("engine"), Version: p.str("version"),
			Profile: p.str("profile"), Sched: p.str("sched"), Frontend: p.str("frontend"),
			Model: p.str("model"), GPU: p.str("gpu"), TP: p.int("tp"), DType: p.str("dtype"), KV: p.str("kv"),
			Prompt: p.int("prompt"), Output: p.int("output"), Lengths: p.str("lengths"), Load: p.str("load"),
			Value: p.float("value"), Requests: p.int("requests"),
			TTFTMs: p.float("ttft_ms"), TTFTStat: p.str("ttft_stat"), ITLMs: p.float("itl_ms"), ITLStat: p.str("itl_stat"),
			E2EMs: p.float("e2e_ms"), Tput: p.float("tput"), TputUnit: p.str("tput_unit"),
			MemUtil: p.float("mem_util"), MaxLen: p.int("max_len"), MaxSeqs: p.int("max_seqs"), Warmup: p.int("warmup"), Notes: p.str("notes"),
			Sweep: p.str("sweep"),
		}
		if p.err != nil {
			return nil, p.err
		}
		row.Published = row.Engine + " " + row.Version
		if err := row.check(); err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	markSaturation(rows)
	linkSweeps(rows)
	return rows, nil
}

// linkSweeps gives every row of a "desc" sweep the rates its server ran
// before it (the sweep's higher rates, highest first) and the seed of the
// prompts all its runs sent: the first run's line.
func linkSweeps(rows []CorpusRow) {
	rates := map[string][]float64{}
	first := map[string]int{}
	for i := range rows {
		r := &rows[i]
		if r.Sweep != "desc" {
			continue
		}
		k := r.sweepKey()
		rates[k] = append(rates[k], r.Value)
		if f, ok := first[k]; !ok || r.Value > rows[f].Value {
			first[k] = i
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Sweep != "desc" {
			continue
		}
		k := r.sweepKey()
		for _, v := range rates[k] {
			if v > r.Value {
				r.PriorRates = append(r.PriorRates, v)
			}
		}
		slices.SortFunc(r.PriorRates, func(a, b float64) int { return cmp.Compare(b, a) })
		r.SweepSeed = uint64(rows[first[k]].Line)
	}
}

// sweepKey identifies one published sweep: the same source, deployment and
// workload at different loads.
func (r *CorpusRow) sweepKey() string {
	// Means drawn from published totals differ a little from point to
	// point of one sweep (IOG's per-rate token totals), so the lengths
	// enter by kind only.
	return fmt.Sprintf("%s|%s|%s|%s|%d|%s|%s|%s|%s|%s", r.Source, r.Profile, r.Model, r.GPU, r.TP, r.DType, r.KV, r.Lengths, r.Load, r.Frontend)
}

// markSaturation flags the rows whose published throughput is the
// deployment's saturation throughput — the engine kept as busy as its
// batching allows — decided from the load alone, never from an error:
//
//   - static batches that publish a throughput (the peak-throughput tables
//     run the largest batch that fits; latency tables publish e2e only);
//   - bursts (request rate inf: every request queued at once);
//   - the top concurrency of a closed-loop sweep of at least two points
//     (the sweep's own saturation point; a lone point, such as a batch-1
//     decode figure, is not one).
//
// Open-loop rates are not: a published open loop of a few hundred
// requests with ShareGPT-like lengths ends with its longest requests
// decoding almost alone, so its requests per second over the whole run
// measure the length distribution's tail more than the engine's rate at
// full batch (IOG's RTX 4090 run at 32 req/s: the longest of 200
// geometric outputs of mean 202 tokens is ≈ 1,190 tokens, ≈ 23 s of
// decoding at the 19.5 ms TPOT measured at 1 req/s, of a 24.5 s run).
func markSaturation(rows []CorpusRow) {
	top := map[string]float64{}
	n := map[string]int{}
	for i := range rows {
		r := &rows[i]
		if r.Load == LoadClosed {
			k := r.sweepKey()
			n[k]++
			top[k] = math.Max(top[k], r.Value)
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Tput <= 0 {
			continue
		}
		switch r.Load {
		case LoadStatic, LoadBurst:
			r.Saturation = true
		case LoadClosed:
			k := r.sweepKey()
			r.Saturation = n[k] >= 2 && r.Value == top[k]
		}
	}
}

func (r *CorpusRow) check() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("corpus line %d (%s): %s", r.Line, r.Source, fmt.Sprintf(f, a...))
	}
	switch r.Load {
	case LoadBatch1, LoadStatic, LoadClosed, LoadRate, LoadBurst:
	default:
		return bad("unknown load %q", r.Load)
	}
	switch r.Sched {
	case "v0", "v1", "static":
	default:
		return bad("unknown sched %q", r.Sched)
	}
	if r.TP <= 0 || r.Prompt <= 0 || r.Output <= 0 || r.Value <= 0 {
		return bad("tp, prompt, output and value must be positive")
	}
	if r.TTFTMs <= 0 && r.ITLMs <= 0 && r.E2EMs <= 0 && r.Tput <= 0 {
		return bad("no measured figure")
	}
	if r.Tput > 0 {
		switch r.TputUnit {
		case "req_s", "out_tok_s", "out_tok_s_gpu":
		default:
			return bad("unknown tput_unit %q", r.TputUnit)
		}
	}
	if _, _, err := parseLengths(r.Lengths); err != nil {
		return bad("%v", err)
	}
	switch {
	case r.Sweep == "":
	case r.Sweep != "desc":
		return bad("unknown sweep %q (known: desc)", r.Sweep)
	case r.Load != LoadRate:
		return bad("sweep desc is for open-loop rate sweeps, not %s", r.Load)
	}
	return nil
}

// rowParser reads named cells of one CSV record, keeping the first error.
type rowParser struct {
	rec  []string
	col  map[string]int
	line int
	err  error
}

func (p *rowParser) str(name string) string {
	i, ok := p.col[name]
	if !ok || i >= len(p.rec) {
		return ""
	}
	return strings.TrimSpace(p.rec[i])
}

func (p *rowParser) float(name string) float64 {
	s := p.str(name)
	if s == "" {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("corpus line %d: column %s: %w", p.line, name, err)
	}
	return v
}

func (p *rowParser) int(name string) int {
	return int(p.float(name))
}

// parseLengths reads the lengths column: fixed, geom, or eos:MAX.
func parseLengths(s string) (kind string, max int, err error) {
	switch {
	case s == "" || s == "fixed":
		return "fixed", 0, nil
	case s == "geom":
		return "geom", 0, nil
	case s == "uniform":
		return "uniform", 0, nil
	case strings.HasPrefix(s, "eos:"):
		m, err := strconv.Atoi(strings.TrimPrefix(s, "eos:"))
		if err != nil || m <= 0 {
			return "", 0, fmt.Errorf("lengths %q: eos:MAX needs a positive MAX", s)
		}
		return "eos", m, nil
	}
	return "", 0, fmt.Errorf("unknown lengths %q (fixed, uniform, geom, eos:MAX)", s)
}

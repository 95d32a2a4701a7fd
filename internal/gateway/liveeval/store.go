package liveeval

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
)

// A suite's results directory: suite.json, what the suite is (written
// when it starts, rewritten when it ends), and runs/, one file per
// (fleet, policy, seed) run written as soon as the run finishes (each
// atomically: a temporary file renamed into place), so that a crash or an
// interrupt loses at most the run in progress. ReadDir reads it back for
// the same tables without running anything; ResumeStore takes a stopped
// suite up again where it stopped.
const (
	SuiteFile   = "suite.json"
	RunsDir     = "runs"
	SuiteSchema = "ttft.live-eval.suite/v1"
	RunSchema   = "ttft.live-eval.run/v1"
)

// Suite is suite.json: what was asked for and how the suite went.
type Suite struct {
	Schema      string   `json:"schema"`
	ToolVersion string   `json:"tool_version,omitempty"`
	Args        []string `json:"args,omitempty"`
	// Mode is the evaluation: "policies" (the routing comparison and the
	// targets), "admission" or "predictor"; it decides the tables.
	Mode string `json:"mode"`
	// DefaultPolicy is the policy judged against the targets.
	DefaultPolicy string       `json:"default_policy"`
	Fleets        []SuiteFleet `json:"fleets"`
	Policies      []string     `json:"policies"`
	Seeds         []uint64     `json:"seeds"`
	Started       time.Time    `json:"started"`
	Finished      *time.Time   `json:"finished,omitempty"`
	// Status is "running" until the suite ends, then "complete" or what
	// stopped it.
	Status string `json:"status"`
	// Load averages (1, 5, 15 min, /proc/loadavg) at the start and the
	// end; absent where the system has none.
	LoadAvgStart []float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd   []float64 `json:"load_avg_end,omitempty"`
	// Resumed is when the suite was taken up again after it stopped
	// (ResumeStore), one time per resumption.
	Resumed []time.Time `json:"resumed,omitempty"`
}

// SuiteFleet is what a report needs of a fleet.
type SuiteFleet struct {
	Name         string  `json:"name"`
	CacheMatters bool    `json:"cache_matters"`
	SLOMs        float64 `json:"slo_ms"`
	Requests     int     `json:"requests"`
	Warmup       int     `json:"warmup"`
}

// Modes of a suite.
const (
	ModePolicies  = "policies"
	ModeAdmission = "admission"
	ModePredictor = "predictor"
)

// NewSuite describes a suite of opt's runs.
func NewSuite(opt Options, mode, defaultPolicy, version string, args []string) Suite {
	s := Suite{Schema: SuiteSchema, ToolVersion: version, Args: args, Mode: mode, DefaultPolicy: defaultPolicy,
		Policies: opt.Policies, Seeds: opt.Seeds}
	for _, f := range opt.Fleets {
		s.Fleets = append(s.Fleets, SuiteFleet{Name: f.Name, CacheMatters: f.CacheMatters, SLOMs: ms(f.SLO),
			Requests: f.Workload.Requests, Warmup: f.Workload.Warmup})
	}
	return s
}

// ReportFleets are the suite's fleets as Check and CheckPooled take them.
func (s Suite) ReportFleets() []Fleet {
	var out []Fleet
	for _, f := range s.Fleets {
		out = append(out, Fleet{Name: f.Name, CacheMatters: f.CacheMatters, SLO: msDur(f.SLOMs)})
	}
	return out
}

// RunFile is one run's file in runs/.
type RunFile struct {
	Schema string `json:"schema"`
	// Seq is the run's place in the suite (from 1), the order a report
	// lists runs in.
	Seq    int    `json:"seq"`
	Fleet  string `json:"fleet"`
	Policy string `json:"policy"`
	Seed   uint64 `json:"seed"`
	// Requests is how many scored requests the run was to send.
	Requests     int       `json:"requests"`
	ToolVersion  string    `json:"tool_version,omitempty"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	LoadAvgStart []float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd   []float64 `json:"load_avg_end,omitempty"`
	// Result is the run's summary figures (Result's fields by their Go
	// names; durations in nanoseconds; null for a figure that is not a
	// number, such as the cache hit rate of a simulator fleet).
	Result resultJSON `json:"result"`
	// Scored is every scored request in the order finished: its ID, the
	// client-side TTFT in ms (null when it failed), the HTTP status and,
	// where a stand-in recorded it, the backend-side TTFT in ms, which
	// stand-in served it, its wait for a slot, how late the host made it
	// against the stand-in's latency model, and its cache hit.
	Scored []ScoredJSON `json:"scored"`
}

// ScoredJSON is a Scored in a run file.
type ScoredJSON struct {
	ID            string   `json:"id"`
	TTFTMs        *float64 `json:"ttft_ms"`
	Status        int      `json:"status,omitempty"`
	BackendTTFTMs *float64 `json:"backend_ttft_ms,omitempty"`
	Backend       string   `json:"backend,omitempty"`
	QueuedMs      *float64 `json:"backend_queued_ms,omitempty"`
	LateMs        *float64 `json:"backend_late_ms,omitempty"`
	PromptChars   int      `json:"prompt_chars,omitempty"`
	HitChars      int      `json:"hit_chars,omitempty"`
	Group         string   `json:"group,omitempty"`
}

// nfloat is a float64 that is written null when it is not a finite
// number (JSON has no NaN) and read back as NaN.
type nfloat float64

func (f nfloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', -1, 64), nil
}

func (f *nfloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = nfloat(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*f = nfloat(v)
	return nil
}

// resultJSON is Result with its floats that can be NaN as nfloats (the
// outer fields hide the embedded ones of the same names).
type resultJSON struct {
	resultFields
	Attainment, Goodput, HitRate          nfloat
	AdmittedAttainment, BackendAttainment nfloat
	MAPE                                  map[string]nfloat `json:",omitempty"`
}

type resultFields Result

func toJSON(r Result) resultJSON {
	out := resultJSON{resultFields: resultFields(r), Attainment: nfloat(r.Attainment), Goodput: nfloat(r.Goodput),
		HitRate: nfloat(r.HitRate), AdmittedAttainment: nfloat(r.AdmittedAttainment), BackendAttainment: nfloat(r.BackendAttainment)}
	out.resultFields.Requests = nil
	if r.MAPE != nil {
		out.MAPE = map[string]nfloat{}
		for k, v := range r.MAPE {
			out.MAPE[k] = nfloat(v)
		}
	}
	return out
}

func (j resultJSON) result() Result {
	r := Result(j.resultFields)
	r.Attainment, r.Goodput, r.HitRate = float64(j.Attainment), float64(j.Goodput), float64(j.HitRate)
	r.AdmittedAttainment, r.BackendAttainment = float64(j.AdmittedAttainment), float64(j.BackendAttainment)
	r.MAPE = nil
	if j.MAPE != nil {
		r.MAPE = map[string]float64{}
		for k, v := range j.MAPE {
			r.MAPE[k] = float64(v)
		}
	}
	return r
}

func msPtr(d time.Duration) *float64 {
	if d <= 0 {
		return nil
	}
	v := float64(d) / float64(time.Millisecond)
	return &v
}

func durOf(p *float64) time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(math.Round(*p * float64(time.Millisecond)))
}

// RunMeta is what a run file records beside the result.
type RunMeta struct {
	Requests           int
	Started, Ended     time.Time
	LoadStart, LoadEnd []float64
}

// NewRunFile is r as a run file.
func NewRunFile(seq int, version string, r Result, m RunMeta) RunFile {
	f := RunFile{Schema: RunSchema, Seq: seq, Fleet: r.Fleet, Policy: r.Policy, Seed: r.Seed, Requests: m.Requests,
		ToolVersion: version, Started: m.Started, Finished: m.Ended, LoadAvgStart: m.LoadStart, LoadAvgEnd: m.LoadEnd,
		Result: toJSON(r), Scored: make([]ScoredJSON, 0, len(r.Requests))}
	for _, q := range r.Requests {
		sj := ScoredJSON{ID: q.ID, TTFTMs: msPtr(q.TTFT), Status: q.Status, BackendTTFTMs: msPtr(q.BackendTTFT),
			Backend: q.Backend, PromptChars: q.PromptChars, HitChars: q.HitChars, Group: q.Group}
		if q.Backend != "" {
			sj.QueuedMs, sj.LateMs = msPtr(q.BackendQueued), msPtr(q.BackendLate)
		}
		f.Scored = append(f.Scored, sj)
	}
	return f
}

// ResultOf is the run's Result with its requests.
func (f RunFile) ResultOf() Result {
	r := f.Result.result()
	r.Requests = nil
	for _, q := range f.Scored {
		r.Requests = append(r.Requests, Scored{ID: q.ID, TTFT: durOf(q.TTFTMs), Status: q.Status, BackendTTFT: durOf(q.BackendTTFTMs),
			Backend: q.Backend, BackendQueued: durOf(q.QueuedMs), BackendLate: durOf(q.LateMs), PromptChars: q.PromptChars, HitChars: q.HitChars, Group: q.Group})
	}
	return r
}

// Store writes a suite's results directory as the suite runs.
type Store struct {
	dir     string
	mu      sync.Mutex
	suite   Suite
	seq     int
	version string
}

// CreateStore makes dir with s as its suite.json. A directory that holds a
// suite already is refused: an earlier suite is never overwritten.
func CreateStore(dir string, s Suite) (*Store, error) {
	p := filepath.Join(dir, SuiteFile)
	if _, err := os.Stat(p); err == nil {
		return nil, fmt.Errorf("%s holds a suite already (%s); choose another directory", dir, SuiteFile)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checking %s: %w", p, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, RunsDir), 0o755); err != nil {
		return nil, fmt.Errorf("creating results directory: %w", err)
	}
	s.Schema, s.Status = SuiteSchema, "running"
	if s.Started.IsZero() {
		s.Started = time.Now()
	}
	if s.LoadAvgStart == nil {
		s.LoadAvgStart = LoadAvg()
	}
	if err := record.WriteJSON(p, s); err != nil {
		return nil, err
	}
	return &Store{dir: dir, suite: s, version: s.ToolVersion}, nil
}

// ResumeStore reopens dir, a suite that stopped part way, to run what it
// lacks. s must ask for the same suite as the one there (mode, fleets
// with their workloads and SLOs, policies, seeds); a difference is an
// error naming it, since runs of two suites pooled would be neither. It
// returns the store, numbering new runs after those on disk, and the
// results on disk, with a warning for each run file that cannot be read
// (its run is run again).
func ResumeStore(dir string, s Suite) (*Store, []Result, []error, error) {
	old, err := readSuite(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := sameSuite(old, s); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", filepath.Join(dir, SuiteFile), err)
	}
	files, warns, err := readRuns(dir)
	if err != nil {
		return nil, nil, warns, err
	}
	st := &Store{dir: dir, suite: old, version: s.ToolVersion}
	for _, f := range files {
		st.seq = max(st.seq, f.Seq)
	}
	files = inPlanOrder(old, files)
	rs := make([]Result, len(files))
	for i, f := range files {
		rs[i] = f.ResultOf()
	}
	st.suite.Status, st.suite.Finished, st.suite.LoadAvgEnd = "running", nil, nil
	st.suite.Resumed = append(st.suite.Resumed, time.Now())
	if err := record.WriteJSON(filepath.Join(dir, SuiteFile), st.suite); err != nil {
		return nil, nil, warns, err
	}
	return st, rs, warns, nil
}

// sameSuite says how b asks for another suite than a, or nil.
func sameSuite(a, b Suite) error {
	if a.Mode != b.Mode {
		return fmt.Errorf("is a %s suite, not %s", a.Mode, b.Mode)
	}
	if !slices.Equal(a.Policies, b.Policies) {
		return fmt.Errorf("has policies %s, not %s", strings.Join(a.Policies, ","), strings.Join(b.Policies, ","))
	}
	if !slices.Equal(a.Seeds, b.Seeds) {
		return fmt.Errorf("has seeds %v, not %v", a.Seeds, b.Seeds)
	}
	names := func(fs []SuiteFleet) string {
		var n []string
		for _, f := range fs {
			n = append(n, f.Name)
		}
		return strings.Join(n, ",")
	}
	if !slices.Equal(a.Fleets, b.Fleets) {
		if names(a.Fleets) != names(b.Fleets) {
			return fmt.Errorf("has fleets %s, not %s", names(a.Fleets), names(b.Fleets))
		}
		for i := range a.Fleets {
			if a.Fleets[i] != b.Fleets[i] {
				return fmt.Errorf("fleet %s was %+v, now %+v", a.Fleets[i].Name, a.Fleets[i], b.Fleets[i])
			}
		}
	}
	return nil
}

// Suite is the suite.json the store writes.
func (st *Store) Suite() Suite {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.suite
}

// Dir is the results directory.
func (st *Store) Dir() string { return st.dir }

// WriteRun writes r as the suite's next run file and returns its path.
func (st *Store) WriteRun(r Result, m RunMeta) (string, error) {
	st.mu.Lock()
	st.seq++
	seq := st.seq
	st.mu.Unlock()
	name := fmt.Sprintf("%04d-%s-%s-seed%d.json", seq, safeName(r.Fleet), safeName(r.Policy), r.Seed)
	p := filepath.Join(st.dir, RunsDir, name)
	if err := record.WriteJSON(p, NewRunFile(seq, st.version, r, m)); err != nil {
		return "", fmt.Errorf("storing run: %w", err)
	}
	return p, nil
}

// Finish rewrites suite.json with the end: "complete" when stopped is
// nil, else what stopped the suite.
func (st *Store) Finish(stopped error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	st.suite.Finished, st.suite.LoadAvgEnd = &now, LoadAvg()
	st.suite.Status = "complete"
	if stopped != nil {
		st.suite.Status = "stopped: " + stopped.Error()
	}
	return record.WriteJSON(filepath.Join(st.dir, SuiteFile), st.suite)
}

// safeName keeps a policy such as "epp:slo-predictive+reject" a plain
// file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '+', r == '.':
			return r
		}
		return '_'
	}, s)
}

// LoadAvg is /proc/loadavg's 1, 5 and 15-minute load averages (nil where
// there is none): every run records the machine's load, which moves
// P99s on a shared machine.
func LoadAvg() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	fs := strings.Fields(string(b))
	if len(fs) < 3 {
		return nil
	}
	out := make([]float64, 3)
	for i := range out {
		if out[i], err = strconv.ParseFloat(fs[i], 64); err != nil {
			return nil
		}
	}
	return out
}

// ReadDir reads a results directory: its suite and its runs' results in
// the order the suite runs them (inPlanOrder). A missing or malformed suite.json, or a directory without a
// readable run, is an error; a run file that cannot be read is left out
// with a warning naming it, so that the rest still report.
func ReadDir(dir string) (Suite, []Result, []error, error) {
	s, err := readSuite(dir)
	if err != nil {
		return s, nil, nil, err
	}
	files, warns, err := readRuns(dir)
	if err != nil {
		return s, nil, warns, err
	}
	files = inPlanOrder(s, files)
	if len(files) == 0 {
		return s, nil, warns, fmt.Errorf("%s: no readable run file", filepath.Join(dir, RunsDir))
	}
	rs := make([]Result, len(files))
	for i, f := range files {
		rs[i] = f.ResultOf()
	}
	return s, rs, warns, nil
}

// readSuite reads dir's suite.json.
func readSuite(dir string) (Suite, error) {
	var s Suite
	if err := record.ReadJSON(filepath.Join(dir, SuiteFile), &s); err != nil {
		return s, fmt.Errorf("reading live-eval results: %w", err)
	}
	if s.Schema != SuiteSchema {
		return s, fmt.Errorf("%s: schema %q, want %q", filepath.Join(dir, SuiteFile), s.Schema, SuiteSchema)
	}
	return s, nil
}

// readRuns reads dir's run files in run order, with a warning for each
// that cannot be read.
func readRuns(dir string) ([]RunFile, []error, error) {
	names, err := filepath.Glob(filepath.Join(dir, RunsDir, "*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("listing runs: %w", err)
	}
	var warns []error
	var files []RunFile
	for _, p := range names {
		var f RunFile
		if err := record.ReadJSON(p, &f); err != nil {
			warns = append(warns, err)
			continue
		}
		if f.Schema != RunSchema {
			warns = append(warns, fmt.Errorf("%s: schema %q, want %q", p, f.Schema, RunSchema))
			continue
		}
		files = append(files, f)
	}
	slices.SortStableFunc(files, func(a, b RunFile) int { return a.Seq - b.Seq })
	return files, warns, nil
}

// inPlanOrder puts run files (in run order) in the order the suite runs
// them, fleet by fleet, seed by seed, policy by policy, as Run returns
// its results, so that a resumed suite's tables, whose missing runs were
// made last, read as if it had never stopped; of two files for one run the
// later is kept, and runs the suite does not name follow in run order.
func inPlanOrder(s Suite, files []RunFile) []RunFile {
	pos := map[runKey]int{}
	for fi, f := range s.Fleets {
		for si, seed := range s.Seeds {
			for pi, p := range s.Policies {
				pos[runKey{f.Name, p, seed}] = (fi*len(s.Seeds)+si)*len(s.Policies) + pi
			}
		}
	}
	latest := map[runKey]int{}
	for i, f := range files {
		latest[runKey{f.Fleet, f.Policy, f.Seed}] = i
	}
	var out []RunFile
	for i, f := range files {
		if latest[runKey{f.Fleet, f.Policy, f.Seed}] == i {
			out = append(out, f)
		}
	}
	rank := func(f RunFile) int {
		if p, ok := pos[runKey{f.Fleet, f.Policy, f.Seed}]; ok {
			return p
		}
		return len(pos)
	}
	slices.SortStableFunc(out, func(a, b RunFile) int { return cmp.Compare(rank(a), rank(b)) })
	return out
}

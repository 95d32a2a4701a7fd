package liveeval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ttft-dev/ttft/internal/gguf"
)

// Engines are real engines that a fleet's runs share: started once for
// the fleet (starting an engine and loading its model takes seconds),
// reset before each run so that no run inherits another's caches.
type Engines interface {
	// Reset readies the engines for a run — what the previous run left
	// in them (prompt caches) cleared, the model loaded — and returns
	// their base URLs.
	Reset(ctx context.Context) ([]string, error)
	// HitRate is the share of prompt tokens the engines took from their
	// prompt caches since the last Reset (NaN when they do not say).
	HitRate() float64
	// Diagnose is the end of each engine's log, for error messages.
	Diagnose() string
	Close() error
}

// OllamaInstance is one `ollama serve` of an Ollama fleet.
type OllamaInstance struct {
	// Model is the generated model it serves under the fleet's model
	// name: a larger one stands for slower hardware.
	Model gguf.Config
	// Parallel is OLLAMA_NUM_PARALLEL: requests it serves at once, each
	// on a prompt-cache slot of its own. The slots are an LRU of
	// prompts (OLLAMA_MULTIUSER_CACHE: a request takes the slot holding
	// its longest prefix or the least recently used one, copying over
	// the longest prefix found), so Parallel is also how many prompt
	// prefixes the engine keeps.
	Parallel int
	// Threads is the model's num_thread. One: ggml's threads spin on
	// barriers, and on an oversubscribed machine a descheduled partner
	// thread makes prefill several times slower and erratic
	// (docs/performance.md, "Real engine").
	Threads int
}

// OllamaModel is the model name an Ollama fleet serves.
const OllamaModel = "ttft-synth"

// startOllama starts one engine per instance, in dir, and creates its
// model; on error what was started is stopped.
func startOllama(ctx context.Context, bin, dir string, insts []OllamaInstance) (*ollamaFleet, error) {
	if bin == "" {
		return nil, errors.New("no Ollama binary given (ttft gateway live-eval --ollama PATH, or TTFT_OLLAMA in tests)")
	}
	f := &ollamaFleet{}
	errs := make([]error, len(insts))
	f.engines = make([]*ollamaEngine, len(insts))
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.engines[i], errs[i] = startOllamaEngine(ctx, bin, filepath.Join(dir, fmt.Sprintf("e%d", i)), in)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ollamaFleet is an Ollama fleet's running engines.
type ollamaFleet struct {
	engines []*ollamaEngine
}

// Reset unloads every engine's model and loads it again, in parallel:
// the runner process restarts with empty prompt-cache slots.
func (f *ollamaFleet) Reset(ctx context.Context) ([]string, error) {
	if len(f.engines) == 0 || f.engines[0] == nil {
		return nil, errors.New("ollama fleet closed")
	}
	errs := make([]error, len(f.engines))
	var wg sync.WaitGroup
	for i, e := range f.engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.reset(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	urls := make([]string, len(f.engines))
	for i, e := range f.engines {
		urls[i] = e.url
	}
	return urls, nil
}

func (f *ollamaFleet) HitRate() float64 {
	var used, prompt int64
	for _, e := range f.engines {
		u, p, err := e.cacheUse()
		if err != nil {
			return math.NaN()
		}
		used, prompt = used+u, prompt+p
	}
	if prompt == 0 {
		return math.NaN()
	}
	return float64(used) / float64(prompt)
}

func (f *ollamaFleet) Diagnose() string {
	var b strings.Builder
	for i, e := range f.engines {
		if e != nil {
			fmt.Fprintf(&b, "engine %d (%s) log tail:\n%s\n", i, e.url, e.logTail(3000))
		}
	}
	return b.String()
}

func (f *ollamaFleet) Close() error {
	for i, e := range f.engines {
		if e != nil {
			e.stop()
			f.engines[i] = nil
		}
	}
	return nil
}

// ollamaEngine is one running `ollama serve` with its model created.
type ollamaEngine struct {
	bin, dir, url, log string
	cmd                *exec.Cmd
	done               chan struct{}
	// logOff is the log's size at the last reset: what follows is the
	// current run's.
	logOff int64
}

func startOllamaEngine(ctx context.Context, bin, dir string, in OllamaInstance) (*ollamaEngine, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ollama engine dir: %w", err)
	}
	// The port is picked by binding and closing it, so another process
	// may take it before ollama binds: try a fresh one then.
	var e *ollamaEngine
	for attempt := 1; ; attempt++ {
		var taken bool
		var err error
		e, taken, err = startOllamaServe(ctx, bin, dir, in, attempt)
		if err == nil {
			break
		}
		if !taken || attempt == 3 {
			return nil, err
		}
	}
	if err := e.create(ctx, in); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

// startOllamaServe starts the server and waits until it answers; taken
// reports a port lost to another process.
func startOllamaServe(ctx context.Context, bin, dir string, in OllamaInstance, attempt int) (_ *ollamaEngine, taken bool, _ error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, false, fmt.Errorf("picking a port for ollama: %w", err)
	}
	host := l.Addr().String()
	l.Close()
	e := &ollamaEngine{bin: bin, dir: dir, url: "http://" + host, log: filepath.Join(dir, fmt.Sprintf("serve.%d.log", attempt)), done: make(chan struct{})}
	logf, err := os.Create(e.log)
	if err != nil {
		return nil, false, fmt.Errorf("ollama log: %w", err)
	}
	e.cmd = exec.Command(bin, "serve")
	e.cmd.Env = ollamaEnv(dir, host, in)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	// Own process group: the server starts runner subprocesses, which
	// must die with it.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		logf.Close()
		return nil, false, fmt.Errorf("starting %s serve: %w", bin, err)
	}
	go func() { e.cmd.Wait(); logf.Close(); close(e.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if e.get(ctx, "/api/version") == nil {
			return e, false, nil
		}
		select {
		case <-e.done:
			tail := e.logTail(2000)
			return nil, strings.Contains(tail, "address already in use"), fmt.Errorf("ollama serve exited early:\n%s", tail)
		case <-ctx.Done():
			e.stop()
			return nil, false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.stop()
			return nil, false, fmt.Errorf("ollama serve did not answer on %s within 60 s:\n%s", e.url, e.logTail(2000))
		}
	}
}

// ollamaEnv is the server's environment: its own home and model store,
// the instance's slots as an LRU prompt cache, one model kept loaded, and
// debug logging, whose "loading cache slot" lines say how much of each
// prompt came from the cache (HitRate).
func ollamaEnv(dir, host string, in OllamaInstance) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+dir,
		"OLLAMA_HOST="+host,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"),
		"OLLAMA_NUM_PARALLEL="+strconv.Itoa(max(in.Parallel, 1)),
		"OLLAMA_MULTIUSER_CACHE=1",
		"OLLAMA_MAX_LOADED_MODELS=1",
		"OLLAMA_MAX_QUEUE=1024",
		"OLLAMA_KEEP_ALIVE=1h",
		"OLLAMA_NOPRUNE=1",
		"OLLAMA_DEBUG=1",
	)
}

// create writes the instance's generated model and its Modelfile and runs
// `ollama create`.
func (e *ollamaEngine) create(ctx context.Context, in OllamaInstance) error {
	path := filepath.Join(e.dir, "model.gguf")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the model file: %w", err)
	}
	_, err = gguf.Synth(f, in.Model)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("synthesizing %s: %w", path, err)
	}
	mf := filepath.Join(e.dir, "Modelfile")
	text := gguf.Modelfile(path, in.Model) + fmt.Sprintf("PARAMETER num_thread %d\n", max(in.Threads, 1))
	if err := os.WriteFile(mf, []byte(text), 0o644); err != nil {
		return fmt.Errorf("writing the Modelfile: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, e.bin, "create", OllamaModel, "-f", mf)
	host := strings.TrimPrefix(e.url, "http://")
	cmd.Env = ollamaEnv(e.dir, host, in)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ollama create: %w\n%s\nserver log:\n%s", err, out, e.logTail(2000))
	}
	return nil
}

// reset unloads the model (its runner process exits, taking the prompt
// cache with it), waits until it is gone and loads it again. A load is
// tried up to three times: Ollama starts the runner on a port it found
// free, which another process can take first ("bind: address already in
// use", seen once in about a hundred resets on the shared machine).
func (e *ollamaEngine) reset(ctx context.Context) error {
	var err error
	for range 3 {
		if err = e.unload(ctx); err != nil {
			return err
		}
		off := e.logOff
		if st, serr := os.Stat(e.log); serr == nil {
			off = st.Size()
		}
		if err = e.generate(ctx, map[string]any{"model": OllamaModel, "keep_alive": "1h"}); err == nil {
			e.logOff = off
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("loading on %s: %w\n%s", e.url, err, e.logTail(2000))
}

// unload asks for the model to be unloaded and waits until no model is.
func (e *ollamaEngine) unload(ctx context.Context) error {
	if err := e.generate(ctx, map[string]any{"model": OllamaModel, "keep_alive": 0}); err != nil {
		return fmt.Errorf("unloading on %s: %w", e.url, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ps struct {
			Models []json.RawMessage `json:"models"`
		}
		if err := e.getJSON(ctx, "/api/ps", &ps); err != nil {
			return fmt.Errorf("%s: %w", e.url, err)
		}
		if len(ps.Models) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: model still loaded 30 s after unloading", e.url)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cacheUse sums the runner's "loading cache slot" debug lines since the
// last reset: prompt tokens taken from the cache (used) and in all.
func (e *ollamaEngine) cacheUse() (used, prompt int64, err error) {
	f, err := os.Open(e.log)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(e.logOff, io.SeekStart); err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="loading cache slot"`) {
			continue
		}
		u, okU := logField(line, "used")
		p, okP := logField(line, "prompt")
		if okU && okP {
			used, prompt = used+u, prompt+p
		}
	}
	return used, prompt, sc.Err()
}

// logField reads an integer key=value from a slog text line.
func logField(line, key string) (int64, bool) {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return 0, false
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

func (e *ollamaEngine) generate(ctx context.Context, body map[string]any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/api/generate", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(req, nil)
}

func (e *ollamaEngine) get(ctx context.Context, path string) error { return e.getJSON(ctx, path, nil) }

func (e *ollamaEngine) getJSON(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		return err
	}
	return do(req, out)
}

func do(req *http.Request, out any) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decoding %s: %w", req.URL.Path, err)
		}
	}
	return nil
}

func (e *ollamaEngine) stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	pgid := e.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-e.done
	}
	// Runners that outlived the server share its process group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func (e *ollamaEngine) logTail(n int64) string {
	f, err := os.Open(e.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// startEngines starts a fleet's real engines (its Ollama instances) in a
// temporary directory; stop stops them and removes it. A fleet without
// any comes back as it is.
func startEngines(ctx context.Context, f Fleet, ollama string) (_ Fleet, stop func(), _ error) {
	if len(f.Ollama) == 0 || f.Engines != nil {
		return f, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "ttft-ollama-")
	if err != nil {
		return f, nil, fmt.Errorf("ollama fleet dir: %w", err)
	}
	e, err := startOllama(ctx, ollama, dir, f.Ollama)
	if err != nil {
		os.RemoveAll(dir)
		return f, nil, err
	}
	f.Engines = e
	return f, func() { e.Close(); os.RemoveAll(dir) }, nil
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// RunOptions are Run's: the gateway's Options, and what Run adds to them.
type RunOptions struct {
	Options
	// Config is the configuration to start with (nil: cfgPath's). The
	// command line passes cfgPath's, or its --backend flags', with its
	// flags applied; reloads read cfgPath as it is.
	Config *Config
	// Reloaders get every configuration a reload applies, after the
	// gateway took it, in order.
	Reloaders []Reloader
	// Listening, if set, is called once the gateway listens (on addr),
	// before it serves.
	Listening func(addr net.Addr)
}

// StartError is a failure of Run before it serves: building the gateway
// (its configuration, its options) or listening. Other errors come from
// serving.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Run builds a gateway, serves it on its configuration's listen address
// until ctx ends (then shuts it down gracefully and closes it), and keeps
// its configuration current: with a cfgPath, the file is reloaded when it
// changes (WatchFile) and on SIGHUP, and each reload goes to the gateway
// and then to opts.Reloaders, as Prometheus reloads its configuration. A
// file that does not load, or that the gateway refuses, is logged and the
// running configuration stays.
func Run(ctx context.Context, cfgPath string, opts RunOptions) error {
	cfg := opts.Config
	if cfg == nil {
		if cfgPath == "" {
			return &StartError{errors.New("no configuration (a file or RunOptions.Config)")}
		}
		c, err := LoadConfig(cfgPath, opts.Getenv)
		if err != nil {
			return &StartError{err}
		}
		cfg = c
	}
	g, err := New(*cfg, opts.Options)
	if err != nil {
		return &StartError{err}
	}
	defer g.Close()
	if cfgPath != "" {
		stop := g.reloadOn(ctx, cfgPath, opts.Reloaders)
		defer stop()
	}
	c := g.Config()
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return &StartError{fmt.Errorf("listening on %s: %w", c.Listen, err)}
	}
	g.log.Info("gateway listening", "addr", ln.Addr().String(), "policy", c.Policy, "backends", len(c.Backends))
	if opts.Listening != nil {
		opts.Listening(ln.Addr())
	}
	return g.Serve(ctx, ln)
}

// reloadOn reloads path, for the gateway and then rls, whenever the file
// changes or the process gets SIGHUP, one reload at a time, until ctx ends
// or stop is called (which waits for a reload in progress).
func (g *Gateway) reloadOn(ctx context.Context, path string, rls []Reloader) (stop func()) {
	all := append([]Reloader{{Name: "gateway", Apply: g.ApplyConfig}}, rls...)
	var mu sync.Mutex
	reload := func() {
		mu.Lock()
		defer mu.Unlock()
		reloadFile(path, g.opts.Getenv, g.log, all)
	}
	ctx, cancel := context.WithCancel(ctx)
	// Registered before Run listens, so that a SIGHUP is never the
	// process's end.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		watchFile(ctx, path, g.log, reload)
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload()
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}

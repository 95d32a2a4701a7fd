package gateway

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reloader is a component that takes each configuration a reload reads,
// as Prometheus's reloaders call their ApplyConfig: Run hands a new file
// to the gateway first (Gateway.ApplyConfig), then to the embedder's
// (RunOptions.Reloaders), in order.
type Reloader struct {
	Name string
	// Apply takes the configuration in force from now on; an error keeps
	// the component's previous one.
	Apply func(*Config) error
}

// ApplyConfig is Reload as a Reloader takes it.
func (g *Gateway) ApplyConfig(cfg *Config) error { return g.Reload(*cfg) }

// ReloadFile re-reads path and applies it; on error the running
// configuration stays in force and the error is returned (and logged).
func (g *Gateway) ReloadFile(path string) error {
	return reloadFile(path, g.opts.Getenv, g.log, []Reloader{{Name: "gateway", Apply: g.ApplyConfig}})
}

// reloadFile reads path and hands it to each reloader in turn. When the
// file cannot be read, or the first reloader (the gateway) refuses it,
// nothing changes; a later reloader's error is logged and returned, the
// others still get the configuration.
func reloadFile(path string, getenv func(string) string, log *slog.Logger, rls []Reloader) error {
	cfg, err := LoadConfig(path, getenv)
	if err == nil && len(rls) > 0 {
		err = rls[0].Apply(cfg)
	}
	if err != nil {
		log.Error("config reload failed; keeping the running configuration", "error", err.Error())
		return err
	}
	var first error
	for _, rl := range rls[1:] {
		if err := rl.Apply(cfg); err != nil {
			log.Error("config reload failed", "reloader", rl.Name, "error", err.Error())
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return first
	}
	log.Info("config reloaded", "file", path)
	return nil
}

// WatchFile reloads path whenever it changes, until ctx ends. It watches the
// directory so that editors' rename-and-replace saves and Kubernetes
// ConfigMap symlink swaps are seen too; bursts of events are coalesced.
func (g *Gateway) WatchFile(ctx context.Context, path string) error {
	return watchFile(ctx, path, g.log, func() { g.ReloadFile(path) })
}

// watchFile calls reload whenever path changes, until ctx ends (see
// WatchFile).
func watchFile(ctx context.Context, path string, log *slog.Logger, reload func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		return err
	}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if filepath.Clean(ev.Name) == abs || filepath.Base(ev.Name) == "..data" {
				timer = time.After(100 * time.Millisecond)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching config", "error", err.Error())
		case <-timer:
			timer = nil
			reload()
		}
	}
}

package gateway

import (
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ReloadFile re-reads path and applies it; on error the running
// configuration stays in force and the error is returned (and logged).
func (g *Gateway) ReloadFile(path string) error {
	cfg, err := LoadConfig(path, g.opts.Getenv)
	if err == nil {
		err = g.Reload(*cfg)
	}
	if err != nil {
		g.log.Error("config reload failed; keeping the running configuration", "error", err.Error())
		return err
	}
	g.log.Info("config reloaded", "file", path)
	return nil
}

// WatchFile reloads path whenever it changes, until ctx ends. It watches the
// directory so that editors' rename-and-replace saves and Kubernetes
// ConfigMap symlink swaps are seen too; bursts of events are coalesced.
func (g *Gateway) WatchFile(ctx context.Context, path string) error {
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
			g.log.Warn("watching config", "error", err.Error())
		case <-timer:
			timer = nil
			g.ReloadFile(path)
		}
	}
}

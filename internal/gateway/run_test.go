package gateway

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Run serves a configuration file on its listen address, reloads it when
// it changes (the gateway first, then the embedder's reloaders; a bad file
// keeps the running configuration) and stops when its context ends.
func TestRunServesReloadsAndStops(t *testing.T) {
	a := newFakeBackend(t, "a", 3)
	b := newFakeBackend(t, "b", 3)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(url string) string {
		return "listen: 127.0.0.1:0\npolicy: round-robin\nhealth:\n  disabled: true\nbackends:\n  - name: x\n    url: " + url + "\n"
	}
	write(conf(a.URL()))
	var mu sync.Mutex
	var applied []string
	addr := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, path, RunOptions{
			Reloaders: []Reloader{{Name: "test", Apply: func(c *Config) error {
				mu.Lock()
				defer mu.Unlock()
				applied = append(applied, c.Backends[0].URL)
				return nil
			}}},
			Listening: func(a net.Addr) { addr <- a },
		})
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a.String()
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if res := readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false); res.status != 200 || res.backend != "x" {
		t.Fatalf("status %d backend %q", res.status, res.backend)
	}
	write("backends: [\n") // a bad file: logged, nothing changes
	time.Sleep(300 * time.Millisecond)
	write(conf(b.URL()))
	for end := time.Now().Add(5 * time.Second); b.hits.Load() == 0; time.Sleep(30 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("config change not picked up")
		}
		readStream(t, post(t, url, "/v1/chat/completions", chatBody("m", true, "x"), nil), false)
	}
	mu.Lock()
	got := slices.Clone(applied)
	mu.Unlock()
	if len(got) == 0 || slices.ContainsFunc(got, func(u string) bool { return u != b.URL() }) {
		t.Fatalf("reloader got %q, want only %q (the bad file is the gateway's to refuse)", got, b.URL())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Failures before serving are StartErrors (the command line's usage
// errors); the configuration given in RunOptions is the one started with.
func TestRunStartErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg, err := FromBackendURLs([]string{"http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = ln.Addr().String() // taken
	cfg.Health.Disabled = true
	var se *StartError
	if err := Run(context.Background(), "", RunOptions{Config: cfg}); !errors.As(err, &se) || !strings.Contains(err.Error(), "listening on "+cfg.Listen) {
		t.Fatalf("listening on a taken address: %v", err)
	}
	if err := Run(context.Background(), "", RunOptions{Config: cfg, Options: Options{HTTPServer: "caddy"}}); !errors.As(err, &se) || !strings.Contains(err.Error(), `unknown HTTP server "caddy"`) {
		t.Fatalf("unknown HTTP server: %v", err)
	}
	if err := Run(context.Background(), filepath.Join(t.TempDir(), "missing.yaml"), RunOptions{}); !errors.As(err, &se) {
		t.Fatalf("missing file: %v", err)
	}
}

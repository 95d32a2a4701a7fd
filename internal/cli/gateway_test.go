package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/testutil"
)

func TestGatewayValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("backends:\n  - name: a\n    url: http://127.0.0.1:8001\n    models: [m]\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("backends:\n  - name: a\n    url: http://127.0.0.1:8001\n    models: [m]\n  - name: b\n    url: not a url\n"), 0o644)
	if code, out, errs := runCLI(t, "gateway", "validate", good); code != 0 || !strings.Contains(out, "ok (1 backends") {
		t.Fatalf("good config: exit %d %s %s", code, out, errs)
	}
	code, _, errs := runCLI(t, "gateway", "validate", bad)
	if code != ExitUsage || !strings.Contains(errs, "bad.yaml:6") || !strings.Contains(errs, "backends[1].url") {
		t.Fatalf("bad config: exit %d, stderr %q; want file:line and field", code, errs)
	}
}

func TestGatewayHTTPServerFlag(t *testing.T) {
	code, _, errs := runCLI(t, "gateway", "--backend", "http://127.0.0.1:1", "--http-server", "caddy")
	if code != ExitUsage || !strings.Contains(errs, `unknown HTTP server "caddy"`) {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

// TestBenchThroughGateway runs the whole chain over real sockets: ttft bench
// → ttft gateway → two simulator replicas.
func TestBenchThroughGateway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := serve.DefaultConfig()
	fleet, err := serve.StartFleet(ctx, []serve.Config{cfg, cfg})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	var gwOut, gwErr bytes.Buffer
	gwDone := make(chan int, 1)
	recDir := filepath.Join(t.TempDir(), "gw-run")
	go func() {
		gwDone <- Main(ctx, Env{Args: []string{"gateway", "--listen", addr, "--backend", fleet[0].URL(), "--backend", fleet[1].URL(), "--no-access-log", "--records", recDir},
			Stdout: &gwOut, Stderr: &gwErr, Getenv: func(string) string { return "" }})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not come up: %v\n%s", err, gwErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := t.TempDir()
	code, stdout, stderr := runCLI(t, "bench", "--target", "http://"+addr, "--model", fleet[0].ModelName(), "-c", "4", "-n", "16",
		"--max-tokens", "16", "--out", out, "--no-progress", "--no-store", "--no-probe") // the gateway records below count the runs' requests only
	if code != 0 {
		t.Fatalf("bench through the gateway: exit %d\n%s\n%s\ngateway: %s", code, stdout, stderr, gwErr.String())
	}
	recs, err := record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 16 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if !r.OK() || r.OutputEvents != 16 || r.OutputTokensUsage != 16 {
			t.Fatalf("record %d: %s %s events %d usage %d", r.Index, r.ErrorClass, r.Error, r.OutputEvents, r.OutputTokensUsage)
		}
	}
	// An Anthropic client through the gateway to the simulator, which
	// speaks only the OpenAI API: translated both ways, usage included.
	out = t.TempDir()
	code, stdout, stderr = runCLI(t, "bench", "--target", "http://"+addr, "--api", "anthropic", "--model", fleet[0].ModelName(), "-c", "4", "-n", "8",
		"--max-tokens", "16", "--out", out, "--no-progress", "--no-store", "--no-probe") // the gateway records below count the runs' requests only
	if code != 0 {
		t.Fatalf("anthropic bench through the gateway: exit %d\n%s\n%s\ngateway: %s", code, stdout, stderr, gwErr.String())
	}
	recs, err = record.ReadJSONL(filepath.Join(out, "requests.jsonl"))
	if err != nil || len(recs) != 8 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	for _, r := range recs {
		if !r.OK() || r.OutputEvents != 16 || r.OutputTokensUsage != 16 || r.TTFTMs <= 0 {
			t.Fatalf("anthropic record %d: %s %s events %d usage %d", r.Index, r.ErrorClass, r.Error, r.OutputEvents, r.OutputTokensUsage)
		}
	}
	cancel()
	select {
	case <-gwDone:
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not stop on cancel")
	}
	// --records: every request through the gateway, as a run directory
	// that ttft report reads.
	grecs, err := record.ReadJSONL(filepath.Join(recDir, "requests.jsonl"))
	if err != nil || len(grecs) != 24 {
		t.Fatalf("gateway records: %d, %v", len(grecs), err)
	}
	apis := map[string]int{}
	for _, r := range grecs {
		if !r.OK() || r.Source != "gateway" || r.TTFTMs <= 0 || r.OutputTokensUsage != 16 || r.OutputEvents != 16 || len(r.ITLMs) != 15 || r.Backend == "" {
			t.Fatalf("gateway record %d: %+v", r.Index, r)
		}
		apis[r.API]++
	}
	if apis["openai"] != 16 || apis["anthropic"] != 8 {
		t.Fatalf("records by API: %v", apis)
	}
	code, stdout, stderr = runCLI(t, "report", recDir, "--json", filepath.Join(t.TempDir(), "charts.json"))
	if code != 0 {
		t.Fatalf("ttft report on the gateway's records: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestGatewayAccessLogAndProfile: the buffered access log reaches stderr
// (at the latest on shutdown), one JSON line per request, and --cpu-profile
// leaves a profile behind when the gateway stops.
func TestGatewayAccessLogAndProfile(t *testing.T) {
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	})}
	go backend.Serve(bl)
	defer backend.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	prof := filepath.Join(t.TempDir(), "gw.pprof")
	var gwErr testutil.SyncBuffer
	gwDone := make(chan int, 1)
	go func() {
		gwDone <- Main(ctx, Env{Args: []string{"gateway", "--listen", addr, "--backend", "http://" + bl.Addr().String(), "--cpu-profile", prof},
			Stdout: io.Discard, Stderr: &gwErr, Getenv: func(string) string { return "" }})
	}()
	deadline := time.Now().Add(10 * time.Second)
	var resp *http.Response
	for {
		resp, err = http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"secret prompt"}]}`))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not come up: %v\n%s", err, gwErr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"content":"hi"`) {
		t.Fatalf("through the gateway: %d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case code := <-gwDone:
		if code != 0 {
			t.Fatalf("gateway exit %d: %s", code, gwErr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not stop on cancel")
	}
	var line string
	for _, l := range strings.Split(gwErr.String(), "\n") {
		if strings.Contains(l, `"msg":"request"`) {
			line = l
		}
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["status"] != float64(200) || rec["backend"] == "" || rec["model"] != "m" {
		t.Fatalf("access log line %q (%v); stderr:\n%s", line, err, gwErr.String())
	}
	if strings.Contains(gwErr.String(), "secret prompt") {
		t.Fatal("the access log contains the prompt")
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Fatalf("--cpu-profile: %v", err)
	}
}

package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// TestGatewayRecordsOnFullDisk: ttft gateway --records on a file system
// that fills up keeps serving every request (never a hang), keeps the
// records written before as whole lines, and at shutdown exits non-zero
// with an error naming the file, the cause, what was kept and how many
// records were not written.
func TestGatewayRecordsOnFullDisk(t *testing.T) {
	dir := filepath.Join(testutil.TinyFS(t, 64<<10), "gw-run")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := serve.StartFleet(ctx, []serve.Config{serve.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var stdout, stderr testutil.SyncBuffer
	gwCtx, stopGW := context.WithCancel(ctx)
	gwDone := make(chan int, 1)
	go func() {
		gwDone <- Main(gwCtx, Env{Args: []string{"gateway", "--listen", addr, "--backend", fleet[0].URL(), "--no-access-log", "--records", dir},
			Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/v1/models"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not come up\n%s", stderr.String())
		}
	}
	// Each record is ≈1 KiB: 300 overflow the 64 KiB file system.
	const n = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				body := fmt.Sprintf(`{"model":"llama-3.1-8b","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"request %d"}]}`, i)
				resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					ok = ok && strings.Contains(string(b), "[DONE]")
				}
				if !ok {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of %d requests failed while the records' disk was full", failed, n)
	}
	stopGW()
	var code int
	select {
	case code = <-gwDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway did not stop within 30 s of its context ending\n%s", stderr.String())
	}
	jsonl := filepath.Join(dir, "requests.jsonl")
	m := regexp.MustCompile(regexp.QuoteMeta(jsonl) + `: no space left on device; kept: ` + regexp.QuoteMeta(jsonl) + ` holds the first (\d+) records, whole; (\d+) records not written`).FindStringSubmatch(stderr.String())
	if code != ExitFail || m == nil {
		t.Fatalf("exit %d (want %d) with an error naming the file, the cause, what was kept and lost:\n%s", code, ExitFail, stderr.String())
	}
	kept, _ := strconv.Atoi(m[1])
	lost, _ := strconv.Atoi(m[2])
	data, err := os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Errorf("requests.jsonl ends in a half-written line (%d bytes)", len(data))
	}
	recs, err := record.ReadJSONL(jsonl)
	if err != nil || len(recs) != kept || kept == 0 || kept+lost != n {
		t.Errorf("requests.jsonl: %d whole records (%v); the message says %d kept and %d lost of %d", len(recs), err, kept, lost, n)
	}
}

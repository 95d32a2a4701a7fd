package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ttft-dev/ttft/internal/sim/serve"
)

func TestGatewayEPPFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no endpoints", nil, "no endpoints"},
		{"host name", []string{"--endpoint", "pod.local:8000"}, "not an IP address"},
		{"no port", []string{"--endpoint", "127.0.0.1"}, "missing port"},
		{"policy", []string{"--endpoint", "127.0.0.1:8000", "--policy", "best"}, "--policy"},
		{"class", []string{"--endpoint", "127.0.0.1:8000", "--sheddable-class", "gold"}, "sheddable class"},
		{"kv threshold", []string{"--endpoint", "127.0.0.1:8000", "--kv-threshold", "2"}, "--kv-threshold"},
		{"both sources", []string{"--endpoint", "127.0.0.1:8000", "--pool", "p"}, "not both"},
		{"pool without a cluster", []string{"--pool", "p", "--listen", "127.0.0.1:0", "--kubeconfig", "/nonexistent/kubeconfig"}, "Kubernetes credentials"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCLI(t, append([]string{"gateway", "epp"}, c.args...)...)
			if code != ExitUsage || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stderr %q; want usage error with %q", code, errs, c.want)
			}
		})
	}
}

// TestGatewayEPPServes starts the command against a simulator and checks
// it becomes ready (gRPC health), serves its metrics, and stops cleanly.
func TestGatewayEPPServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng, err := serve.Start(ctx, serve.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	free := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	addr, maddr := free(), free()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, Env{Args: []string{"gateway", "epp", "--listen", addr, "--metrics-listen", maddr,
			"--endpoint", strings.TrimPrefix(eng.URL(), "http://"), "--scrape-interval", "20ms"}, Stdout: io.Discard, Stderr: &stderr})
	}()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		ccancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 10 s: %v %v; stderr %s", r, err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("ttft_epp_decision_duration_seconds")) {
		t.Errorf("metrics lack the decision histogram:\n%.500s", body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d; stderr %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("did not stop")
	}
}

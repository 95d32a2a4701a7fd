package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ttft-dev/ttft/internal/gateway/epp"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/testutil"
)

// The InferencePool CRD, as small as the API server accepts: the type's
// fields are checked by the picker's strict decoding, not the server.
const poolCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: inferencepools.inference.networking.k8s.io
  annotations:
    # k8s.io groups need one; "unapproved" is accepted for a test.
    api-approved.kubernetes.io: "unapproved, a test of ttft's endpoint picker"
spec:
  group: inference.networking.k8s.io
  scope: Namespaced
  names: {kind: InferencePool, listKind: InferencePoolList, plural: inferencepools, singular: inferencepool}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

func mustObject(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestDiscoveryAndFailoverOnRealControlPlane runs InferencePool discovery
// and leader election against a real kube-apiserver (etcd, kwok's fake
// node giving pods their loopback IPs and readiness): simulated vLLM
// engines listen on the pods' IPs, the picker finds them through the pool,
// scrapes them and picks them; a terminating pod is drained; two
// electors fail over.
func TestDiscoveryAndFailoverOnRealControlPlane(t *testing.T) {
	k := testutil.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc := &rest.Config{Host: k.URL, BearerToken: k.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, mustObject(t, poolCRD), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "envoy", "inferencepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pool := mustObject(t, string(manifest))
	// The CRD takes a moment to be served.
	for {
		_, err := dyn.Resource(PoolResource).Namespace("default").Create(ctx, pool, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("creating the InferencePool: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	const hold = "ttft.dev/test-hold"
	mkPod := func(name, app string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}, Finalizers: []string{hold}},
			Spec: corev1.PodSpec{NodeName: k.Node, Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkPod("vllm-a", "vllm-llama")
	mkPod("vllm-b", "vllm-llama")
	mkPod("other", "something-else")
	t.Cleanup(func() {
		// Let the held pods go, or the namespace keeps them.
		for _, n := range []string{"vllm-a", "vllm-b", "other"} {
			cs.CoreV1().Pods("default").Patch(context.Background(), n, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		}
	})
	// kwok runs them: Running, Ready, an IP in 127.0.100.0/24.
	ips := map[string]string{}
	for len(ips) < 3 {
		for _, n := range []string{"vllm-a", "vllm-b", "other"} {
			p, err := cs.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
			if err == nil && p.Status.PodIP != "" && podReady(p) {
				ips[n] = p.Status.PodIP
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("pods not running: %v", ips)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The "containers": simulated engines on the pods' IPs.
	for _, n := range []string{"vllm-a", "vllm-b"} {
		cfg := serve.DefaultConfig()
		cfg.Addr = net.JoinHostPort(ips[n], "8000")
		cfg.DefaultMaxTokens = 4
		e, err := serve.Start(ctx, cfg)
		if err != nil {
			t.Skipf("cannot listen on pod IP %s (%v): loopback aliases unavailable", ips[n], err)
		}
		t.Cleanup(func() { e.Close() })
	}
	a, b := net.JoinHostPort(ips["vllm-a"], "8000"), net.JoinHostPort(ips["vllm-b"], "8000")

	s, err := epp.New(epp.Options{ScrapeInterval: 50 * time.Millisecond, DiscoveredEndpoints: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- s.Serve(sctx, ln, time.Second) }()
	d := &Discovery{Client: cs, Dynamic: dyn, Namespace: "default", Pool: "vllm-llama", Picker: s}
	discovered := make(chan error, 1)
	go func() { discovered <- d.Run(sctx) }()
	defer func() {
		scancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
		if err := <-discovered; err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	proc := extprocv3.NewExternalProcessorClient(conn)
	eligible := func() []string {
		var out []string
		for _, x := range []string{a, b} {
			if _, ok, _ := s.Endpoint(x); ok {
				out = append(out, x)
			}
		}
		return out
	}
	waitFor := func(what string, want []string) {
		t.Helper()
		for !slices.Equal(eligible(), want) {
			if ctx.Err() != nil {
				t.Fatalf("%s: eligible %v, want %v", what, eligible(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("discovered and scraped", []string{a, b})
	if !s.Ready() {
		t.Error("not ready after discovery")
	}
	picks := map[string]int{}
	for i := range 10 {
		dest, err := pickOnce(ctx, proc, fmt.Sprintf(`{"model":"llama-3.1-8b","stream":true,"messages":[{"role":"user","content":"q%d"}]}`, i))
		if err != nil {
			t.Fatal(err)
		}
		picks[dest]++
	}
	for dest := range picks {
		if dest != a && dest != b {
			t.Fatalf("picked %s, not a pool pod (picks %v)", dest, picks)
		}
	}
	// vllm-a terminates (held by the finalizer): drained, b takes all.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "vllm-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("vllm-a terminating", []string{b})
	for i := range 5 {
		dest, err := pickOnce(ctx, proc, fmt.Sprintf(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"r%d"}]}`, i))
		if err != nil || dest != b {
			t.Fatalf("while vllm-a terminates: picked %q, %v; want %s", dest, err, b)
		}
	}

	// Leader election on a real Lease: two replicas, one leads, the
	// other takes over when it stops.
	type replica struct {
		flag   leaderFlag
		cancel context.CancelFunc
		done   chan error
	}
	elect := func(id string) *replica {
		r := &replica{done: make(chan error, 1)}
		rctx, rcancel := context.WithCancel(ctx)
		r.cancel = rcancel
		e := &Election{Client: cs, Namespace: "default", Lease: "ttft-epp", Identity: id, Target: &r.flag,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}
		go func() { r.done <- e.Run(rctx) }()
		return r
	}
	r1 := elect("epp-1")
	for !r1.flag.get() {
		if ctx.Err() != nil {
			t.Fatal("epp-1 never led")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r2 := elect("epp-2")
	time.Sleep(2500 * time.Millisecond)
	if r2.flag.get() {
		t.Fatal("two leaders")
	}
	lease, err := cs.CoordinationV1().Leases("default").Get(ctx, "ttft-epp", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "epp-1" {
		t.Fatalf("lease %v, %v; want held by epp-1", lease, err)
	}
	began := time.Now()
	r1.cancel()
	<-r1.done
	for !r2.flag.get() {
		if ctx.Err() != nil {
			t.Fatal("epp-2 never took over")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover on a real API server in %v", time.Since(began).Round(time.Millisecond))
	r2.cancel()
	<-r2.done
}

// pickOnce sends one request's headers and body through the picker and
// returns the destination it names.
func pickOnce(ctx context.Context, proc extprocv3.ExternalProcessorClient, body string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := proc.Process(ctx)
	if err != nil {
		return "", err
	}
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/chat/completions")}, {Key: ":method", RawValue: []byte("POST")}}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: procmodev3.ProcessingMode_FULL_DUPLEX_STREAMED}}); err != nil {
		return "", err
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		return "", err
	}
	r, err := st.Recv()
	if err != nil {
		return "", err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return "", fmt.Errorf("immediate response %d: %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	var dest string
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), epp.DestinationKey) {
			dest = string(h.GetHeader().GetRawValue())
		}
	}
	st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return dest, nil
			}
			return dest, nil // the stream ends with the context
		}
	}
}

package kube

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ttft-dev/ttft/internal/gateway/epp"
)

// These tests run discovery and leader election against client-go's fake
// clients (its object tracker serves list and watch as the API server
// does, without one): no real control plane is needed.

func yamlToJSON(t testing.TB, b []byte) []byte {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestShippedPoolDecodes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "envoy", "inferencepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePool(yamlToJSON(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "vllm-llama" || p.Spec.TargetPorts[0].Number != 8000 || p.Spec.Selector.MatchLabels["app"] != "vllm-llama" {
		t.Errorf("decoded %+v", p)
	}
}

const goodPool = `{"apiVersion":"inference.networking.k8s.io/v1","kind":"InferencePool","metadata":{"name":"p","namespace":"ns"},
"spec":{"selector":{"matchLabels":{"app":"m"}},"targetPorts":[{"number":8000}],"endpointPickerRef":{"name":"epp"}}}`

func TestDecodePool(t *testing.T) {
	for _, c := range []struct {
		name, from, to, err string
	}{
		{"valid", "", "", ""},
		{"unknown spec field", `"targetPorts"`, `"targetPortz"`, "unknown field"},
		{"v1alpha2 field", `"targetPorts":[{"number":8000}]`, `"targetPortNumber":8000`, "unknown field"},
		{"wrong version", "/v1", "/v1alpha2", "apiVersion"},
		{"wrong kind", `"InferencePool"`, `"InferenceModel"`, "kind"},
		{"no selector", `{"app":"m"}`, `{}`, "matchLabels"},
		{"bad label", `{"app":"m"}`, `{"app":"a b"}`, "matchLabels"},
		{"port zero", `8000`, `0`, "not a port"},
		{"port too big", `8000`, `70000`, "not a port"},
		{"no ports", `[{"number":8000}]`, `[]`, "targetPorts"},
		{"no picker", `"endpointPickerRef":{"name":"epp"}`, `"endpointPickerRef":{}`, "endpointPickerRef.name"},
		{"failure mode", `{"name":"epp"}`, `{"name":"epp","failureMode":"Maybe"}`, "failureMode"},
		{"not json", `{"apiVersion"`, `{apiVersion`, "invalid character"},
		{"trailing", `}}}`, `}}} {}`, "trailing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Replace(goodPool, c.from, c.to, 1)
			if c.from != "" && in == goodPool {
				t.Fatalf("%q not in the pool", c.from)
			}
			_, err := DecodePool([]byte(in))
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Errorf("error %v, want %q", err, c.err)
			}
		})
	}
}

func FuzzDecodePool(f *testing.F) {
	f.Add([]byte(goodPool))
	f.Add([]byte(`{"spec":{"selector":{"matchLabels":{"a":"b"}},"targetPorts":[{"number":1}],"endpointPickerRef":{"name":"x"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePool(b)
		if err != nil {
			return
		}
		// Whatever decodes is a usable pool.
		if len(p.Spec.TargetPorts) == 0 || p.Spec.PodSelector().Empty() {
			t.Fatalf("accepted an unusable pool: %s", b)
		}
	})
}

func pod(name, ip string, ready bool, lbls map[string]string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbls},
		Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func TestEndpoints(t *testing.T) {
	deleting := pod("d", "10.0.0.4", true, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	failed := pod("f", "10.0.0.5", false, nil)
	failed.Status.Phase = corev1.PodFailed
	pods := []*corev1.Pod{pod("b", "10.0.0.2", false, nil), pod("a", "10.0.0.1", true, nil), pod("c", "", true, nil), deleting, failed}
	eps, draining := Endpoints(pods, []Port{{8000}}, []string{"m"})
	var addrs []string
	for _, e := range eps {
		addrs = append(addrs, e.Addr)
		if !slices.Equal(e.Models, []string{"m"}) {
			t.Errorf("%s: models %v", e.Addr, e.Models)
		}
	}
	if want := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.4:8000"}; !slices.Equal(addrs, want) {
		t.Errorf("endpoints %v, want %v", addrs, want)
	}
	if want := []string{"10.0.0.2:8000", "10.0.0.4:8000"}; !slices.Equal(draining, want) {
		t.Errorf("draining %v, want %v (not ready, deleting)", draining, want)
	}
}

func poolObject(t testing.TB, js string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(js), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestDiscoveryFollowsPoolAndPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	app := map[string]string{"app": "m"}
	cs := fake.NewClientset(pod("a", "127.0.100.1", true, app), pod("b", "127.0.100.2", false, app), pod("x", "127.0.100.9", true, map[string]string{"app": "other"}))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{PoolResource: "InferencePoolList"}, poolObject(t, goodPool))
	s, err := epp.New(epp.Options{ScrapeInterval: -1, DiscoveredEndpoints: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Fatal("ready before discovery listed the pods")
	}
	d := &Discovery{Client: cs, Dynamic: dyn, Namespace: "ns", Pool: "p", Picker: s}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	state := func() (all, eligible []string) {
		for _, b := range s.Scheduler().Backends() {
			all = append(all, b.Name())
			if _, ok, _ := s.Endpoint(b.Name()); ok {
				eligible = append(eligible, b.Name())
			}
		}
		return all, eligible
	}
	await := func(what string, wantAll, wantEligible []string) {
		t.Helper()
		for {
			all, el := state()
			if slices.Equal(all, wantAll) && slices.Equal(el, wantEligible) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: endpoints %v eligible %v; want %v and %v", what, all, el, wantAll, wantEligible)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	await("initial", []string{"127.0.100.1:8000", "127.0.100.2:8000"}, []string{"127.0.100.1:8000"})
	if !s.Ready() {
		t.Error("not ready after the first listing")
	}
	// b becomes ready; a starts terminating (drained, still listed).
	b := pod("b", "127.0.100.2", true, app)
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := pod("a", "127.0.100.1", true, app)
	a.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := cs.CoreV1().Pods("ns").Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("a terminating", []string{"127.0.100.1:8000", "127.0.100.2:8000"}, []string{"127.0.100.2:8000"})
	if err := cs.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await("a gone", []string{"127.0.100.2:8000"}, []string{"127.0.100.2:8000"})
	// The pool's port and selector change.
	changed := strings.Replace(strings.Replace(goodPool, "8000", "9000", 1), `"app":"m"`, `"app":"other"`, 1)
	if _, err := dyn.Resource(PoolResource).Namespace("ns").Update(ctx, poolObject(t, changed), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	await("selector changed", []string{"127.0.100.9:9000"}, []string{"127.0.100.9:9000"})
	// An invalid update is ignored: the last good spec stays.
	bad := strings.Replace(changed, `"targetPorts"`, `"targetPortz"`, 1)
	if _, err := dyn.Resource(PoolResource).Namespace("ns").Update(ctx, poolObject(t, bad), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := d.applied.Load()
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, pod("y", "127.0.100.8", true, map[string]string{"app": "other"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.waitApplied(ctx, n+1); err != nil {
		t.Fatal(err)
	}
	await("after an invalid pool update", []string{"127.0.100.9:9000", "127.0.100.8:9000"}, []string{"127.0.100.9:9000", "127.0.100.8:9000"})
	// The pool is deleted: no endpoints.
	if err := dyn.Resource(PoolResource).Namespace("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await("pool deleted", nil, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// leaderFlag records a replica's leadership.
type leaderFlag struct {
	mu     sync.Mutex
	leader bool
}

func (l *leaderFlag) SetLeader(v bool) { l.mu.Lock(); l.leader = v; l.mu.Unlock() }
func (l *leaderFlag) get() bool        { l.mu.Lock(); defer l.mu.Unlock(); return l.leader }

func TestLeaderElectionFailover(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type replica struct {
		flag   leaderFlag
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *replica {
		r := &replica{done: make(chan error, 1)}
		rctx, rcancel := context.WithCancel(ctx)
		r.cancel = rcancel
		e := &Election{Client: cs, Namespace: "ns", Lease: "ttft-epp", Identity: id, Target: &r.flag,
			// Short for a test, but with room for a loaded machine: a
			// renewal that misses a 500 ms deadline under go test ./...
			// loses the lease, and both replicas briefly led.
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
		go func() { r.done <- e.Run(rctx) }()
		return r
	}
	a := start("a")
	// a leads; only then does b start, so the first leader is known.
	for !a.flag.get() {
		if ctx.Err() != nil {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := start("b")
	time.Sleep(3500 * time.Millisecond) // past a lease duration: b must stay a standby
	if !a.flag.get() || b.flag.get() {
		t.Fatalf("leaders: a %v b %v; want a alone", a.flag.get(), b.flag.get())
	}
	// a goes (its lease released): b takes over.
	start2 := time.Now()
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatal(err)
	}
	for !b.flag.get() {
		if ctx.Err() != nil {
			t.Fatal("b never took over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("failover in %v", time.Since(start2).Round(time.Millisecond))
	if a.flag.get() {
		t.Error("a still leads after it stopped")
	}
	b.cancel()
	<-b.done
}

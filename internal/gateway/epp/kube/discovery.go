package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ttft-dev/ttft/internal/gateway/epp"
)

// Picker is what discovery drives: the endpoint picker (epp.Server).
type Picker interface {
	SetEndpoints([]epp.Endpoint) error
	SetDraining(addr string, draining bool) bool
	EndpointsSynced()
}

// Discovery keeps a picker's endpoints equal to an InferencePool's ready
// pods.
type Discovery struct {
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Namespace string
	Pool      string
	// Models every pod serves (empty: any).
	Models []string
	Picker Picker
	Log    *slog.Logger

	spec    atomic.Pointer[PoolSpec]
	kick    chan struct{}
	applied atomic.Int64 // endpoint sets applied (tests)
}

// Run watches the pool and its pods until ctx ends. It returns an error if
// the informers cannot sync.
func (d *Discovery) Run(ctx context.Context) error {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	d.kick = make(chan struct{}, 1)
	pools := dynamicinformer.NewFilteredDynamicSharedInformerFactory(d.Dynamic, 0, d.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", d.Pool).String()
	})
	pi := pools.ForResource(PoolResource).Informer()
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { d.poolChanged(o) },
		UpdateFunc: func(_, o any) { d.poolChanged(o) },
		DeleteFunc: func(any) { d.spec.Store(nil); d.poke() },
	}); err != nil {
		return fmt.Errorf("watching InferencePool %s/%s: %w", d.Namespace, d.Pool, err)
	}
	pods := informers.NewSharedInformerFactoryWithOptions(d.Client, 0, informers.WithNamespace(d.Namespace))
	podInf := pods.Core().V1().Pods()
	poke := func(any) { d.poke() }
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { d.poke() }, DeleteFunc: poke}); err != nil {
		return fmt.Errorf("watching pods in %s: %w", d.Namespace, err)
	}
	pools.Start(ctx.Done())
	pods.Start(ctx.Done())
	defer pools.Shutdown()
	defer pods.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pi.HasSynced, podInf.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("InferencePool discovery: informers did not sync")
	}
	lister := podInf.Lister()
	synced := false
	for {
		if err := d.apply(lister.List); err != nil {
			d.Log.Warn("InferencePool discovery", "error", err.Error())
		} else if !synced {
			synced = true
			d.Picker.EndpointsSynced()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick:
		}
	}
}

func (d *Discovery) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// poolChanged decodes the pool strictly; an invalid one is logged and the
// last valid spec kept, as a controller keeps serving its last good config.
func (d *Discovery) poolChanged(o any) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	js, err := json.Marshal(u.Object)
	if err != nil {
		d.Log.Warn("InferencePool", "error", err.Error())
		return
	}
	p, err := DecodePool(js)
	if err != nil {
		d.Log.Warn("InferencePool ignored", "error", err.Error())
		return
	}
	d.spec.Store(&p.Spec)
	d.poke()
}

// apply computes the endpoints from the pods and hands them to the picker.
func (d *Discovery) apply(list func(labels.Selector) ([]*corev1.Pod, error)) error {
	spec := d.spec.Load()
	if spec == nil {
		// No pool (yet, or deleted): no endpoints, every request 503.
		d.applied.Add(1)
		return d.Picker.SetEndpoints(nil)
	}
	pods, err := list(spec.PodSelector())
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	eps, draining := Endpoints(pods, spec.TargetPorts, d.Models)
	if err := d.Picker.SetEndpoints(eps); err != nil {
		return err
	}
	for _, e := range eps {
		d.Picker.SetDraining(e.Addr, slices.Contains(draining, e.Addr))
	}
	d.applied.Add(1)
	return nil
}

// Endpoints turns pods into endpoints: every pod with an IP, at each
// target port, sorted by name for a stable order. Pods being deleted or
// not ready are listed as draining, so that requests in flight on them
// keep their scheduling state while new ones go elsewhere.
func Endpoints(pods []*corev1.Pod, ports []Port, models []string) (eps []epp.Endpoint, draining []string) {
	pods = slices.Clone(pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	for _, p := range pods {
		if p.Status.PodIP == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out := p.DeletionTimestamp != nil || !podReady(p)
		for _, port := range ports {
			addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.Number)))
			eps = append(eps, epp.Endpoint{Addr: addr, Models: models})
			if out {
				draining = append(draining, addr)
			}
		}
	}
	return eps, draining
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitApplied waits (tests) until at least n endpoint sets were applied.
func (d *Discovery) waitApplied(ctx context.Context, n int64) error {
	for d.applied.Load() < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

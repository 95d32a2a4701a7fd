package cli

// ttft gateway epp: the scheduler as an Endpoint Picker for Envoy-based
// gateways (Envoy ext_proc, Gateway API Inference Extension protocol).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ttft-dev/ttft/internal/gateway/epp"
	"github.com/ttft-dev/ttft/internal/gateway/epp/kube"
	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/sloclass"
)

type gatewayEPPOptions struct {
	listen         string
	metricsListen  string
	endpoints      []string
	models         []string
	policy         string
	sloClass       string
	sheddable      []string
	fallbacks      int
	metricsPath    string
	healthPath     string
	scrapeInterval time.Duration
	queueThreshold float64
	kvThreshold    float64
	// InferencePool discovery and leader election.
	pool          string
	poolNamespace string
	kubeconfig    string
	leaderElect   bool
	leaseName     string
	identity      string
}

func newGatewayEPPCmd(env *Env) *cobra.Command {
	o := &gatewayEPPOptions{}
	cmd := &cobra.Command{
		Use:   "epp",
		Short: "Serve the scheduler as an Endpoint Picker for Envoy (ext_proc, Gateway API Inference Extension)",
		Long: `An Envoy ext_proc v3 gRPC server implementing the Gateway API Inference
Extension's Endpoint Picker protocol (v1.0.0): Envoy streams each request's
headers and body to it (FULL_DUPLEX_STREAMED), it picks a model server with
ttft's scheduler (the gateway's policies: slo-predictive by default) and
names it in the x-gateway-destination-endpoint header and the envoy.lb
dynamic metadata; the response streams back through it, so its TTFT
predictors learn from every request. 503 when no endpoint is eligible, 429
for a sheddable class when the pool is saturated. gRPC health: liveness,
readiness, envoy.service.ext_proc.v3.ExternalProcessor.

Endpoints are ip:port (repeat --endpoint), or the ready pods of an
InferencePool (inference.networking.k8s.io/v1) watched through the Kubernetes
API (--pool; in-cluster credentials, or --kubeconfig / $KUBECONFIG). Each is
scraped for vLLM, SGLang or TensorRT-LLM queue and KV-cache gauges and checked
on its health path. --leader-elect runs replicas active-passive through a
Lease: only the leader reports ready. An example Envoy configuration is in
deploy/envoy/envoy.yaml; see docs/endpoint-picker.md.

A request's SLO: header x-ttft-slo-ms, or x-slo-class: ` + strings.Join(sloclass.Names(), "|") + `
(` + sloclass.Targets() + ` P95 TTFT), else --slo-class.`,
		Example: `  ttft sim serve --host 127.0.100.1 --port 8000 & ttft sim serve --host 127.0.100.2 --port 8000 &
  ttft gateway epp --endpoint 127.0.100.1:8000 --endpoint 127.0.100.2:8000
  envoy -c deploy/envoy/envoy.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGatewayEPP(cmd.Context(), env, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:9002", "gRPC address to serve ext_proc and health on")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve the picker's Prometheus metrics on this address (/metrics); off when empty")
	f.StringArrayVar(&o.endpoints, "endpoint", nil, "model server ip:port; repeatable (or comma-separated)")
	f.StringArrayVar(&o.models, "model", nil, "models every endpoint serves (default: any); repeatable")
	f.StringVar(&o.policy, "policy", sched.SLOPredictive, "scheduling policy: "+strings.Join(sched.Policies(), ", "))
	f.StringVar(&o.sloClass, "slo-class", "", "default SLO class for requests without one: "+strings.Join(sched.Classes(), ", "))
	f.StringArrayVar(&o.sheddable, "sheddable-class", nil, "SLO class whose requests get 429 when every endpoint is saturated or none is predicted to meet their SLO; repeatable")
	f.IntVar(&o.fallbacks, "fallbacks", 0, "endpoints listed after the chosen one, comma-separated, for data planes that retry down the list (0 for Envoy's ORIGINAL_DST cluster, which takes one)")
	f.StringVar(&o.metricsPath, "metrics-path", epp.DefaultMetricsPath, "endpoints' Prometheus metrics path")
	f.StringVar(&o.healthPath, "health-path", epp.DefaultHealthPath, `endpoints' health path, which must answer 2xx ("-": not checked)`)
	f.DurationVar(&o.scrapeInterval, "scrape-interval", epp.DefaultScrapeInterval, "how often endpoints' metrics and health are read")
	f.Float64Var(&o.queueThreshold, "queue-threshold", 5, "waiting requests at which an endpoint counts as saturated")
	f.Float64Var(&o.kvThreshold, "kv-threshold", 0.8, "KV-cache usage at which an endpoint counts as saturated")
	f.StringVar(&o.pool, "pool", "", "InferencePool whose ready pods are the endpoints (instead of --endpoint)")
	f.StringVar(&o.poolNamespace, "pool-namespace", "", "the pool's namespace (default $POD_NAMESPACE, else default)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, else in-cluster credentials)")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "active-passive replicas: campaign for a Lease, report ready only while leading")
	f.StringVar(&o.leaseName, "lease-name", "ttft-epp", "the leader election's Lease (in --pool-namespace)")
	f.StringVar(&o.identity, "identity", "", "this replica's leader election identity (default $POD_NAME, else the host name)")
	return cmd
}

// eppOptions turns the flags into the picker's options and endpoints.
func (o *gatewayEPPOptions) eppOptions() (epp.Options, []epp.Endpoint, error) {
	var eps []epp.Endpoint
	for _, v := range o.endpoints {
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				eps = append(eps, epp.Endpoint{Addr: a, Models: o.models})
			}
		}
	}
	switch {
	case len(eps) == 0 && o.pool == "":
		return epp.Options{}, nil, errors.New("no endpoints: pass --endpoint ip:port or --pool NAME")
	case len(eps) > 0 && o.pool != "":
		return epp.Options{}, nil, errors.New("use --endpoint or --pool, not both")
	}
	for _, e := range eps {
		if err := e.Validate(); err != nil {
			return epp.Options{}, nil, err
		}
	}
	if o.scrapeInterval <= 0 {
		return epp.Options{}, nil, fmt.Errorf("--scrape-interval %v: must be positive", o.scrapeInterval)
	}
	if o.fallbacks < 0 {
		return epp.Options{}, nil, fmt.Errorf("--fallbacks %d: must not be negative", o.fallbacks)
	}
	if o.queueThreshold <= 0 || o.kvThreshold <= 0 || o.kvThreshold > 1 {
		return epp.Options{}, nil, errors.New("--queue-threshold must be positive and --kv-threshold in (0, 1]")
	}
	if !validPolicy(o.policy) {
		return epp.Options{}, nil, fmt.Errorf("--policy %q: one of %s", o.policy, strings.Join(sched.Policies(), ", "))
	}
	return epp.Options{Policy: o.policy, DefaultClass: o.sloClass, SheddableClasses: o.sheddable, Fallbacks: o.fallbacks,
		MetricsPath: o.metricsPath, HealthPath: o.healthPath, ScrapeInterval: o.scrapeInterval,
		QueueThreshold: o.queueThreshold, KVThreshold: o.kvThreshold, DiscoveredEndpoints: o.pool != ""}, eps, nil
}

func validPolicy(p string) bool {
	for _, q := range sched.Policies() {
		if p == q {
			return true
		}
	}
	return false
}

// runGatewayEPP serves until ctx ends or SIGINT/SIGTERM.
func runGatewayEPP(ctx context.Context, env *Env, o *gatewayEPPOptions) error {
	opts, eps, err := o.eppOptions()
	if err != nil {
		return usageErr("gateway epp: %v", err)
	}
	log := slog.New(slog.NewJSONHandler(env.Stderr, nil))
	reg := prometheus.NewRegistry()
	opts.Log, opts.Registerer = log, reg
	s, err := epp.New(opts, eps)
	if err != nil {
		return usageErr("gateway epp: %v", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usageErr("gateway epp: %v", err)
	}
	if o.metricsListen != "" {
		mln, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			ln.Close()
			return usageErr("gateway epp: --metrics-listen: %v", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go ms.Serve(mln)
		defer ms.Close()
	}
	if o.pool != "" || o.leaderElect {
		if err := o.startKube(ctx, env, s, log); err != nil {
			ln.Close()
			return err
		}
	}
	log.Info("endpoint picker serving", "listen", ln.Addr().String(), "endpoints", len(eps), "policy", s.Scheduler().Describe())
	if err := s.Serve(ctx, ln, 10*time.Second); err != nil {
		return failErr("gateway epp: %v", err)
	}
	return nil
}

// startKube starts InferencePool discovery and leader election, as asked,
// for as long as ctx lasts; a failure of either after the start ends the
// process's readiness, not the process.
func (o *gatewayEPPOptions) startKube(ctx context.Context, env *Env, s *epp.Server, log *slog.Logger) error {
	kc := o.kubeconfig
	if kc == "" {
		kc = env.getenv("KUBECONFIG")
	}
	var rc *rest.Config
	var err error
	if kc != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kc)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return usageErr("gateway epp: Kubernetes credentials: %v", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return usageErr("gateway epp: %v", err)
	}
	ns := o.poolNamespace
	if ns == "" {
		ns = env.getenv("POD_NAMESPACE")
	}
	if ns == "" {
		ns = "default"
	}
	if o.pool != "" {
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return usageErr("gateway epp: %v", err)
		}
		d := &kube.Discovery{Client: cs, Dynamic: dyn, Namespace: ns, Pool: o.pool, Models: o.models, Picker: s, Log: log}
		go func() {
			if err := d.Run(ctx); err != nil {
				log.Error("InferencePool discovery stopped", "error", err.Error())
			}
		}()
	}
	if o.leaderElect {
		id := o.identity
		if id == "" {
			id = env.getenv("POD_NAME")
		}
		if id == "" {
			id, _ = os.Hostname()
		}
		e := &kube.Election{Client: cs, Namespace: ns, Lease: o.leaseName, Identity: id, Target: s, Log: log}
		s.SetLeader(false)
		go func() {
			if err := e.Run(ctx); err != nil {
				log.Error("leader election stopped", "error", err.Error())
			}
		}()
	}
	return nil
}

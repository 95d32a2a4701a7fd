package testutil

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Kube is a real Kubernetes control plane for a test, without Docker or a
// kubelet: etcd, kube-apiserver, kube-controller-manager (the real Job
// controller) and kwok (a fake node that keeps itself Ready), each in a
// temp dir on loopback. There is no scheduler and nothing runs pods: a test
// binds them and runs their commands itself (RunPods).
type Kube struct {
	URL   string // https://127.0.0.1:PORT
	Token string // a system:masters bearer token
	Node  string // the kwok node's name
	dir   string
	http  *http.Client
}

const kubeHowTo = "bash .ci/install-kube.sh (etcd from Debian, kube-apiserver and kube-controller-manager v1.37.2 built from the Go module proxy, kwok v0.8.0)"

// kubeBinary finds a control-plane binary on PATH or in $HOME/go/bin,
// where .ci/install-kube.sh puts them.
func kubeBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if h, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(h, "go", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	Missing(t, name, kubeHowTo)
	return ""
}

// StartKube starts the control plane, stopped at the end of the test.
func StartKube(t testing.TB) *Kube {
	t.Helper()
	etcd := kubeBinary(t, "etcd")
	apiserver := kubeBinary(t, "kube-apiserver")
	kcm := kubeBinary(t, "kube-controller-manager")
	kwok := kubeBinary(t, "kwok")
	stages := filepath.Join(filepath.Dir(kwok), "kwok-stages")
	if _, err := os.Stat(stages); err != nil {
		Missing(t, "kwok's stage configs ("+stages+")", kubeHowTo)
	}
	dir := t.TempDir()
	k := &Kube{dir: dir, Token: "ttft-test-token", Node: "kwok-node-0",
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			// The apiserver's self-signed serving certificate, on loopback.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}

	// etcd
	client, peer := FreePort(t), FreePort(t)
	k.start(t, "etcd", etcd, "--name", "default", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", client), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", client),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peer), "--unsafe-no-fsync")

	// kube-apiserver: token auth, RBAC, service-account signing keys.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saKey := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	saPub := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	tokens := write("tokens.csv", []byte(k.Token+",admin,admin-uid,system:masters\n"))
	port := FreePort(t)
	k.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	k.start(t, "kube-apiserver", apiserver,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", client), "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none", "--token-auth-file="+tokens,
		"--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16", "--cert-dir="+filepath.Join(dir, "certs"),
		// Pods need no service-account token here: nothing runs them.
		"--disable-admission-plugins=ServiceAccount")
	k.waitReady(t)

	kubeconfig := write("kubeconfig", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
`, k.URL, k.Token)))
	k.start(t, "kube-controller-manager", kcm, "--kubeconfig="+kubeconfig,
		"--controllers=job,garbagecollector,namespace", "--leader-elect=false", "--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", FreePort(t)), "--use-service-account-credentials=false")

	// kwok: its node and pod stages, less the one that would complete a
	// Job's pods on its own: here the test's processes do.
	var cfg bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(stages, "*.yaml"))
	sort.Strings(files)
	for _, f := range files {
		if strings.Contains(filepath.Base(f), "complete") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg.WriteString("---\n")
		cfg.Write(b)
		cfg.WriteString("\n")
	}
	kwokCfg := write("kwok.yaml", cfg.Bytes())
	k.start(t, "kwok", kwok, "--kubeconfig="+kubeconfig, "--config="+kwokCfg,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom",
		"--cidr=127.0.100.0/24", "--node-ip=127.0.100.1",
		fmt.Sprintf("--server-address=127.0.0.1:%d", FreePort(t)))
	node := map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{
		"name": k.Node, "annotations": map[string]string{"kwok.x-k8s.io/node": "fake"},
		"labels": map[string]string{"type": "kwok"}}}
	if err := k.Do(context.Background(), http.MethodPost, "/api/v1/nodes", "", node, nil); err != nil {
		t.Fatal(err)
	}
	return k
}

// start runs a component with its output in a log file, shown if the test
// fails, and stops it at the end.
func (k *Kube) start(t testing.TB, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(k.dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, k.dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

func (k *Kube) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := k.Do(context.Background(), http.MethodGet, "/readyz", "", nil, nil)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 90 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Do sends one API request: body (any JSON value, or []byte as is) with
// contentType (default application/json), the answer decoded into out.
func (k *Kube) Do(ctx context.Context, method, path, contentType string, body, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.URL+path, rd)
	if err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+k.Token)
	resp, err := k.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding: %w", method, path, err)
		}
	}
	return nil
}

// Apply creates the objects of a YAML manifest (documents separated by
// ---) in namespace ns. Only the kinds the tests use are known.
func (k *Kube) Apply(ctx context.Context, ns string, manifest []byte) error {
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		var head struct{ APIVersion, Kind string }
		if err := json.Unmarshal(j, &head); err != nil || head.Kind == "" {
			continue // an empty document (comments only)
		}
		var path string
		switch head.APIVersion + "/" + head.Kind {
		case "batch/v1/Job":
			path = "/apis/batch/v1/namespaces/" + ns + "/jobs"
		case "v1/Secret":
			path = "/api/v1/namespaces/" + ns + "/secrets"
		default:
			return fmt.Errorf("manifest: %s %s is not known to the test harness", head.APIVersion, head.Kind)
		}
		if err := k.Do(ctx, http.MethodPost, path, "", j, nil); err != nil {
			return err
		}
	}
	return nil
}

// PodRunner runs one pod's container: argv is its command and arguments,
// env its resolved environment (NAME=value).
type PodRunner func(ctx context.Context, pod *corev1.Pod, argv, env []string) error

// RunJobPods plays kubelet (and scheduler) for a Job's pods until the Job
// completes or fails: each new pod is bound to the kwok node, marked
// Running, its only container's command run by run with the pod's
// environment (values, fields of the pod such as the completion index, and
// Secret keys resolved as the kubelet resolves them), and the pod marked
// Succeeded or Failed by the outcome. It returns the finished Job.
func (k *Kube) RunJobPods(ctx context.Context, ns, job string, run PodRunner) (*batchv1.Job, error) {
	started := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	defer wg.Wait()
	for {
		var j batchv1.Job
		if err := k.Do(ctx, http.MethodGet, "/apis/batch/v1/namespaces/"+ns+"/jobs/"+job, "", nil, &j); err != nil {
			return nil, err
		}
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				return &j, nil
			}
		}
		var pods corev1.PodList
		if err := k.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods?labelSelector=batch.kubernetes.io/job-name%3D"+job, "", nil, &pods); err != nil {
			return nil, err
		}
		for i := range pods.Items {
			p := pods.Items[i]
			mu.Lock()
			seen := started[p.Name]
			started[p.Name] = true
			mu.Unlock()
			if seen || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := k.runPod(ctx, &p, run); err != nil {
					errs <- fmt.Errorf("pod %s: %w", p.Name, err)
				}
			}()
		}
		select {
		case err := <-errs:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *Kube) runPod(ctx context.Context, p *corev1.Pod, run PodRunner) error {
	base := "/api/v1/namespaces/" + p.Namespace + "/pods/" + p.Name
	if p.Spec.NodeName == "" {
		bind := map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": p.Name},
			"target": map[string]any{"apiVersion": "v1", "kind": "Node", "name": k.Node}}
		if err := k.Do(ctx, http.MethodPost, base+"/binding", "", bind, nil); err != nil {
			return err
		}
	}
	if len(p.Spec.Containers) != 1 {
		return fmt.Errorf("%d containers; the harness runs one", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	env, err := k.resolveEnv(ctx, p, &c)
	if err != nil {
		return err
	}
	// kwok plays the node: it marks a bound pod Running with an IP.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var cur corev1.Pod
		if err := k.Do(ctx, http.MethodGet, base, "", nil, &cur); err != nil {
			return err
		}
		if cur.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kwok did not start the pod within 60 s (phase %q)", cur.Status.Phase)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	runErr := run(ctx, p, append(append([]string(nil), c.Command...), c.Args...), env)
	phase, code, reason := "Succeeded", 0, "Completed"
	if runErr != nil {
		phase, code, reason = "Failed", 1, "Error"
	}
	end := time.Now().UTC().Format(time.RFC3339)
	done := map[string]any{"status": map[string]any{"phase": phase,
		"containerStatuses": []any{map[string]any{"name": c.Name, "image": c.Image, "imageID": "", "ready": false, "restartCount": 0,
			"state": map[string]any{"terminated": map[string]any{"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": end}}}}}}
	if err := k.Do(ctx, http.MethodPatch, base+"/status", "application/merge-patch+json", done, nil); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	return nil
}

// resolveEnv is the container's environment as a kubelet builds it.
func (k *Kube) resolveEnv(ctx context.Context, p *corev1.Pod, c *corev1.Container) ([]string, error) {
	var out []string
	for _, e := range c.Env {
		v := e.Value
		if src := e.ValueFrom; src != nil {
			switch {
			case src.FieldRef != nil:
				var err error
				if v, err = podField(p, src.FieldRef.FieldPath); err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
			case src.SecretKeyRef != nil:
				var s corev1.Secret
				if err := k.Do(ctx, http.MethodGet, "/api/v1/namespaces/"+p.Namespace+"/secrets/"+src.SecretKeyRef.Name, "", nil, &s); err != nil {
					return nil, fmt.Errorf("env %s: %w", e.Name, err)
				}
				b, ok := s.Data[src.SecretKeyRef.Key]
				if !ok {
					return nil, fmt.Errorf("env %s: secret %s has no key %s", e.Name, s.Name, src.SecretKeyRef.Key)
				}
				v = string(b)
			case src.ResourceFieldRef != nil:
				r := src.ResourceFieldRef
				q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(r.Resource, "limits."))]
				if !ok {
					return nil, fmt.Errorf("env %s: no %s", e.Name, r.Resource)
				}
				div := 1.0
				if !r.Divisor.IsZero() {
					div = r.Divisor.AsApproximateFloat64()
				}
				v = strconv.Itoa(int(math.Ceil(q.AsApproximateFloat64() / div)))
			default:
				return nil, fmt.Errorf("env %s: a source the harness does not resolve", e.Name)
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}

// podField resolves a downward-API field path.
func podField(p *corev1.Pod, path string) (string, error) {
	switch {
	case path == "metadata.name":
		return p.Name, nil
	case path == "metadata.namespace":
		return p.Namespace, nil
	case strings.HasPrefix(path, "metadata.annotations['") && strings.HasSuffix(path, "']"):
		return p.Annotations[path[len("metadata.annotations['"):len(path)-2]], nil
	case strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']"):
		return p.Labels[path[len("metadata.labels['"):len(path)-2]], nil
	}
	return "", fmt.Errorf("field %s is not resolved by the harness", path)
}

package cli

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ttft-dev/ttft/deploy/k8s"
)

// k8sOptions render a bench run as a Kubernetes Indexed Job instead of
// running it (bench --render-k8s).
type k8sOptions struct {
	File           string
	Shards         int
	Image          string
	Namespace      string
	Secret         string
	MilliPerStream float64
}

func addK8sFlags(f *pflag.FlagSet, o *k8sOptions) {
	f.StringVar(&o.File, "render-k8s", "", "do not run: write this run as a Kubernetes Indexed Job of --k8s-shards pods to FILE (- for stdout); see deploy/k8s")
	f.IntVar(&o.Shards, "k8s-shards", 2, "with --render-k8s: pods (shards) of the run")
	f.StringVar(&o.Image, "k8s-image", "ttft:latest", "with --render-k8s: the container image holding the ttft binary")
	f.StringVar(&o.Namespace, "k8s-namespace", "default", "with --render-k8s: the Job's namespace")
	f.StringVar(&o.Secret, "k8s-db-secret", "ttft-db", "with --render-k8s: the Secret whose key \"url\" is the PostgreSQL URL the shards meet in")
	f.Float64Var(&o.MilliPerStream, "k8s-cpu-per-stream", k8s.DefaultMilliCPUPerStream, "with --render-k8s: millicores of CPU requested per stream a pod drives")
}

// k8sDropFlags are bench's flags that the pods get elsewhere: the shard
// and run from the Job's environment, the database from the Secret, the
// run directory inside the pod.
var k8sDropFlags = map[string]bool{
	"render-k8s": true, "k8s-shards": true, "k8s-image": true, "k8s-namespace": true, "k8s-db-secret": true, "k8s-cpu-per-stream": true,
	"shard": true, "shard-index": true, "shard-count": true, "run-id": true, "db": true, "out": true,
}

// podArgs are the container's arguments: the user's command line less the
// flags in k8sDropFlags. fs tells flags that take a value from switches.
func podArgs(fs *pflag.FlagSet, args []string) []string {
	out := []string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, hasValue := "", false
		switch {
		case a == "--":
			out = append(out, args[i:]...)
			return out
		case strings.HasPrefix(a, "--"):
			name, _, hasValue = strings.Cut(a[2:], "=")
		case strings.HasPrefix(a, "-") && len(a) == 2 && fs != nil:
			if f := fs.ShorthandLookup(a[1:]); f != nil {
				name = f.Name
			}
		}
		if name == "" {
			out = append(out, a)
			continue
		}
		f := fs.Lookup(name)
		if f == nil && fs != nil {
			f = fs.Lookup(string(vllmAliases(fs, name)))
		}
		takesValue := f != nil && f.Value.Type() != "bool" && !hasValue
		if f != nil && k8sDropFlags[f.Name] {
			if takesValue {
				i++
			}
			continue
		}
		out = append(out, a)
		if takesValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// renderK8s writes the Job and says how to start it.
func renderK8s(env *Env, o *benchOptions) error {
	k := &o.shard.k8s
	if k.Shards < 1 {
		return usageErr("--k8s-shards must be at least 1, got %d", k.Shards)
	}
	runID := o.shard.RunID
	if runID == "" {
		runID = newRunID(time.Now())
	}
	runID = strings.ToLower(runID)
	fs := o.load.fs
	args := podArgs(fs, env.Args)
	if len(args) == 0 || args[0] != "bench" {
		args = append([]string{"bench"}, args...)
	}
	if o.load.Rate == 0 && o.load.Concurrency < k.Shards {
		return usageErr("a closed loop of concurrency %d cannot be split over %d shards: each needs a worker", o.load.Concurrency, k.Shards)
	}
	streams := o.load.Concurrency
	if o.load.Rate > 0 {
		// An open loop's streams are its requests in flight: the cap, or
		// by Little's law the rate times a request's time (2 s assumed).
		streams = o.load.MaxConcurrency
		if streams == 0 {
			streams = int(math.Ceil(o.load.Rate * 2))
		}
	}
	b, err := k8s.RenderJob(k8s.JobParams{Namespace: k.Namespace, RunID: runID, Shards: k.Shards, Image: k.Image, Args: args,
		Secret: k.Secret, Streams: streams, MilliCPUPerStream: k.MilliPerStream})
	if err != nil {
		return usageErr("--render-k8s: %v", err)
	}
	if k.File == "-" {
		_, err = env.Stdout.Write(b)
	} else {
		err = os.WriteFile(k.File, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("--render-k8s: %w", err)
	}
	fmt.Fprintf(env.Stderr, "ttft bench: run %s as a Job of %d shards in %s; start it with `kubectl apply -f %s` (the Secret %s must hold the database URL, see deploy/k8s/db-secret.example.yaml), then `ttft runs show %s`\n",
		runID, k.Shards, map[bool]string{true: "stdout", false: k.File}[k.File == "-"], k.File, k.Secret, runID)
	return nil
}

// Package k8s renders ttft's Kubernetes manifests: `ttft bench` as an
// Indexed Job whose pods are the shards of one run (bench-job.yaml.tmpl),
// and the example Secret holding the results database's URL. The templates
// are embedded, so the command and the tests read exactly the files users
// copy.
package k8s

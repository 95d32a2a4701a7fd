// Package kube feeds the endpoint picker (package epp) from Kubernetes: an
// InferencePool (inference.networking.k8s.io/v1, the Gateway API Inference
// Extension's resource, defined here since its module is not available)
// names the model-server pods by label selector and the port to send to;
// its pods are watched through the API server and every ready one becomes
// an endpoint (pod IP and target port). A pod being deleted is drained:
// requests in flight finish, new ones go elsewhere.
//
// High availability is the reference picker's: several replicas, one
// leader elected through a coordination.k8s.io Lease (client-go's
// leaderelection); only the leader reports ready, so the data plane's
// health checks send requests to it alone, and a standby takes over
// within the lease duration when the leader goes.
//
// It is a package of its own so that the picker, and ttft's other
// commands, do not carry client-go unless discovery is used.
package kube

package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The InferencePool resource's API group and version.
const (
	Group   = "inference.networking.k8s.io"
	Version = "v1"
)

// The InferencePool resource and kind (read-only).
var (
	PoolResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "inferencepools"}
	PoolKind     = schema.GroupVersionKind{Group: Group, Version: Version, Kind: "InferencePool"}
)

// InferencePool selects the model-server pods an endpoint picker chooses
// from (the fields of inference.networking.k8s.io/v1 the picker reads or
// must accept; decoding refuses any other).
type InferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PoolSpec   `json:"spec"`
	Status            PoolStatus `json:"status,omitempty"`
}

// PoolSpec is an InferencePool's desired state.
type PoolSpec struct {
	// Selector matches the pods of the pool (same namespace), by labels
	// only, like a Service's selector.
	Selector LabelSelector `json:"selector"`
	// TargetPorts are the model servers' ports (the API allows one).
	TargetPorts []Port `json:"targetPorts"`
	// EndpointPickerRef names the picker serving the pool.
	EndpointPickerRef EndpointPickerRef `json:"endpointPickerRef"`
}

// LabelSelector is a Service-style selector: labels that must all match.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// Port is a port number, 1–65535.
type Port struct {
	Number int32 `json:"number"`
}

// EndpointPickerRef refers to the picker's Service.
type EndpointPickerRef struct {
	Group       *string `json:"group,omitempty"`
	Kind        string  `json:"kind,omitempty"`
	Name        string  `json:"name"`
	PortNumber  *int32  `json:"portNumber,omitempty"`
	FailureMode string  `json:"failureMode,omitempty"`
}

// PoolStatus is what the gateways report about the pool.
type PoolStatus struct {
	Parents []ParentStatus `json:"parents,omitempty"`
}

// ParentStatus is one gateway's view of the pool.
type ParentStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	ParentRef  ParentReference    `json:"parentRef"`
}

// ParentReference names a gateway.
type ParentReference struct {
	Group     *string `json:"group,omitempty"`
	Kind      string  `json:"kind,omitempty"`
	Name      string  `json:"name"`
	Namespace string  `json:"namespace,omitempty"`
}

// DecodePool decodes an InferencePool strictly: unknown fields (a typo, or
// a field of another version of the API) are errors rather than silently
// dropped, and the spec is validated.
func DecodePool(data []byte) (*InferencePool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p InferencePool
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("InferencePool: %w", err)
	}
	if dec.More() {
		return nil, errors.New("InferencePool: trailing data after the object")
	}
	if p.APIVersion != "" && p.APIVersion != Group+"/"+Version {
		return nil, fmt.Errorf("InferencePool: apiVersion %q, want %s/%s", p.APIVersion, Group, Version)
	}
	if p.Kind != "" && p.Kind != PoolKind.Kind {
		return nil, fmt.Errorf("InferencePool: kind %q", p.Kind)
	}
	if err := p.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("InferencePool %s/%s: %w", p.Namespace, p.Name, err)
	}
	return &p, nil
}

// Validate checks what the API server's schema would.
func (s *PoolSpec) Validate() error {
	if len(s.Selector.MatchLabels) == 0 {
		return errors.New("spec.selector.matchLabels: required")
	}
	if _, err := labels.ValidatedSelectorFromSet(s.Selector.MatchLabels); err != nil {
		return fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	if len(s.TargetPorts) == 0 || len(s.TargetPorts) > 8 {
		return fmt.Errorf("spec.targetPorts: %d ports, want 1 to 8", len(s.TargetPorts))
	}
	for i, p := range s.TargetPorts {
		if p.Number < 1 || p.Number > 65535 {
			return fmt.Errorf("spec.targetPorts[%d].number: %d is not a port", i, p.Number)
		}
	}
	if s.EndpointPickerRef.Name == "" {
		return errors.New("spec.endpointPickerRef.name: required")
	}
	switch s.EndpointPickerRef.FailureMode {
	case "", "FailOpen", "FailClose":
	default:
		return fmt.Errorf("spec.endpointPickerRef.failureMode: %q is not FailOpen or FailClose", s.EndpointPickerRef.FailureMode)
	}
	return nil
}

// PodSelector is the pool's pod selector.
func (s *PoolSpec) PodSelector() labels.Selector {
	return labels.SelectorFromSet(s.Selector.MatchLabels)
}

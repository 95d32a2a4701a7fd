package epp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// decodeBootstrap reads an Envoy YAML configuration as Envoy does: YAML to
// JSON, then the proto3 JSON mapping into a Bootstrap, unknown fields
// refused, and every typed_config resolved against go-control-plane's
// registered extension types.
func decodeBootstrap(yamlText []byte) (*bootstrapv3.Bootstrap, error) {
	var v any
	if err := yaml.Unmarshal(yamlText, &v); err != nil {
		return nil, err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// validateDeep runs the protoc-gen-validate rules on m and, since
// Validate stops at an Any, on every message packed in one, recursively:
// the filters' and protocol options' own rules are where mistakes hide.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var errs []error
	var walk func(protoreflect.Message)
	walk = func(rm protoreflect.Message) {
		rm.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				return true
			}
			visit := func(sub protoreflect.Message) {
				if a, ok := sub.Interface().(*anypb.Any); ok {
					inner, err := a.UnmarshalNew()
					if err != nil {
						errs = append(errs, err)
						return
					}
					if err := validateDeep(inner); err != nil {
						errs = append(errs, err)
					}
					return
				}
				walk(sub)
			}
			switch {
			case fd.IsList():
				l := val.List()
				for i := range l.Len() {
					visit(l.Get(i).Message())
				}
			case fd.IsMap():
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					val.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
						visit(v.Message())
						return true
					})
				}
			default:
				visit(val.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return errors.Join(errs...)
}

func readEnvoyConfig(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEnvoyConfig(t *testing.T) {
	b, err := decodeBootstrap(readEnvoyConfig(t))
	if err != nil {
		t.Fatalf("deploy/envoy/envoy.yaml does not decode as an Envoy bootstrap: %v", err)
	}
	if err := validateDeep(b); err != nil {
		t.Fatalf("deploy/envoy/envoy.yaml fails validation: %v", err)
	}
	// What the picker relies on, beyond what the schema checks.
	var ep *extprocfilterv3.ExternalProcessor
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					var x extprocfilterv3.ExternalProcessor
					if hf.GetTypedConfig().UnmarshalTo(&x) == nil {
						ep = &x
					}
				}
			}
		}
	}
	if ep == nil {
		t.Fatal("no ext_proc filter")
	}
	pm := ep.GetProcessingMode()
	if pm.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || pm.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		t.Errorf("body modes %v/%v, want FULL_DUPLEX_STREAMED", pm.GetRequestBodyMode(), pm.GetResponseBodyMode())
	}
	if pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		t.Error("FULL_DUPLEX_STREAMED needs the trailer modes SEND")
	}
	if !slices.Contains(ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(), DestinationNamespace) {
		t.Errorf("the picker's %s metadata is not received", DestinationNamespace)
	}
	if !slices.Contains(ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(), SubsetNamespace) {
		t.Errorf("the subset hint namespace %s is not forwarded", SubsetNamespace)
	}
	epp := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	var found struct{ dst, epp bool }
	for _, c := range b.GetStaticResources().GetClusters() {
		switch c.GetName() {
		case epp:
			found.epp = true
			var po upstreamhttpv3.HttpProtocolOptions
			if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil ||
				po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
				t.Errorf("cluster %s must speak HTTP/2 (gRPC): %v", epp, err)
			}
			if hc := c.GetHealthChecks(); len(hc) == 0 || hc[0].GetGrpcHealthCheck().GetServiceName() != ExtProcService {
				t.Errorf("cluster %s should be health-checked on %s", epp, ExtProcService)
			}
		default:
			if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
				found.dst = true
				oc := c.GetOriginalDstLbConfig()
				if !oc.GetUseHttpHeader() || !strings.EqualFold(oc.GetHttpHeaderName(), DestinationKey) {
					t.Errorf("ORIGINAL_DST cluster %s must read header %s", c.GetName(), DestinationKey)
				}
				if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
					t.Errorf("ORIGINAL_DST cluster %s needs lb_policy CLUSTER_PROVIDED", c.GetName())
				}
			}
		}
	}
	if !found.dst || !found.epp {
		t.Errorf("clusters: ORIGINAL_DST %v, picker %q %v", found.dst, epp, found.epp)
	}
}

// The checks above must be able to fail: broken variants of the shipped
// file are refused.
func TestEnvoyConfigValidationCatchesMistakes(t *testing.T) {
	good := string(readEnvoyConfig(t))
	for _, c := range []struct{ name, from, to string }{
		{"unknown body mode", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: FULL_DUPLEX"},
		{"unknown field", "failure_mode_allow: false", "failure_mode_alow: false"},
		{"unknown filter type", "ext_proc.v3.ExternalProcessor\n", "ext_proc.v3.ExternalProcessorX\n"},
		{"empty cluster name inside a typed config", "envoy_grpc: { cluster_name: ttft_epp }", "envoy_grpc: { cluster_name: \"\" }"},
		{"port out of range", "port_value: 9002", "port_value: 90020"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(good, c.from, c.to, 1)
			if bad == good {
				t.Fatalf("%q not in the shipped file", c.from)
			}
			b, err := decodeBootstrap([]byte(bad))
			if err == nil {
				err = validateDeep(b)
			}
			if err == nil {
				t.Error("accepted")
			}
		})
	}
}

package epp

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestAnswersMatchPlainMessages: the one-allocation answers are the
// messages the protocol's nesting spells out, field for field.
func TestAnswersMatchPlainMessages(t *testing.T) {
	s, err := New(Options{ScrapeInterval: -1}, overheadFleet(1))
	if err != nil {
		t.Fatal(err)
	}
	const dest = "127.0.100.1:8000"
	destHeader := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: DestinationKey, RawValue: []byte(dest)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	meta := &structpb.Struct{Fields: map[string]*structpb.Value{DestinationNamespace: structpb.NewStructValue(&structpb.Struct{
		Fields: map[string]*structpb.Value{DestinationKey: structpb.NewStringValue(dest)}})}}
	pick := func(hs ...*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: hs}}}},
			DynamicMetadata: meta}
	}
	streamed := func(body []byte, eos bool) *extprocv3.CommonResponse {
		return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}}}}
	}
	body := []byte("chunk")
	for _, tc := range []struct {
		name      string
		got, want *extprocv3.ProcessingResponse
	}{
		{"pick, empty body", &newPickAnswer(s.destinationOf(s.pool.get(dest)), 0).r, pick(destHeader)},
		{"pick, body", &newPickAnswer(s.destinationOf(s.pool.get(dest)), 2241).r, pick(destHeader,
			&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "content-length", RawValue: []byte("2241")},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})},
		{"pick, destination list", &newPickAnswer(&destination{header: s.destHeader(dest), meta: s.destMetadata(dest)}, 0).r, pick(destHeader)},
		{"request body chunk", streamedBodyResponse(true, body, true),
			&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: streamed(body, true)}}}},
		{"response body chunk", streamedBodyResponse(false, body, false),
			&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: streamed(body, false)}}}},
	} {
		if !proto.Equal(tc.got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.name, tc.got, tc.want)
		}
	}
	// An endpoint's destination is built once and shared.
	m := s.pool.get(dest)
	if s.destinationOf(m) != s.destinationOf(m) {
		t.Error("an endpoint's destination built twice")
	}
}

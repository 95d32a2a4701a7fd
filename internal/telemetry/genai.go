package telemetry

import (
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
)

// Operation names (gen_ai.operation.name well-known values).
const (
	OpChat           = "chat"
	OpTextCompletion = "text_completion"
)

// OperationForAPI maps ttft's API names ("openai-chat", "chat",
// "openai-completions", "completions", "anthropic", ...) to the GenAI
// operation name. Anything that is not a plain completions API is a chat.
func OperationForAPI(api string) string {
	a := strings.ToLower(api)
	if strings.Contains(a, "completion") && !strings.Contains(a, "chat") {
		return OpTextCompletion
	}
	return OpChat
}

// ProviderForAPI maps an API name to gen_ai.provider.name. The conventions
// name the provider by the protocol family it speaks; an OpenAI-compatible
// self-hosted engine is reported as "openai" because that is the wire
// protocol a backend sees, which is what the conventions' examples do too.
func ProviderForAPI(api string) string {
	if strings.Contains(strings.ToLower(api), "anthropic") {
		return "anthropic"
	}
	return "openai"
}

// SpanName is the GenAI span name: "{operation} {model}", or the operation
// alone when the model is unknown.
func SpanName(operation, model string) string {
	if model == "" {
		return operation
	}
	return operation + " " + model
}

// RequestAttributes are the attributes known before a request is sent;
// pass them at span start so samplers can see them.
func RequestAttributes(api, model string, maxTokens int) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		genaiattr.AttrOperationName.String(OperationForAPI(api)),
		genaiattr.AttrProviderName.String(ProviderForAPI(api)),
		genaiattr.AttrRequestStream.Bool(true),
	}
	if model != "" {
		kv = append(kv, genaiattr.AttrRequestModel.String(model))
	}
	if maxTokens > 0 {
		kv = append(kv, genaiattr.AttrRequestMaxTokens.Int(maxTokens))
	}
	return kv
}

// ErrorType is error.type for a failed record, as the HTTP and GenAI
// conventions spell it: the status code as a string when the server
// answered with an error status ("503"), else a low-cardinality name of
// what went wrong — ttft's error class ("timeout", "stream_cut", ...).
// Empty for a request that succeeded.
func ErrorType(rec *record.Record) string {
	if rec.ErrorClass == record.ErrNone {
		return ""
	}
	if rec.ErrorClass == record.ErrHTTPStatus && rec.Status >= 400 {
		return strconv.Itoa(rec.Status)
	}
	return rec.ErrorClass
}

// RecordAttributes are the attributes a finished record adds: response
// model, usage, time to first chunk (seconds, per the conventions), error
// type, and ttft's own timing breakdown.
func RecordAttributes(rec *record.Record) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 16)
	// The response model is the one the server reported: absent when no
	// answer came (a 503, a refused connection), never the requested one.
	if rec.ResponseModel != "" {
		kv = append(kv, genaiattr.AttrResponseModel.String(rec.ResponseModel))
	}
	if in := firstPositive(rec.PromptTokensUsage, rec.PromptTokens); in > 0 {
		kv = append(kv, genaiattr.AttrUsageInputTokens.Int(in))
	}
	if out := rec.OutputTokens(); out > 0 {
		kv = append(kv, genaiattr.AttrUsageOutputTokens.Int(out))
	}
	if rec.CachedPromptTokens > 0 {
		kv = append(kv, genaiattr.AttrUsageCacheReadInput.Int(rec.CachedPromptTokens))
	}
	if rec.FinishReason != "" {
		kv = append(kv, genaiattr.AttrResponseFinish.StringSlice([]string{rec.FinishReason}))
	}
	// gen_ai.response.id is the server's completion id; ttft's own record
	// id (the X-Request-Id it sent) has an attribute of its own.
	if rec.ResponseID != "" {
		kv = append(kv, genaiattr.AttrResponseID.String(rec.ResponseID))
	}
	if rec.ID != "" {
		kv = append(kv, genaiattr.AttrRecordID.String(rec.ID))
	}
	if !rec.FirstToken.IsZero() && !rec.Sent.IsZero() {
		kv = append(kv, genaiattr.AttrTimeToFirstChunk.Float64(rec.FirstToken.Sub(rec.Sent).Seconds()))
	}
	if rec.TTFBMs > 0 {
		kv = append(kv, genaiattr.AttrTTFBSec.Float64(rec.TTFBMs/1e3))
	}
	if rec.E2EMs > 0 {
		kv = append(kv, genaiattr.AttrE2ESec.Float64(rec.E2EMs/1e3))
	}
	if rec.TPOTMs > 0 {
		kv = append(kv, genaiattr.AttrTPOTSec.Float64(rec.TPOTMs/1e3))
	}
	if n := len(rec.ITLMs); n > 0 {
		var s float64
		for _, v := range rec.ITLMs {
			s += v
		}
		kv = append(kv, genaiattr.AttrITLMeanSec.Float64(s/float64(n)/1e3))
	}
	if rec.Status != 0 {
		kv = append(kv, genaiattr.AttrHTTPStatus.Int(rec.Status))
	}
	if rec.ErrorClass != record.ErrNone {
		kv = append(kv, genaiattr.AttrErrorType.String(ErrorType(rec)), genaiattr.AttrErrorClass.String(rec.ErrorClass))
	}
	if rec.Scenario != "" {
		kv = append(kv, genaiattr.AttrScenario.String(rec.Scenario))
	}
	if rec.Session != "" {
		kv = append(kv, genaiattr.AttrSession.String(rec.Session), genaiattr.AttrTurn.Int(rec.Turn))
	}
	if rec.Backend != "" {
		kv = append(kv, genaiattr.AttrBackend.String(rec.Backend))
	}
	if rec.Warmup {
		kv = append(kv, genaiattr.AttrWarmup.Bool(true))
	}
	return kv
}

// EndSpanFromRecord finishes a GenAI span from a final record: it sets the
// record's attributes, adds the first-token event at its real timestamp,
// marks errors, flags an SLO miss when slo > 0, and ends the span at the
// record's End time so span duration equals the request's e2e.
func EndSpanFromRecord(span trace.Span, rec *record.Record, sloTTFTSeconds float64) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(RecordAttributes(rec)...)
	if !rec.FirstToken.IsZero() {
		span.AddEvent(genaiattr.EventFirstToken, trace.WithTimestamp(rec.FirstToken),
			trace.WithAttributes(genaiattr.AttrTimeToFirstChunk.Float64(rec.FirstToken.Sub(rec.Sent).Seconds())))
	}
	if violated(rec, sloTTFTSeconds) {
		span.SetAttributes(genaiattr.AttrSLOViolated.Bool(true))
	}
	if rec.ErrorClass != record.ErrNone {
		msg := rec.Error
		if msg == "" {
			msg = rec.ErrorClass
		}
		span.SetStatus(codes.Error, msg)
	}
	if rec.End.IsZero() {
		span.End()
		return
	}
	span.End(trace.WithTimestamp(rec.End))
}

// violated reports whether a record missed a TTFT SLO of slo seconds. A
// failed request that never produced a token counts as a miss.
func violated(rec *record.Record, slo float64) bool {
	if slo <= 0 {
		return false
	}
	if rec.FirstToken.IsZero() {
		return rec.ErrorClass != record.ErrNone
	}
	return rec.FirstToken.Sub(rec.Sent).Seconds() > slo
}

func firstPositive(xs ...int) int {
	for _, x := range xs {
		if x > 0 {
			return x
		}
	}
	return 0
}

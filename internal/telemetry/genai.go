package telemetry

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/record"
)

// GenAI semantic-convention attribute keys (OpenTelemetry semconv 1.37–1.41,
// "gen_ai" registry). They are spelled out here rather than imported because
// the Go semconv packages move the GenAI group between versions (1.43 dropped
// it), and these strings are the contract with trace backends.
const (
	AttrOperationName       = attribute.Key("gen_ai.operation.name")
	AttrProviderName        = attribute.Key("gen_ai.provider.name")
	AttrRequestModel        = attribute.Key("gen_ai.request.model")
	AttrRequestMaxTokens    = attribute.Key("gen_ai.request.max_tokens")
	AttrRequestStream       = attribute.Key("gen_ai.request.stream")
	AttrResponseModel       = attribute.Key("gen_ai.response.model")
	AttrResponseID          = attribute.Key("gen_ai.response.id")
	AttrResponseFinish      = attribute.Key("gen_ai.response.finish_reasons")
	AttrTimeToFirstChunk    = attribute.Key("gen_ai.response.time_to_first_chunk") // seconds, double
	AttrUsageInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	AttrUsageOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	AttrUsageCacheReadInput = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	AttrErrorType           = attribute.Key("error.type")
	AttrServerAddress       = attribute.Key("server.address")
	AttrServerPort          = attribute.Key("server.port")
	AttrHTTPStatus          = attribute.Key("http.response.status_code")
)

// ttft's own attributes, namespaced so they never collide with semconv.
const (
	// AttrSLOViolated marks a span whose request missed its TTFT SLO; the
	// TailKeepProcessor keeps such traces even when the head sampler dropped
	// them.
	AttrSLOViolated = attribute.Key("ttft.slo.violated")
	AttrScenario    = attribute.Key("ttft.scenario")
	AttrSession     = attribute.Key("ttft.session")
	AttrTurn        = attribute.Key("ttft.turn")
	AttrWarmup      = attribute.Key("ttft.warmup")
	AttrBackend     = attribute.Key("ttft.backend")
	AttrITLMeanSec  = attribute.Key("ttft.itl.mean")
	AttrTPOTSec     = attribute.Key("ttft.tpot")
	AttrE2ESec      = attribute.Key("ttft.e2e")
	AttrTTFBSec     = attribute.Key("ttft.ttfb")
	AttrQueueSec    = attribute.Key("ttft.server.queue")
	AttrPrefillSec  = attribute.Key("ttft.server.prefill")
)

// EventFirstToken is the span event added at the first token's timestamp.
const EventFirstToken = "gen_ai.first_token"

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
		AttrOperationName.String(OperationForAPI(api)),
		AttrProviderName.String(ProviderForAPI(api)),
		AttrRequestStream.Bool(true),
	}
	if model != "" {
		kv = append(kv, AttrRequestModel.String(model))
	}
	if maxTokens > 0 {
		kv = append(kv, AttrRequestMaxTokens.Int(maxTokens))
	}
	return kv
}

// RecordAttributes are the attributes a finished record adds: response
// model, usage, time to first chunk (seconds, per the conventions), error
// type, and ttft's own timing breakdown.
func RecordAttributes(rec *record.Record) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 16)
	if rec.Model != "" {
		kv = append(kv, AttrResponseModel.String(rec.Model))
	}
	if in := firstPositive(rec.PromptTokensUsage, rec.PromptTokens); in > 0 {
		kv = append(kv, AttrUsageInputTokens.Int(in))
	}
	if out := rec.OutputTokens(); out > 0 {
		kv = append(kv, AttrUsageOutputTokens.Int(out))
	}
	if rec.CachedPromptTokens > 0 {
		kv = append(kv, AttrUsageCacheReadInput.Int(rec.CachedPromptTokens))
	}
	if rec.FinishReason != "" {
		kv = append(kv, AttrResponseFinish.StringSlice([]string{rec.FinishReason}))
	}
	if rec.ID != "" {
		kv = append(kv, AttrResponseID.String(rec.ID))
	}
	if !rec.FirstToken.IsZero() && !rec.Sent.IsZero() {
		kv = append(kv, AttrTimeToFirstChunk.Float64(rec.FirstToken.Sub(rec.Sent).Seconds()))
	}
	if rec.TTFBMs > 0 {
		kv = append(kv, AttrTTFBSec.Float64(rec.TTFBMs/1e3))
	}
	if rec.E2EMs > 0 {
		kv = append(kv, AttrE2ESec.Float64(rec.E2EMs/1e3))
	}
	if rec.TPOTMs > 0 {
		kv = append(kv, AttrTPOTSec.Float64(rec.TPOTMs/1e3))
	}
	if n := len(rec.ITLMs); n > 0 {
		var s float64
		for _, v := range rec.ITLMs {
			s += v
		}
		kv = append(kv, AttrITLMeanSec.Float64(s/float64(n)/1e3))
	}
	if rec.Status != 0 {
		kv = append(kv, AttrHTTPStatus.Int(rec.Status))
	}
	if rec.ErrorClass != record.ErrNone {
		kv = append(kv, AttrErrorType.String(rec.ErrorClass))
	}
	if rec.Scenario != "" {
		kv = append(kv, AttrScenario.String(rec.Scenario))
	}
	if rec.Session != "" {
		kv = append(kv, AttrSession.String(rec.Session), AttrTurn.Int(rec.Turn))
	}
	if rec.Backend != "" {
		kv = append(kv, AttrBackend.String(rec.Backend))
	}
	if rec.Warmup {
		kv = append(kv, AttrWarmup.Bool(true))
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
		span.AddEvent(EventFirstToken, trace.WithTimestamp(rec.FirstToken),
			trace.WithAttributes(AttrTimeToFirstChunk.Float64(rec.FirstToken.Sub(rec.Sent).Seconds())))
	}
	if violated(rec, sloTTFTSeconds) {
		span.SetAttributes(AttrSLOViolated.Bool(true))
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

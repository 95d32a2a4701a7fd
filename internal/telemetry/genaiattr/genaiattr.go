package genaiattr

import "go.opentelemetry.io/otel/attribute"

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
	AttrRequestTemperature  = attribute.Key("gen_ai.request.temperature")
	AttrTokenType           = attribute.Key("gen_ai.token.type") // metrics: "input" | "output"
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
	AttrHTTPMethod          = attribute.Key("http.request.method")
	AttrURLPath             = attribute.Key("url.path")
	AttrURLScheme           = attribute.Key("url.scheme")
	AttrURLFull             = attribute.Key("url.full")
	AttrHTTPRoute           = attribute.Key("http.route")
	AttrClientAddress       = attribute.Key("client.address")
	AttrNetworkProtocolVer  = attribute.Key("network.protocol.version")
	AttrUserAgent           = attribute.Key("user_agent.original")
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
	// AttrRecordID is ttft's own id of a request (its record's id, sent as
	// X-Request-Id); gen_ai.response.id is the server's.
	AttrRecordID = attribute.Key("ttft.request.id")
	// AttrErrorClass is ttft's error class; error.type follows the
	// conventions (the status code for an HTTP error).
	AttrErrorClass = attribute.Key("ttft.error.class")
	AttrAttempt    = attribute.Key("ttft.attempt")
	AttrITLMeanSec = attribute.Key("ttft.itl.mean")
	AttrTPOTSec    = attribute.Key("ttft.tpot")
	AttrE2ESec     = attribute.Key("ttft.e2e")
	AttrTTFBSec    = attribute.Key("ttft.ttfb")
	AttrQueueSec   = attribute.Key("ttft.server.queue")
	AttrPrefillSec = attribute.Key("ttft.server.prefill")
)

// EventFirstToken is the span event added at the first token's timestamp.
const EventFirstToken = "gen_ai.first_token"

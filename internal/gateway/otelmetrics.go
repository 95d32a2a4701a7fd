package gateway

// The gateway's GenAI server metrics (gen_ai.server.request.duration,
// time_to_first_token, time_per_output_token) through the OpenTelemetry
// metrics SDK, and error.type on the request's SERVER span. finish calls
// observeFinish once per request, before the span ends.

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/ttft-dev/ttft/internal/telemetry"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
)

// errorType is error.type for a finished request ("" for a success): the
// status code of an error answer, "canceled" when the client went away,
// "stream_cut" when a committed stream broke off.
func errorType(x *exchange) string {
	switch {
	case x.canceled:
		return "canceled"
	case x.status == 0:
		return "no_response"
	case x.status >= 400:
		return strconv.Itoa(x.status)
	case x.errMsg != "":
		return "stream_cut"
	}
	return ""
}

// observeFinish records the request in the GenAI server metrics and sets
// error.type on its span.
func (g *Gateway) observeFinish(x *exchange, e2e time.Duration) {
	et := errorType(x)
	if x.span != nil {
		if et != "" {
			x.span.SetAttributes(genaiattr.AttrErrorType.String(et))
		}
		if in := cmp.Or(x.inUsage, x.inTokens); in > 0 {
			x.span.SetAttributes(genaiattr.AttrUsageInputTokens.Int(in))
		}
	}
	if x.model == "" {
		return // refused before the request was read: not a GenAI operation
	}
	out := x.outTokens
	if out == 0 {
		out = x.events
	}
	g.otm.Record(context.Background(), telemetry.ServerRequest{API: string(x.api), Model: x.model, ErrorType: et,
		Duration: e2e, TTFT: x.ttft, OutputTokens: out})
}

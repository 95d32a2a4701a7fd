package gateway

// Traces of a request through the gateway, after the OpenTelemetry HTTP and
// GenAI conventions: the SERVER span (proxy.go's startSpan, ended by
// finish) gets the HTTP server attributes here, and each upstream attempt
// is a CLIENT span of its own, child of the SERVER span, so that a retried
// request shows one CLIENT span per backend tried, each with its backend's
// server.address/server.port and outcome. The backend request carries the
// attempt's trace context, so a traced backend continues under it.

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ttft-dev/ttft/internal/gateway/sched"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"github.com/ttft-dev/ttft/internal/wire"
)

// serverSpanHTTP adds the HTTP server attributes of r to the request's
// SERVER span: method, path and route, scheme, the server's address and
// port as the client addressed it (Host), the client's address, protocol
// version and user agent.
func serverSpanHTTP(span trace.Span, r *http.Request) {
	if !span.IsRecording() {
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	kv := make([]attribute.KeyValue, 0, 10)
	kv = append(kv, genaiattr.AttrHTTPMethod.String(r.Method), genaiattr.AttrURLPath.String(r.URL.Path),
		genaiattr.AttrHTTPRoute.String(r.URL.Path), genaiattr.AttrURLScheme.String(scheme))
	kv = append(kv, hostPort(r.Host, scheme)...)
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		kv = append(kv, genaiattr.AttrClientAddress.String(host))
	}
	if r.ProtoMajor > 0 {
		v := strconv.Itoa(r.ProtoMajor)
		if r.ProtoMajor == 1 {
			v += "." + strconv.Itoa(r.ProtoMinor)
		}
		kv = append(kv, genaiattr.AttrNetworkProtocolVer.String(v))
	}
	if ua := r.UserAgent(); ua != "" {
		kv = append(kv, genaiattr.AttrUserAgent.String(ua))
	}
	span.SetAttributes(kv...)
}

// hostPort is server.address and server.port of a host[:port], the port
// defaulting to the scheme's.
func hostPort(hp, scheme string) []attribute.KeyValue {
	if hp == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		host, port = hp, map[string]string{"http": "80", "https": "443"}[scheme]
	}
	kv := []attribute.KeyValue{genaiattr.AttrServerAddress.String(strings.Trim(host, "[]"))}
	if p, err := strconv.Atoi(port); err == nil {
		kv = append(kv, genaiattr.AttrServerPort.Int(p))
	}
	return kv
}

// tracedAttempt is Gateway.attempt inside a CLIENT span "{operation}
// {model}" for the backend tried. With tracing off it is attempt itself.
func (g *Gateway) tracedAttempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, t *sched.Ticket, u *upstream, bx backendExchange, lim Limits) *attemptError {
	if !g.tracing || !trace.SpanFromContext(ctx).IsRecording() {
		return g.attempt(ctx, w, r, x, t, u, bx, lim)
	}
	op := "chat"
	if bx.api == wire.OpenAICompletions {
		op = "text_completion"
	}
	kv := make([]attribute.KeyValue, 0, 12)
	kv = append(kv, genaiattr.AttrOperationName.String(op), genaiattr.AttrProviderName.String(bx.api.Provider()),
		genaiattr.AttrRequestModel.String(x.model), genaiattr.AttrRequestStream.Bool(x.stream),
		genaiattr.AttrHTTPMethod.String(http.MethodPost), genaiattr.AttrURLFull.String(u.cfg.URL+bx.path),
		genaiattr.AttrBackend.String(u.cfg.Name), genaiattr.AttrAttempt.Int(x.attempts))
	if x.maxTokens > 0 {
		kv = append(kv, genaiattr.AttrRequestMaxTokens.Int(x.maxTokens))
	}
	if i := strings.Index(u.cfg.URL, "://"); i > 0 {
		rest := u.cfg.URL[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			rest = rest[:j]
		}
		kv = append(kv, hostPort(rest, u.cfg.URL[:i])...)
	}
	actx, span := g.tracer.Start(ctx, op+" "+x.model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...))
	events := x.events
	ae := g.attempt(actx, w, r, x, t, u, bx, lim)
	endAttemptSpan(span, x, ae, x.events-events)
	return ae
}

// endAttemptSpan records an attempt's outcome on its span and ends it: the
// backend's status, usage and time to first token for an answer; for a
// failure error.type (the backend's status code, or what went wrong:
// "connect", "first_byte_timeout", ...) and status ERROR.
func endAttemptSpan(span trace.Span, x *exchange, ae *attemptError, events int) {
	if ae != nil {
		et := ae.reason
		if code, ok := strings.CutPrefix(ae.reason, "status_"); ok {
			et = code
			if n, err := strconv.Atoi(code); err == nil {
				span.SetAttributes(genaiattr.AttrHTTPStatus.Int(n))
			}
		} else if ae.committed && x.status != 0 {
			span.SetAttributes(genaiattr.AttrHTTPStatus.Int(x.status))
		}
		if et == "" {
			et = strconv.Itoa(ae.status)
		}
		span.SetAttributes(genaiattr.AttrErrorType.String(et))
		span.SetStatus(codes.Error, ae.msg)
		span.End()
		return
	}
	setResponseAttrs(span, x)
	kv := make([]attribute.KeyValue, 0, 5)
	if x.status != 0 {
		kv = append(kv, genaiattr.AttrHTTPStatus.Int(x.status))
	}
	if in := cmp.Or(x.inUsage, x.inTokens); in > 0 { // the backend's usage, else the gateway's estimate
		kv = append(kv, genaiattr.AttrUsageInputTokens.Int(in))
	}
	if x.outTokens > 0 {
		kv = append(kv, genaiattr.AttrUsageOutputTokens.Int(x.outTokens))
	} else if events > 0 {
		kv = append(kv, genaiattr.AttrUsageOutputTokens.Int(events))
	}
	if x.ttft > 0 {
		kv = append(kv, genaiattr.AttrTimeToFirstChunk.Float64(x.ttft.Seconds()))
	}
	span.SetAttributes(kv...)
	if x.status >= 400 {
		span.SetAttributes(genaiattr.AttrErrorType.String(strconv.Itoa(x.status)))
		span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(x.status))
	}
	span.End()
}

// setResponseAttrs puts the answer's id and model, as the backend reported
// them, on span: gen_ai.response.id and gen_ai.response.model, absent when
// no answer came (a refused connection, a 503 without a body of ours).
func setResponseAttrs(span trace.Span, x *exchange) {
	if x.respID != "" {
		span.SetAttributes(genaiattr.AttrResponseID.String(x.respID))
	}
	if x.respModel != "" {
		span.SetAttributes(genaiattr.AttrResponseModel.String(x.respModel))
	}
}

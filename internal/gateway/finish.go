package gateway

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
)

// finish records metrics and the access log line for one request.
func (g *Gateway) finish(x *exchange) {
	backend := x.backend
	if backend == "" {
		backend = "none"
	}
	class := x.class
	if class == "" {
		class = "none"
	}
	e2e := time.Since(x.start)
	code := strconv.Itoa(x.status)
	if x.canceled {
		code = "canceled"
	}
	g.m.requests.WithLabelValues(backend, class, code).Inc()
	if g.opts.OnFinish != nil && !x.canceled {
		g.opts.OnFinish(x.ttft, x.status >= 500 || x.status == 0 || x.errMsg != "")
	}
	if x.status != 0 && x.status < 400 {
		g.m.e2e.WithLabelValues(backend, class).Observe(e2e.Seconds())
		g.m.tokens.WithLabelValues(backend, "input").Add(float64(x.inTokens))
		g.m.tokens.WithLabelValues(backend, "output").Add(float64(x.outTokens))
		if u := g.st.Load().ups[x.backend]; u != nil && (u.cfg.Cost.InputPerMillion > 0 || u.cfg.Cost.OutputPerMillion > 0) {
			g.m.cost.WithLabelValues(backend).Add((float64(x.inTokens)*u.cfg.Cost.InputPerMillion + float64(x.outTokens)*u.cfg.Cost.OutputPerMillion) / 1e6)
		}
	}
	if x.ttft > 0 {
		g.m.ttft.WithLabelValues(backend, class).Observe(x.ttft.Seconds())
		if x.slo > 0 && x.ttft > x.slo {
			g.m.sloViol.WithLabelValues(backend, class).Inc()
		}
	}
	g.observeFinish(x, e2e) // GenAI server metrics, error.type (otelmetrics.go)
	if x.span != nil {
		x.span.SetAttributes(genaiattr.AttrHTTPStatus.Int(x.status), attrAttempts.Int(x.attempts), genaiattr.AttrUsageOutputTokens.Int(x.outTokens))
		if x.translated != "" {
			x.span.SetAttributes(attrTranslated.String(x.translated))
		}
		setResponseAttrs(x.span, x)
		if x.ttft > 0 {
			x.span.SetAttributes(genaiattr.AttrTimeToFirstChunk.Float64(x.ttft.Seconds()))
		}
		if x.slo > 0 && x.ttft > 0 {
			x.span.SetAttributes(genaiattr.AttrSLOViolated.Bool(x.ttft > x.slo))
		}
		if x.errMsg != "" && !x.canceled {
			x.span.SetStatus(codes.Error, x.errMsg)
		}
		x.span.End()
	}
	if g.opts.OnRecord != nil {
		g.opts.OnRecord(g.record(x, e2e))
	}
	if !*g.st.Load().cfg.AccessLog {
		return
	}
	if g.opts.AccessLog != nil {
		lp := g.lines.Get().(*[]byte)
		*lp = accessLine((*lp)[:0], time.Now(), x, e2e)
		g.opts.AccessLog.Write(*lp)
		g.lines.Put(lp)
		return
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "request", accessAttrs(x, e2e)...)
}

// record is the request as ttft's one record type (Options.OnRecord):
// times as the gateway saw them, from the request's arrival.
func (g *Gateway) record(x *exchange, e2e time.Duration) *record.Record {
	r := &record.Record{
		Index: int(g.recIndex.Add(1) - 1), Source: "gateway", Backend: x.backend, API: x.api.Provider(), Model: x.model, Scenario: x.class,
		Intended: x.start, Sent: x.start, End: x.start.Add(e2e), ITLMs: x.itl,
		PromptTokens: x.inTokens, PromptTokensUsage: x.inUsage, OutputTokensUsage: x.outTokens, OutputEvents: x.events,
		MaxTokens: x.maxTokens, NotStreamed: !x.stream, Status: x.status, Error: x.errMsg,
	}
	if x.ttft > 0 {
		r.FirstToken = x.start.Add(x.ttft)
		r.FirstContent = r.FirstToken
	}
	if x.slo > 0 || x.predicted > 0 {
		r.ServerTimings = map[string]float64{}
		if x.slo > 0 {
			r.ServerTimings["gateway_slo"] = ms(x.slo)
		}
		if x.predicted > 0 {
			r.ServerTimings["gateway_predicted_ttft_p95"] = ms(x.predicted)
		}
	}
	switch {
	case x.canceled:
		r.ErrorClass = record.ErrCanceled
	case x.status == 0 || x.status >= 400:
		r.ErrorClass = record.ErrHTTPStatus
	case x.errMsg != "":
		r.ErrorClass = record.ErrStreamCut
	case x.stream && x.ttft == 0:
		r.ErrorClass = record.ErrNoTokens
	}
	if !x.stream && r.ErrorClass == record.ErrNone {
		r.FirstToken, r.FirstContent = r.End, r.End // a whole answer's first token is its end
	}
	r.Finalize()
	return r
}

var _ prometheus.Collector = (*stateCollector)(nil)

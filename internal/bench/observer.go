package bench

import (
	"context"

	"github.com/ttft-dev/ttft/internal/record"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Observer watches requests as they run: metrics, traces, live progress.
// Start is called just before a request is sent and may return a derived
// context (a span); the context's values travel with the HTTP request, so a
// propagator may inject headers from it. Done is called once the record is
// final. Both are called from the request's goroutine and must be cheap.
type Observer interface {
	Start(ctx context.Context, req *workload.Request, rec *record.Record) context.Context
	Done(ctx context.Context, rec *record.Record)
}

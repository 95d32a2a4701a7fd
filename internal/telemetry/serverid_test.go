package telemetry

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ttft-dev/ttft/internal/bench"
	"github.com/ttft-dev/ttft/internal/sim/serve"
	"github.com/ttft-dev/ttft/internal/telemetry/genaiattr"
	"github.com/ttft-dev/ttft/internal/wire"
	"github.com/ttft-dev/ttft/internal/workload"
)

// Against the simulator over loopback, bench's spans carry what the server
// said: its completion id and model. A request the server refused (503)
// has no response model and error.type "503".
func TestSpansCarryTheServersIDAndModel(t *testing.T) {
	ctx := context.Background()
	cfg := serve.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	s, err := serve.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name   string
		fault  string
		failed bool
	}{
		{"answered", "", false},
		{"refused", "error=503", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tp, exp := newRecorder()
			hdr := http.Header{}
			if c.fault != "" {
				hdr.Set(serve.FaultHeader, c.fault)
			}
			src, err := workload.NewFixed(workload.FixedOptions{PromptTokens: 16, MaxTokens: 4, Chat: true, Seed: 1, Requests: 3})
			if err != nil {
				t.Fatal(err)
			}
			r, err := bench.New(bench.Options{API: wire.OpenAIChat, BaseURL: s.URL(), Target: s.URL(), Concurrency: 1, Requests: 3, RunID: "r",
				Timeout:   10 * time.Second,
				Request:   wire.RequestOptions{Model: s.ModelName(), Temperature: 0.25, Headers: hdr},
				Observers: []bench.Observer{NewTraceObserver(tp, "", "", s.URL(), 0)}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Run(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			spans := exp.GetSpans()
			if len(spans) != 3 || len(res.Records) != 3 {
				t.Fatalf("%d spans, %d records; want 3", len(spans), len(res.Records))
			}
			ids := map[string]bool{}
			for i, sp := range spans {
				a := attrMap(sp.Attributes)
				rec := res.Records[i]
				if a[genaiattr.AttrRequestTemperature].AsFloat64() != 0.25 {
					t.Errorf("span %d: temperature %v, want 0.25", i, a[genaiattr.AttrRequestTemperature])
				}
				_, hasModel := a[genaiattr.AttrResponseModel]
				id := a[genaiattr.AttrResponseID].AsString()
				if c.failed {
					if hasModel || id != "" || a[genaiattr.AttrErrorType].AsString() != "503" || rec.ResponseModel != "" {
						t.Errorf("span %d of a refused request: response.model present %v, id %q, error.type %v", i, hasModel, id, a[genaiattr.AttrErrorType])
					}
					continue
				}
				if got := a[genaiattr.AttrResponseModel].AsString(); got != s.ModelName() || rec.ResponseModel != got {
					t.Errorf("span %d: response.model %q (record %q), want the simulator's %q", i, got, rec.ResponseModel, s.ModelName())
				}
				if !strings.HasPrefix(id, "chatcmpl-") || id != rec.ResponseID || id == rec.ID {
					t.Errorf("span %d: response.id %q, record's %q, ttft's own %q: want the server's chatcmpl-… id", i, id, rec.ResponseID, rec.ID)
				}
				ids[id] = true
			}
			if !c.failed && len(ids) != 3 {
				t.Errorf("%d distinct completion ids for 3 requests", len(ids))
			}
		})
	}
}

package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ttft-dev/ttft/internal/record"
)

// edgeRow is one line of the §4.2 reproduction: batch-1 requests on one
// device, measured by the offline runner like any other simulated run.
type edgeRow struct {
	name                       string
	ttftMs, itlMs, tokS, e2eMs float64
	memMB                      float64
}

func runEdge(t *testing.T, cfg Config, prompt, output int) edgeRow {
	t.Helper()
	d, err := Resolve(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*record.Record
	const n = 5
	_, err = Run(context.Background(), d, &LengthSource{PromptTokens: prompt, MaxTokens: output, MinTokens: output, Requests: n}, RunOptions{Concurrency: 1}, func(r *record.Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	var row edgeRow
	row.name = d.Name()
	if cfg.Speculative.DraftModel != "" {
		row.name += " + " + cfg.Speculative.DraftModel + " draft"
	}
	for _, r := range recs {
		if !r.OK() || r.OutputTokens() != output {
			t.Fatalf("record %+v", r)
		}
		row.ttftMs += r.TTFTMs / n
		row.e2eMs += r.E2EMs / n
		decodeMs := r.E2EMs - r.TTFTMs
		row.itlMs += decodeMs / float64(output-1) / n
		row.tokS += float64(output-1) / (decodeMs / 1e3) / n
	}
	row.memMB = d.FootprintBytes(prompt+output) / 1e6
	return row
}

// TestEdgeSpeculativeGolden reproduces the article's §4.2 setup with the
// simulator: Llama-3-8B in int4 on a Raspberry Pi 5 (llama.cpp-style
// engine), without and with a Llama-3.2-1B int4 draft model proposing 4
// tokens accepted with probability 0.85 each. The figures are pinned in
// testdata/edge_spec.golden (regenerate with -update) and discussed in
// docs/simulator-validation.md; the test also asserts the physics: the
// draft lifts decode throughput, leaves TTFT alone (prefill is not
// speculated) and adds its own weights to the footprint.
func TestEdgeSpeculativeGolden(t *testing.T) {
	const prompt, output = 32, 128
	base := Config{Model: "llama-3-8b", GPU: "raspberry-pi-5", Engine: "llamacpp", Quantization: "int4", MaxModelLen: 4096}
	spec := base
	spec.Speculative = SpecConfig{NumSpeculativeTokens: 4, Acceptance: 0.85, DraftModel: "llama-3.2-1b"}
	noDraftCost := base
	noDraftCost.Speculative = SpecConfig{NumSpeculativeTokens: 4, Acceptance: 0.85}
	rows := []edgeRow{runEdge(t, base, prompt, output), runEdge(t, spec, prompt, output), runEdge(t, noDraftCost, prompt, output)}
	rows[2].name += " + free drafter (n-gram)"

	var b strings.Builder
	fmt.Fprintf(&b, "# prompt %d tokens, %d output tokens, batch 1, means of 5 requests\n", prompt, output)
	fmt.Fprintln(&b, "deployment | ttft ms | ms/output token | output tok/s | e2e ms | footprint MB")
	for _, r := range rows {
		fmt.Fprintf(&b, "%s | %.0f | %.0f | %.2f | %.0f | %.0f\n", r.name, r.ttftMs, r.itlMs, r.tokS, r.e2eMs, r.memMB)
	}
	fmt.Fprintf(&b, "speedup (draft) | ttft x%.2f | ms/token x%.2f | tok/s x%.2f | e2e x%.2f | memory x%.2f\n",
		rows[1].ttftMs/rows[0].ttftMs, rows[1].itlMs/rows[0].itlMs, rows[1].tokS/rows[0].tokS, rows[1].e2eMs/rows[0].e2eMs, rows[1].memMB/rows[0].memMB)
	got := b.String()
	t.Log("\n" + got)

	plain, draft := rows[0], rows[1]
	if draft.tokS <= 1.5*plain.tokS {
		t.Errorf("draft model lifts decode only %.2f → %.2f tok/s", plain.tokS, draft.tokS)
	}
	if r := draft.ttftMs / plain.ttftMs; r < 0.99 || r > 1.01 {
		t.Errorf("speculative decoding changed TTFT %.0f → %.0f ms", plain.ttftMs, draft.ttftMs)
	}
	if draft.memMB <= plain.memMB || rows[2].tokS <= draft.tokS {
		t.Errorf("draft should cost memory and time: footprints %.0f/%.0f MB, tok/s with free drafter %.2f vs %.2f", plain.memMB, draft.memMB, rows[2].tokS, draft.tokS)
	}

	checkGolden(t, "edge_spec.golden", "§4.2 reproduction", got)
}

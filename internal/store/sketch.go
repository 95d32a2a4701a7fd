package store

import (
	"fmt"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/ttft-dev/ttft/internal/record"
)

// SketchAccuracy is the relative accuracy of the shards' sketches: any
// quantile read from a merged sketch is within 0.5% of a value of that rank,
// so merged P50/P90/P99 stay within 1% of the exact ones however many
// shards and requests there are.
const SketchAccuracy = 0.005

// sketchMetrics are the metrics sketched per shard, of completed measured
// requests; ITL pools every gap, as the summary does.
var sketchMetrics = []struct {
	name string
	vals func(r *record.Record) []float64
}{
	{"ttft_ms", func(r *record.Record) []float64 { return []float64{r.TTFTMs} }},
	{"ttft_intended_ms", func(r *record.Record) []float64 { return []float64{r.TTFTIntendedMs} }},
	{"tpot_ms", func(r *record.Record) []float64 { return []float64{r.TPOTMs} }},
	{"e2e_ms", func(r *record.Record) []float64 { return []float64{r.E2EMs} }},
	{"itl_ms", func(r *record.Record) []float64 { return r.ITLMs }},
}

func newSketch() *ddsketch.DDSketch {
	m, err := mapping.NewLogarithmicMapping(SketchAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in (0, 1) cannot fail
	}
	return ddsketch.NewDDSketch(m, store.NewDenseStore(), store.NewDenseStore())
}

// Sketches encodes one DDSketch per metric over the completed measured
// records (zero values, such as a one-token request's TPOT, are left out
// as the summary leaves them out).
func Sketches(recs []record.Record) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, m := range sketchMetrics {
		sk := newSketch()
		for i := range recs {
			r := &recs[i]
			if r.Warmup || r.ErrorClass != "" {
				continue
			}
			for _, v := range m.vals(r) {
				if v > 0 {
					if err := sk.Add(v); err != nil {
						return nil, fmt.Errorf("sketching %s: %w", m.name, err)
					}
				}
			}
		}
		var b []byte
		sk.Encode(&b, false)
		out[m.name] = b
	}
	return out, nil
}

// MergeSketches merges the shards' encoded sketches metric by metric.
func MergeSketches(shards []map[string][]byte) (map[string]*ddsketch.DDSketch, error) {
	out := map[string]*ddsketch.DDSketch{}
	for i, sh := range shards {
		for name, b := range sh {
			sk, ok := out[name]
			if !ok {
				sk = newSketch()
				out[name] = sk
			}
			if err := sk.DecodeAndMergeWith(b); err != nil {
				return nil, fmt.Errorf("shard %d: decoding the %s sketch: %w", i, name, err)
			}
		}
	}
	return out, nil
}
